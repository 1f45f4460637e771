"""Server throughput and CPU per call with the fault interceptor vs without, aio and sync, server pinned apart.

    .venv/bin/python benchmarks/interceptor_overhead.py [--seconds 1 --rounds 15 --flavour both]

One server process per mode (`_bench_server.py`: baseline, off, on, on-trace,
on-trace-unsampled, on-trace-exported), all pinned to one core; this process drives
them in turn from another core (`os.sched_setaffinity`), in rounds of short slices
with a baseline slice before and after every mode's slice, with an aio client
keeping 64 calls in flight (organic, untagged calls: what production sees
while a drill targets the drill tenant). The server is the bottleneck (its own
core, more CPU per call than the client), so its throughput ratio to baseline is
what users feel, and its CPU per call from /proc is the sharper figure. Each
slice's figure is divided by the mean of the two baseline slices around it (the
host's speed drifts over seconds: a mode compared with a baseline run seconds
away carries that drift); the medians of those ratios are reported with their
range, so the spread shows.

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


def start(flavour: str, mode: str, core: int, tree: str | None = None) -> tuple[subprocess.Popen, int]:
    """A `_bench_server.py` pinned to `core`, serving the interceptors of `tree` (default: `--tree`)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DRILL_BENCH_TREE": tree or TREE[0]}
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
    """Per mode: its calls/s and CPU per call in every slice, and each slice's ratios to the baseline slices
    run just before and just after it (their mean): B m1 B m2 B ... B in every round, the modes' order
    reversed every other round, so a mode is compared with the baseline of the same few seconds."""
    server_core, client_core = cores()
    os.sched_setaffinity(0, {client_core})
    servers = {mode: start(flavour, mode, server_core) for mode in MODES}
    keys = ("rps", "server_us", "client_us", "ratio", "cpu_ratio")
    got: dict[str, dict[str, list[float]]] = {m: {k: [] for k in keys} for m in MODES}

    def run(mode: str) -> tuple[float, float]:
        proc, port = servers[mode]
        s0, c0 = cpu_seconds(proc.pid), time.process_time()
        n, took = asyncio.run(drive(port, seconds, concurrency))
        s1, c1 = cpu_seconds(proc.pid), time.process_time()
        rps, server_us = n / took, (s1 - s0) / max(n, 1) * 1e6
        got[mode]["rps"].append(rps)
        got[mode]["server_us"].append(server_us)
        got[mode]["client_us"].append((c1 - c0) / max(n, 1) * 1e6)
        return rps, server_us

    others = [m for m in MODES if m != "baseline"]
    try:
        for r in range(rounds):
            before = run("baseline")
            for mode in others if r % 2 == 0 else reversed(others):
                rps, server_us = run(mode)
                after = run("baseline")
                got[mode]["ratio"].append(rps / ((before[0] + after[0]) / 2))
                got[mode]["cpu_ratio"].append(server_us / ((before[1] + after[1]) / 2))
                before = after
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=10)
    got["baseline"]["ratio"] = [1.0]
    got["baseline"]["cpu_ratio"] = [1.0]
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="length of one slice")
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
            print(f"\n{flavour}: {args.rounds} rounds of {args.seconds:g}-s slices, {args.concurrency} in flight, "
                  "server and client on separate cores; every mode's slice sits between two baseline slices "
                  "and is divided by their mean (so a slow spell of the machine falls on both); ratios are "
                  "the medians over rounds")  # fmt: skip
            print(f"{'mode':<20}{'calls/s':>9}{'ratio':>8}{'server µs/call':>16}{'cpu ratio':>11}"
                  f"{'client µs/call':>16}   min-max ratio")  # fmt: skip
            for mode in MODES:
                g = got[mode]
                ratio = statistics.median(g["ratio"])
                print(f"{mode:<20}{statistics.median(g['rps']):>9.0f}{ratio:>8.3f}"
                      f"{statistics.median(g['server_us']):>16.1f}{statistics.median(g['cpu_ratio']):>11.3f}"
                      f"{statistics.median(g['client_us']):>16.1f}   "
                      f"{min(g['ratio']):.3f}-{max(g['ratio']):.3f}")  # fmt: skip
                summary.append(f"{flavour}_{mode.replace('-', '_')}={ratio:.3f}")
    finally:
        os.sched_setaffinity(0, saved)
    print(f"# load average at end: {load_average()}")
    print("throughput_ratio " + " ".join(summary))


if __name__ == "__main__":
    main()
