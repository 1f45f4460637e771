"""Throughput and server CPU per call with the fault interceptor vs without, aio and sync.

One command: `python benchmarks/interceptor_overhead.py [--seconds 2 --rounds 3]`.
Starts one server process per mode (baseline, off, on, on-trace), then drives
them in interleaved rounds from this process (organic, untagged calls, like
production traffic while a drill targets only the drill tenant) and prints each
mode's median throughput and server CPU µs/call as ratios of the baseline, all
measured in the same run. On 2 cores the client competes for CPU, so the CPU
per call is the sharper number; throughput is what users feel.
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

from harness.demo.proto import drill_pb2, drill_pb2_grpc  # noqa: E402

MODES = ("baseline", "off", "on", "on-trace")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start(flavour: str, mode: str) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "_bench_server.py"), flavour, mode],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    port = int(proc.stdout.readline())
    return proc, port


async def drive(port: int, seconds: float, concurrency: int) -> int:
    """Calls completed in `seconds` with `concurrency` in flight (bounded by time)."""
    done = 0
    stop = time.monotonic() + seconds
    async with aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = drill_pb2_grpc.DemoStub(ch)
        req = drill_pb2.CallRequest()
        await stub.Call(req)

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < stop:
                await stub.Call(req)
                done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done


def bench(flavour: str, seconds: float, rounds: int, concurrency: int) -> dict[str, tuple[float, float]]:
    servers = {mode: start(flavour, mode) for mode in MODES}
    rps: dict[str, list[float]] = {m: [] for m in MODES}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    try:
        for r in range(rounds):
            order = MODES if r % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                proc, port = servers[mode]
                c0 = cpu_seconds(proc.pid)
                n = asyncio.run(drive(port, seconds, concurrency))
                c1 = cpu_seconds(proc.pid)
                rps[mode].append(n / seconds)
                cpu[mode].append((c1 - c0) / max(n, 1) * 1e6)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=10)
    return {m: (statistics.median(rps[m]), statistics.median(cpu[m])) for m in MODES}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--flavour", choices=("aio", "sync", "both"), default="both")
    args = ap.parse_args()
    flavours = ("aio", "sync") if args.flavour == "both" else (args.flavour,)
    summary = []
    for flavour in flavours:
        res = bench(flavour, args.seconds, args.rounds, args.concurrency)
        base_rps, base_cpu = res["baseline"]
        print(
            f"\n{flavour}: median of {args.rounds} interleaved rounds x {args.seconds:g}s, {args.concurrency} in flight"
        )
        print(f"{'mode':<10}{'calls/s':>10}{'ratio':>8}{'server µs/call':>16}{'cpu ratio':>11}")
        for mode in MODES:
            r, c = res[mode]
            print(f"{mode:<10}{r:>10.0f}{r / base_rps:>8.3f}{c:>16.1f}{c / base_cpu:>11.3f}")
            summary.append(f"{flavour}_{mode.replace('-', '_')}={r / base_rps:.3f}")
    print("\nthroughput_ratio " + " ".join(summary))


if __name__ == "__main__":
    main()
