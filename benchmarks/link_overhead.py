"""What `drill link` with no toxic set costs a unary call: added latency, the rate one core carries, CPU per call.

    .venv/bin/python benchmarks/link_overhead.py [--seconds 10 --rounds 3 --rates 200,2000,5000]

A Go service (tests/proxy/goprobe, grpc-go) answers `Echo`; an open-loop Go client (benchmarks/goload: call i
leaves at i/rate whatever the answers do, each with a 1-s deadline, over 4 connections) shares one core with it
(taskset). `drill link` (no toxic set: every byte relayed, every frame header read, the client's header blocks
decoded) has the other core to itself; so has, for the yardsticks, a bare grpc.aio echo server
(`_bare_echo.py`: the least a Python gRPC server does for a unary call) and a Go byte relay (benchmarks/gorelay:
io.Copy both ways, nothing parsed: the least a relay does). Side by side in one run, for each rate and round:
straight to the Go service, through the link, through the Go relay, and to the bare grpc.aio server; per path
the OK calls' p50 and p99, the share answered OK, and CPU per call of the process on the measured core from /proc.
At the lowest rate the link and the Go relay are measured a second time on the load's core (`… same core`): a
relay on a core of its own wakes that idle core, and the load's, at every segment, which on a virtual machine
costs more than the relaying; on the load's core that cost is not paid.

Goals (issue 48): the link adds ≤ 0.15 ms p50 at 200 calls/s; carries ≥ 5,000 unary calls/s through one core;
its CPU per call ≤ 0.5× the bare grpc.aio server's. The last line is machine-readable: `link_overhead
added_p50_ms_200=… gorelay_added_p50_ms_200=… same_core_added_p50_ms_200=… gorelay_same_core_added_p50_ms_200=…
link_ok_share_5000=… link_p99_ms_5000=… link_cpu_us=… bare_aio_cpu_us=… cpu_ratio=…`.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._cpu import cores, cpu_seconds, header, popen_pinned, stop_all  # noqa: E402
from benchmarks.proxy_overhead import wait_file  # noqa: E402
from tests.proxy.probe import SERVICE, build, go_build  # noqa: E402


def load(goload: pathlib.Path, cpu: int, port: int, rate: float, seconds: float, pid: int | None) -> dict:
    """One goload run against 127.0.0.1:`port`; its JSON, and `cpu_us` per call of `pid` (None: not measured)."""
    argv = ["taskset", "-c", str(cpu), str(goload), "-addr", f"127.0.0.1:{port}", "-method", SERVICE + "Echo",
            "-rate", f"{rate:.0f}", "-seconds", str(seconds), "-timeout", "1", "-conns", "4"]  # fmt: skip
    c0 = cpu_seconds(pid) if pid else 0.0
    out = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True, timeout=seconds + 70).stdout)
    sent = sum(out["status"].values())
    ok = out["status"].get("OK", 0)
    lat = out["latency_ms"].get("OK", {})
    return {"sent": sent, "ok_share": ok / sent if sent else 0.0, "p50": lat.get("p50", float("nan")),
            "p99": lat.get("p99", float("nan")),
            "cpu_us": (cpu_seconds(pid) - c0) / sent * 1e6 if pid and sent else float("nan")}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of load per path, rate and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rates", default="200,2000,5000", help="offered calls/s, comma-separated")
    ap.add_argument("--event-loop", default="auto", help="drill link's --event-loop")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    server_cpu, client_cpu = cores()
    print(header("link_overhead"))
    print(f"# the box is shared (other work runs beside this one: see the load average); Go service and goload on "
          f"cpu {client_cpu}, the link, the Go relay or the bare grpc.aio server on cpu {server_cpu} (at the lowest "
          f"rate the link and the Go relay also on cpu {client_cpu}); {args.rounds} rounds of "
          f"{args.seconds:g} s per path and rate, 4 connections, 64-byte bodies, 1-s deadlines, link event loop "
          f"{args.event_loop}", flush=True)  # fmt: skip
    goload = go_build(ROOT / "benchmarks" / "goload")
    gorelay = go_build(ROOT / "benchmarks" / "gorelay")
    procs = []
    results: dict[tuple[str, float], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        try:
            go = popen_pinned([str(build()), str(tmp / "go.port")], client_cpu, stderr=subprocess.DEVNULL)
            procs.append(go)
            go_port = int(wait_file(tmp / "go.port", go, "the Go service"))
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            links = {}
            for where, cpu in (("", server_cpu), (" same core", client_cpu)):
                ready = tmp / f"link{cpu}.json"
                link = popen_pinned([sys.executable, "-m", "harness.cli", "link", "--upstream", f"127.0.0.1:{go_port}",
                                     "--port", "0", "--event-loop", args.event_loop, "--ready-file", str(ready)],
                                    cpu, env=env, stderr=subprocess.DEVNULL)  # fmt: skip
                procs.append(link)
                links["drill link" + where] = (json.loads(wait_file(ready, link, "drill link"))["port"], link.pid)
                relay = popen_pinned([str(gorelay), f"127.0.0.1:{go_port}", str(tmp / f"relay{cpu}.port")], cpu)
                procs.append(relay)
                links["go relay" + where] = (int(wait_file(tmp / f"relay{cpu}.port", relay, "the Go relay")), relay.pid)
            bare = popen_pinned([sys.executable, str(ROOT / "benchmarks" / "_bare_echo.py"), str(tmp / "bare.port")],
                                server_cpu, env=env)  # fmt: skip
            procs.append(bare)
            bare_port = int(wait_file(tmp / "bare.port", bare, "the bare grpc.aio server"))
            paths = {"direct": (go_port, None), **links, "bare grpc.aio": (bare_port, bare.pid)}
            for port, pid in paths.values():  # connections up, every path warm
                load(goload, client_cpu, port, 500, 2, pid)
            for r in range(args.rounds):
                for rate in rates:
                    for name, (port, pid) in paths.items():
                        if name.endswith("same core") and rate != rates[0]:
                            continue
                        res = load(goload, client_cpu, port, rate, args.seconds, pid)
                        results.setdefault((name, rate), []).append(res)
                        cpu = "" if pid is None else f", {res['cpu_us']:.0f} µs CPU/call"
                        print(f"round {r + 1} {rate:>6.0f}/s {name:22s} OK {res['ok_share']:.2%} p50 {res['p50']:.3f} "
                              f"ms p99 {res['p99']:.3f} ms{cpu}", flush=True)  # fmt: skip
        finally:
            stop_all(procs)

    def med(name: str, rate: float, key: str) -> float:
        return statistics.median(x[key] for x in results[(name, rate)])

    print("# medians over rounds")
    for rate in rates:
        for name in sorted({n for n, r in results if r == rate}, key=list(paths).index):
            print(f"{rate:>6.0f}/s {name:22s} OK {med(name, rate, 'ok_share'):.2%} p50 {med(name, rate, 'p50'):.3f} ms "
                  f"p99 {med(name, rate, 'p99'):.3f} ms CPU/call {med(name, rate, 'cpu_us'):.0f} µs")  # fmt: skip
        added = med("drill link", rate, "p50") - med("direct", rate, "p50")
        link_cpu, bare_cpu = med("drill link", rate, "cpu_us"), med("bare grpc.aio", rate, "cpu_us")
        print(f"{rate:>6.0f}/s drill link adds p50 {added:+.3f} ms; CPU per call {link_cpu / bare_cpu:.2f}x the bare "
              f"server's; its core {link_cpu * rate / 1e4:.1f} % busy; the Go relay adds "
              f"{med('go relay', rate, 'p50') - med('direct', rate, 'p50'):+.3f} ms")  # fmt: skip
    low, high = rates[0], rates[-1]
    # CPU per call compared where both carry the load: the lowest rate's and every rate's the bare server kept up at
    link_cpu = statistics.median(med("drill link", r, "cpu_us") for r in rates)
    bare_cpu = statistics.median(med("bare grpc.aio", r, "cpu_us") for r in rates)

    def added(name: str) -> float:
        return med(name, low, "p50") - med("direct", low, "p50")

    print(f"{low:>6.0f}/s on the load's core: drill link adds p50 {added('drill link same core'):+.3f} ms, "
          f"the Go relay {added('go relay same core'):+.3f} ms")  # fmt: skip
    print(f"link_overhead added_p50_ms_{low:.0f}={added('drill link'):.3f} "
          f"gorelay_added_p50_ms_{low:.0f}={added('go relay'):.3f} "
          f"same_core_added_p50_ms_{low:.0f}={added('drill link same core'):.3f} "
          f"gorelay_same_core_added_p50_ms_{low:.0f}={added('go relay same core'):.3f} "
          f"link_ok_share_{high:.0f}={med('drill link', high, 'ok_share'):.4f} "
          f"link_p99_ms_{high:.0f}={med('drill link', high, 'p99'):.3f} link_cpu_us={link_cpu:.1f} "
          f"bare_aio_cpu_us={bare_cpu:.1f} cpu_ratio={link_cpu / bare_cpu:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
