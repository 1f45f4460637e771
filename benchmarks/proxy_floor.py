"""How much of `drill proxy`'s added latency is the gRPC library's: the proxy beside the least a Python forwarder does.

    .venv/bin/python benchmarks/proxy_floor.py [--calls 600 --rounds 5]

A Go service (tests/proxy/goprobe, grpc-go) answers `Echo`. One caller sends unary calls one at a time
(2 ms apart, so no call queues behind another: the latency of one call, not of a load) straight to it,
through `drill proxy` (injection on, the calls untagged), through a minimal grpc.aio forwarder and through a
minimal thread-pool (sync) forwarder (`_min_forwarder.py`: no interceptor, no metadata or status relay). The
three forwarders are pinned to one core, the caller and the Go service to the other. Each round takes
`--calls` calls on every path in turn; the p50 of each path per round, then the median over rounds, and what
each forwarder adds to the direct p50.

The last line is machine-readable: `proxy_floor direct_p50_ms=… drill_proxy_added_ms=… aio_floor_added_ms=…
sync_floor_added_ms=…`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from grpc import aio

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._cpu import cores, header, popen_pinned, stop_all  # noqa: E402
from benchmarks.proxy_overhead import wait_file  # noqa: E402
from tests.proxy.probe import SERVICE, build, descriptor_set, message_class  # noqa: E402

PATHS = ("direct", "drill proxy", "grpc.aio floor", "sync floor")


async def measure(addresses: dict[str, str], request: bytes, calls: int, rounds: int) -> dict[str, list[float]]:
    channels = {k: aio.insecure_channel(a) for k, a in addresses.items()}
    stubs = {k: c.unary_unary(SERVICE + "Echo") for k, c in channels.items()}
    p50: dict[str, list[float]] = {k: [] for k in addresses}
    for k in addresses:  # connections up and every path warm before anything counts
        for _ in range(200):
            await stubs[k](request, timeout=5)
    for r in range(rounds):
        for k in addresses:
            latencies = []
            for _ in range(calls):
                t0 = time.perf_counter()
                await stubs[k](request, timeout=5)
                latencies.append(time.perf_counter() - t0)
                await asyncio.sleep(0.002)
            p50[k].append(statistics.median(latencies) * 1000)
        print(f"round {r + 1}: " + " | ".join(f"{k} p50 {v[-1]:.3f} ms" for k, v in p50.items()), flush=True)
    for c in channels.values():
        await c.close()
    return p50


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=600, help="calls per path per round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    server_cpu, client_cpu = cores()
    print(header("proxy_floor"))
    print(f"# {args.rounds} rounds of {args.calls} calls per path, one at a time 2 ms apart; forwarders on cpu "
          f"{server_cpu}, Go service and this caller on cpu {client_cpu}", flush=True)  # fmt: skip
    os.sched_setaffinity(0, {client_cpu})
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        msg = message_class(descriptor_set(tmp / "probe.pb"))
        try:
            go = popen_pinned([str(build()), str(tmp / "go.port")], client_cpu, stderr=subprocess.DEVNULL)
            procs.append(go)
            direct = f"127.0.0.1:{wait_file(tmp / 'go.port', go, 'the Go service')}"
            env = {**os.environ, "PYTHONPATH": str(ROOT), "DRILL_FAULT_ENABLED": "true"}
            proxy = popen_pinned([sys.executable, "-m", "harness.cli", "proxy", "--upstream", direct, "--port", "0",
                                  "--metrics-port", "0", "--service", "probe", "--descriptor-set",
                                  str(tmp / "probe.pb"), "--ready-file", str(tmp / "proxy.json")],
                                 server_cpu, env=env, stderr=subprocess.DEVNULL)  # fmt: skip
            procs.append(proxy)
            ready = json.loads(wait_file(tmp / "proxy.json", proxy, "drill proxy"))
            addresses = {"direct": direct, "drill proxy": f"127.0.0.1:{ready['port']}"}
            for flavour, name in (("aio", "grpc.aio floor"), ("sync", "sync floor")):
                port_file = tmp / f"{flavour}.port"
                p = popen_pinned([sys.executable, str(ROOT / "benchmarks" / "_min_forwarder.py"), flavour, direct,
                                  str(port_file)], server_cpu, env=env)  # fmt: skip
                procs.append(p)
                addresses[name] = f"127.0.0.1:{wait_file(port_file, p, name)}"
            request = msg(id="organic", body=b"x" * 64).SerializeToString()
            p50 = asyncio.run(measure(addresses, request, args.calls, args.rounds))
        finally:
            stop_all(procs)
    med = {k: statistics.median(v) for k, v in p50.items()}
    for k in PATHS:
        added = "" if k == "direct" else f", adds {med[k] - med['direct']:+.3f} ms"
        print(f"{k:15s} p50 {med[k]:.3f} ms (rounds {min(p50[k]):.3f}..{max(p50[k]):.3f}){added}")
    print(f"proxy_floor direct_p50_ms={med['direct']:.3f} "
          f"drill_proxy_added_ms={med['drill proxy'] - med['direct']:.3f} "
          f"aio_floor_added_ms={med['grpc.aio floor'] - med['direct']:.3f} "
          f"sync_floor_added_ms={med['sync floor'] - med['direct']:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
