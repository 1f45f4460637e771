"""What reading HTTP/2 costs `drill link`: CPU per unary call with its frames read, against the same relay as a
plain byte pipe.

    .venv/bin/python benchmarks/link_parse_cost.py [--rates 200,2000 --seconds 5 --rounds 4]

A Go service (tests/proxy/goprobe) and an open-loop Go client (benchmarks/goload, 4 connections, 1-s deadlines)
share one core; a link in this process, on uvloop, has the other. Each round runs each rate twice, once with
the link reading frames as it ships (every frame header in both directions, the client's header blocks through
`harness.link.hscan`) and once with its readers removed (bytes relayed, nothing read: what no toxic of HTTP/2
could then act on), alternating which goes first. CPU per call is this process's CPU time over the calls sent.
The last line is machine-readable: `link_parse_cost frames_cpu_us_<rate>=… bytes_cpu_us_<rate>=…` (medians).
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

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._cpu import cores, header, popen_pinned, stop_all  # noqa: E402
from benchmarks.proxy_overhead import wait_file  # noqa: E402
from harness.link.links import LinkSet  # noqa: E402
from tests.proxy.probe import build, go_build  # noqa: E402


async def one(links: LinkSet, goload: pathlib.Path, cpu: int, upstream: str, rate: float, seconds: float,
              frames: bool) -> tuple[float, float]:  # fmt: skip
    """(CPU µs per call, OK p50 ms) of one load through a new link."""
    link = await links.add(f"{'frames' if frames else 'bytes'}-{rate:.0f}-{time.monotonic_ns()}", "127.0.0.1:0",
                           upstream)  # fmt: skip
    if not frames:
        accept = link._accept

        def bytes_only():
            side = accept()
            side.conn.up.reader = side.conn.down.reader = None
            return side

        link._accept = bytes_only
        await link.stop()
        await link.start()
    argv = ["taskset", "-c", str(cpu), str(goload), "-addr", f"127.0.0.1:{link.port}", "-rate", f"{rate:.0f}",
            "-seconds", str(seconds), "-timeout", "1", "-conns", "4"]  # fmt: skip
    warm = await asyncio.create_subprocess_exec(*argv[:-6], "-rate", "500", "-seconds", "1", "-timeout", "1",
                                                "-conns", "4", stdout=subprocess.DEVNULL)  # fmt: skip
    await warm.wait()
    c0 = time.process_time()
    proc = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE)
    out = json.loads(await proc.stdout.read())
    await proc.wait()
    cpu_s = time.process_time() - c0
    await links.remove(link.name)
    sent = sum(out["status"].values())
    return cpu_s / sent * 1e6, out["latency_ms"].get("OK", {}).get("p50", float("nan"))


async def run(args, upstream: str, goload: pathlib.Path, client_cpu: int) -> dict:
    links = LinkSet()
    results: dict[tuple[str, float], list[float]] = {}
    for r in range(args.rounds):
        for rate in args.rates:
            order = (True, False) if r % 2 == 0 else (False, True)
            for frames in order:
                cpu_us, p50 = await one(links, goload, client_cpu, upstream, rate, args.seconds, frames)
                mode = "frames" if frames else "bytes"
                results.setdefault((mode, rate), []).append(cpu_us)
                print(f"round {r + 1} {rate:>6.0f}/s {mode:6s} CPU/call {cpu_us:.1f} µs, p50 {p50:.3f} ms",
                      flush=True)  # fmt: skip
    await links.close()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="200,2000", help="offered calls/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    args.rates = [float(r) for r in args.rates.split(",")]
    server_cpu, client_cpu = cores()
    print(header("link_parse_cost"))
    print(f"# the box is shared (see the load average); the link (this process, uvloop) on cpu {server_cpu}, the Go "
          f"service and goload on cpu {client_cpu}; {args.rounds} rounds of {args.seconds:g} s per mode and rate",
          flush=True)  # fmt: skip
    import uvloop

    goload = go_build(ROOT / "benchmarks" / "goload")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        go = popen_pinned([str(build()), str(tmp / "go.port")], client_cpu, stderr=subprocess.DEVNULL)
        try:
            upstream = f"127.0.0.1:{int(wait_file(tmp / 'go.port', go, 'the Go service'))}"
            os.sched_setaffinity(0, {server_cpu})
            results = uvloop.run(run(args, upstream, goload, client_cpu))
        finally:
            stop_all([go])
    print("# medians over rounds")
    line = []
    for rate in args.rates:
        f, b = statistics.median(results[("frames", rate)]), statistics.median(results[("bytes", rate)])
        print(f"{rate:>6.0f}/s frames read {f:.1f} µs CPU/call, bytes only {b:.1f} µs: reading costs {f - b:+.1f} µs")
        line += [f"frames_cpu_us_{rate:.0f}={f:.1f}", f"bytes_cpu_us_{rate:.0f}={b:.1f}"]
    print("link_parse_cost " + " ".join(line))


if __name__ == "__main__":
    main()
