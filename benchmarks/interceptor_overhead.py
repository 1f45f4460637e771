"""Server throughput and CPU per call with the fault interceptor vs without, aio and sync, server pinned apart.

    .venv/bin/python benchmarks/interceptor_overhead.py [--seconds 1.5 --rounds 15 --flavour both]

One server process per mode (`_bench_server.py`: baseline, off, on, on-trace,
on-trace-unsampled), all pinned to one core; this process drives them in turn
from another core (`os.sched_setaffinity`), in interleaved rounds, with an aio
client keeping 64 calls in flight (organic, untagged calls: what production sees
while a drill targets the drill tenant). The server is the bottleneck (its own
core, more CPU per call than the client), so its throughput ratio to baseline is
what users feel, and its CPU per call from /proc is the sharper figure. Each
round's figure is divided by the same round's baseline; the medians of those
ratios are reported with their range, so the spread shows.

The last line is machine-readable:
`throughput_ratio aio_baseline=1.000 aio_off=… aio_on=… aio_on_trace=… aio_on_trace_unsampled=… sync_…`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import subprocess
import sys
import time

from grpc import aio

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._bench_server import MODES  # noqa: E402
from benchmarks._cpu import cores, cpu_seconds, header, load_average, popen_pinned  # noqa: E402
from harness.demo.proto import drill_pb2, drill_pb2_grpc  # noqa: E402

#: The checkout whose interceptors the servers run (`--tree`; default: this one).
TREE = [str(ROOT)]


def start(flavour: str, mode: str, core: int) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DRILL_BENCH_TREE": TREE[0]}
    env.pop("OTEL_TRACES_SAMPLER", None)  # each tracing mode sets its own
    proc = popen_pinned(
        [sys.executable, str(ROOT / "benchmarks" / "_bench_server.py"), flavour, mode],
        core, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    port = int(proc.stdout.readline())
    return proc, port


async def drive(port: int, seconds: float, concurrency: int) -> tuple[int, float]:
    """(calls completed, seconds taken) with `concurrency` calls in flight for `seconds`."""
    done = 0
    async with aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = drill_pb2_grpc.DemoStub(ch)
        req = drill_pb2.CallRequest()
        for _ in range(concurrency):  # warm the connection
            await stub.Call(req)
        start = time.monotonic()
        stop = start + seconds

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < stop:
                await stub.Call(req)
                done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done, time.monotonic() - start


def bench(flavour: str, seconds: float, rounds: int, concurrency: int) -> dict[str, dict[str, list[float]]]:
    server_core, client_core = cores()
    os.sched_setaffinity(0, {client_core})
    servers = {mode: start(flavour, mode, server_core) for mode in MODES}
    got: dict[str, dict[str, list[float]]] = {m: {"rps": [], "server_us": [], "client_us": []} for m in MODES}
    try:
        for r in range(rounds):
            for mode in MODES if r % 2 == 0 else tuple(reversed(MODES)):
                proc, port = servers[mode]
                s0, c0 = cpu_seconds(proc.pid), time.process_time()
                n, took = asyncio.run(drive(port, seconds, concurrency))
                s1, c1 = cpu_seconds(proc.pid), time.process_time()
                got[mode]["rps"].append(n / took)
                got[mode]["server_us"].append((s1 - s0) / max(n, 1) * 1e6)
                got[mode]["client_us"].append((c1 - c0) / max(n, 1) * 1e6)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=10)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--flavour", choices=("aio", "sync", "both"), default="both")
    ap.add_argument("--tree", default=str(ROOT), help="checkout whose interceptors the servers run")
    args = ap.parse_args()
    TREE[0] = str(pathlib.Path(args.tree).resolve())
    print(header("interceptor_overhead"), flush=True)
    saved = os.sched_getaffinity(0)
    summary = []
    try:
        for flavour in ("aio", "sync") if args.flavour == "both" else (args.flavour,):
            got = bench(flavour, args.seconds, args.rounds, args.concurrency)
            print(f"\n{flavour}: {args.rounds} interleaved rounds x {args.seconds:g} s, {args.concurrency} in flight, "
                  "server and client on separate cores; ratios are medians of each round's ratio to that "
                  "round's baseline (paired, so a slow spell of the machine falls on both)")  # fmt: skip
            print(f"{'mode':<20}{'calls/s':>9}{'ratio':>8}{'server µs/call':>16}{'cpu ratio':>11}"
                  f"{'client µs/call':>16}   min-max ratio")  # fmt: skip
            base = got["baseline"]
            for mode in MODES:
                g = got[mode]
                ratios = [r / b for r, b in zip(g["rps"], base["rps"], strict=True)]
                cpu = [c / b for c, b in zip(g["server_us"], base["server_us"], strict=True)]
                ratio = statistics.median(ratios)
                print(f"{mode:<20}{statistics.median(g['rps']):>9.0f}{ratio:>8.3f}"
                      f"{statistics.median(g['server_us']):>16.1f}{statistics.median(cpu):>11.3f}"
                      f"{statistics.median(g['client_us']):>16.1f}   {min(ratios):.3f}-{max(ratios):.3f}")  # fmt: skip
                summary.append(f"{flavour}_{mode.replace('-', '_')}={ratio:.3f}")
    finally:
        os.sched_setaffinity(0, saved)
    print(f"# load average at end: {load_average()}")
    print("throughput_ratio " + " ".join(summary))


if __name__ == "__main__":
    main()
