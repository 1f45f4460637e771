"""Delay accuracy: observed minus requested latency for `delay:MS` at a fixed offered rate.

One command: `python benchmarks/delay_accuracy.py [--rps 500 --seconds 5 --delay 100]`.
Runs a `drill serve`-equivalent aio server in a subprocess, offers an open-loop
rate of tagged calls (a new call every 1/rps s, bounded by --seconds), and
prints p50/p99 of (observed - requested) in ms, for aio and sync servers.
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
from harness.interceptors import DrillClientInterceptor, Tagging  # noqa: E402


def quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def offer(port: int, rps: float, seconds: float, delay_ms: int) -> tuple[list[float], int]:
    tag = Tagging(tenant="tenant-drill", directive=f"delay:{delay_ms}")
    errors = 0
    lat: list[float] = []
    async with aio.insecure_channel(f"127.0.0.1:{port}", interceptors=[DrillClientInterceptor(tag)]) as ch:
        stub = drill_pb2_grpc.DemoStub(ch)
        await stub.Call(drill_pb2.CallRequest())

        async def one() -> None:
            nonlocal errors
            t0 = time.perf_counter()
            try:
                await stub.Call(drill_pb2.CallRequest(), timeout=delay_ms / 1000 + 5)
                lat.append((time.perf_counter() - t0) * 1000 - delay_ms)
            except aio.AioRpcError:
                errors += 1

        tasks = []
        start = time.perf_counter()
        n = int(rps * seconds)
        for i in range(n):
            wait = start + i / rps - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.ensure_future(one()))
        await asyncio.gather(*tasks)
    return lat, errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rps", type=float, default=500)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--delay", type=int, default=100)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    line = []
    for flavour in ("aio", "sync"):
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / "_bench_server.py"), flavour, "on"],
            stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        try:
            port = int(proc.stdout.readline())
            lat, errors = asyncio.run(offer(port, args.rps, args.seconds, args.delay))
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        p50, p99 = statistics.median(lat), quantile(lat, 0.99)
        print(
            f"{flavour}: delay:{args.delay} at {args.rps:g} rps for {args.seconds:g}s: {len(lat)} ok, {errors} errors; "
            f"observed - requested p50={p50:.2f} ms p99={p99:.2f} ms min={min(lat):.2f} ms"
        )
        line.append(f"{flavour}_p50_ms={p50:.2f} {flavour}_p99_ms={p99:.2f}")
    print("delay_accuracy " + " ".join(line))


if __name__ == "__main__":
    main()
