"""Delay accuracy: observed minus requested latency of `delay:MS`, against the same run's no-delay calls.

    .venv/bin/python benchmarks/delay_accuracy.py [--rps 500 --seconds 5 --delay 100 --phase 1]

Per server flavour (aio, then sync with 64 threads), a server with the fault
switch on is pinned to one core and this process offers an open-loop rate of
drill-tenant calls from another core (a new call every 1/rps s, whatever the
responses take), alternating phases of `--phase` seconds: calls with
`x-fault: delay:MS`, then the same calls without a directive, until each kind has
run `--seconds`. The no-delay calls give the run's own floor (client, network,
server); a delay adds at most its timer's lateness on top of that floor, so the
figure to judge is p99(observed - requested) against the no-delay p99 of the same
run. Also printed: the server's CPU per call in each kind of phase.

The aio server runs twice: as it starts, and with its heap frozen once started
(`gc.collect(); gc.freeze()`). A call held 100 ms keeps its objects (grpc's and
ours) alive through the collector's young generations, so at 500 calls/s they
reach the oldest one fast and trigger full collections every few seconds; each
scans the whole heap, and every delayed call whose wake-up falls in it is late by
up to that pause. Frozen, a full collection skips the
startup objects and the pause shrinks to what the drill itself allocated.

The last line is machine-readable:
`delay_accuracy aio_p50_ms=… aio_p99_ms=… aio_baseline_p50_ms=… aio_baseline_p99_ms=… aio_frozen_… sync_…`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import subprocess
import sys
import time

from grpc import aio

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._cpu import cores, cpu_seconds, header, load_average, popen_pinned  # noqa: E402
from harness.demo.proto import drill_pb2, drill_pb2_grpc  # noqa: E402

#: The checkout whose interceptors the servers run (`--tree`; default: this one).
TREE = [str(ROOT)]
from harness.interceptors import DrillClientInterceptor, Tagging  # noqa: E402

TENANT = "tenant-drill"


def quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def offer(port: int, rps: float, seconds: float, phase_s: float, delay_ms: int, server_pid: int) -> dict:
    """Alternating delay / no-delay phases of open-loop calls; per kind: (observed - requested) ms, server CPU."""
    delayed = DrillClientInterceptor(Tagging(tenant=TENANT, directive=f"delay:{delay_ms}"))
    plain = DrillClientInterceptor(Tagging(tenant=TENANT))
    out = {kind: {"lat": [], "errors": 0, "cpu": 0.0, "calls": 0} for kind in ("delay", "baseline")}
    async with (
        aio.insecure_channel(f"127.0.0.1:{port}", interceptors=[delayed]) as ch_delay,
        aio.insecure_channel(f"127.0.0.1:{port}", interceptors=[plain]) as ch_plain,
    ):
        stubs = {"delay": drill_pb2_grpc.DemoStub(ch_delay), "baseline": drill_pb2_grpc.DemoStub(ch_plain)}
        for stub in stubs.values():  # connect and warm up
            await asyncio.gather(*(stub.Call(drill_pb2.CallRequest(), timeout=delay_ms / 1000 + 5) for _ in range(50)))
        requested = {"delay": delay_ms, "baseline": 0}

        async def one(kind: str) -> None:
            t0 = time.perf_counter()
            try:
                await stubs[kind].Call(drill_pb2.CallRequest(), timeout=delay_ms / 1000 + 5)
                out[kind]["lat"].append((time.perf_counter() - t0) * 1000 - requested[kind])
            except aio.AioRpcError:
                out[kind]["errors"] += 1

        tasks = []
        phases = max(1, round(seconds / phase_s)) * 2
        per_phase = int(rps * phase_s)
        for p in range(phases):
            kind = "delay" if p % 2 == 0 else "baseline"
            cpu0 = cpu_seconds(server_pid)
            start = time.perf_counter()
            for i in range(per_phase):
                wait = start + i / rps - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                tasks.append(asyncio.ensure_future(one(kind)))
            # the phase's calls end within delay + a little; their CPU is counted up to the next phase start
            await asyncio.sleep(max(0.0, start + phase_s - time.perf_counter()))
            out[kind]["cpu"] += cpu_seconds(server_pid) - cpu0
            out[kind]["calls"] += per_phase
        await asyncio.gather(*tasks)
    return out


def run_flavour(flavour: str, args, freeze: bool = False) -> dict:
    server_core, client_core = cores()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DRILL_BENCH_TREE": TREE[0]}
    proc = popen_pinned(
        [sys.executable, str(ROOT / "benchmarks" / "_bench_server.py"), flavour, "on", *(["--gc-freeze"] * freeze)],
        server_core, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {client_core})
    try:
        port = int(proc.stdout.readline())
        return asyncio.run(offer(port, args.rps, args.seconds, args.phase, args.delay, proc.pid))
    finally:
        os.sched_setaffinity(0, saved)
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rps", type=float, default=500)
    ap.add_argument("--seconds", type=float, default=5, help="seconds of each kind of phase in all")
    ap.add_argument("--phase", type=float, default=1.0, help="length of one phase")
    ap.add_argument("--delay", type=int, default=100)
    ap.add_argument("--tree", default=str(ROOT), help="checkout whose interceptors the servers run")
    args = ap.parse_args()
    TREE[0] = str(pathlib.Path(args.tree).resolve())
    print(header("delay_accuracy"), flush=True)
    line = []
    for flavour, freeze in (("aio", False), ("aio", True), ("sync", False)):
        got = run_flavour(flavour, args, freeze)
        name = f"{flavour}_frozen" if freeze else flavour
        d, b = got["delay"], got["baseline"]
        fig = {
            "p50": quantile(d["lat"], 0.5), "p99": quantile(d["lat"], 0.99),
            "baseline_p50": quantile(b["lat"], 0.5), "baseline_p99": quantile(b["lat"], 0.99),
        }  # fmt: skip
        print(
            f"{flavour}{', server heap frozen once started (gc.freeze)' if freeze else ''}: delay:{args.delay} vs "
            f"no delay, {args.rps:g} calls/s open loop, {args.phase:g}-s phases, "
            f"{args.seconds:g} s of each\n"
            f"  delay:    {len(d['lat'])} ok, {d['errors']} errors, {sum(x < 0 for x in d['lat'])} not delayed; "
            f"observed - requested p50 {fig['p50']:.2f} ms, "
            f"p99 {fig['p99']:.2f} ms, min {min(d['lat']):.2f} ms; server {d['cpu'] / d['calls'] * 1e6:.0f} µs/call\n"
            f"  no delay: {len(b['lat'])} ok, {b['errors']} errors; latency p50 {fig['baseline_p50']:.2f} ms, "
            f"p99 {fig['baseline_p99']:.2f} ms; server {b['cpu'] / b['calls'] * 1e6:.0f} µs/call\n"
            f"  delay p99 - no-delay p99: {fig['p99'] - fig['baseline_p99']:+.2f} ms",
            flush=True,
        )
        line += [f"{name}_{k}_ms={v:.2f}" for k, v in fig.items()]
    print(f"# load average at end: {load_average()}")
    print("delay_accuracy " + " ".join(line))


if __name__ == "__main__":
    main()
