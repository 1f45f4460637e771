"""What `drill proxy` costs organic traffic: added latency per unary call, its CPU per call, bidi messages/s.

    .venv/bin/python benchmarks/proxy_overhead.py [--rate 200 --seconds 5 --rounds 6]

A Go service (tests/proxy/goprobe, grpc-go) answers `Echo`. Unary calls go to it
open-loop at `--rate` calls/s (each sent at its planned time, whatever the answers
do), in alternating slices: straight to the service, then through `drill proxy`
(injection on, the calls untagged: what production sees while a drill runs), then to
a bare grpc.aio echo server (`_bare_echo.py`, no interceptor). The proxy and the
bare server are pinned to one core; this load generator and the Go service to the
other. Added latency is the median over rounds of (proxied − direct) p50 and p99
within each round; CPU per call is the proxy's (and the bare server's) own CPU
seconds from /proc over its slices ÷ the calls answered there, and their ratio.
Then one bidi stream through the proxy, ping-pong, for the messages/s it carries.

The last line is machine-readable:
`proxy added_p50_ms=… added_p99_ms=… proxy_cpu_us=… bare_cpu_us=… cpu_ratio=… bidi_msgs_per_s=…`.
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

from benchmarks._cpu import cores, cpu_seconds, header, popen_pinned, stop_all  # noqa: E402
from tests.proxy.probe import SERVICE, build, descriptor_set, message_class  # noqa: E402


def wait_file(path: pathlib.Path, proc: subprocess.Popen, what: str) -> str:
    deadline = time.monotonic() + 60
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start")
        time.sleep(0.02)
    return path.read_text()


async def open_loop(channel, method: str, request: bytes, rate: float, seconds: float) -> list[float]:
    """Latencies (s) of calls sent at i / rate s, each on its own task; the slice waits for every answer.
    `channel` may be a list: call i goes on channel i mod len (connections of their own, for --workers)."""
    calls = [c.unary_unary(method) for c in (channel if isinstance(channel, list) else [channel])]
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05
    latencies: list[float] = []

    async def one(at: float) -> None:
        await asyncio.sleep(max(0.0, at - loop.time()))
        t0 = time.perf_counter()
        await calls[round((at - start) * rate) % len(calls)](request, timeout=5)
        latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(one(start + i / rate) for i in range(int(rate * seconds))))
    return latencies


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def bidi_rate(address: str, msg, seconds: float) -> float:
    async with aio.insecure_channel(address) as channel:
        call = channel.stream_stream(SERVICE + "Chat")(timeout=seconds + 10)
        payload = msg(id="bidi", body=b"x" * 64).SerializeToString()
        n, end = 0, time.perf_counter() + seconds
        t0 = time.perf_counter()
        while time.perf_counter() < end:
            await call.write(payload)
            await call.read()
            n += 1
        await call.done_writing()
        while await call.read() is not aio.EOF:
            pass
        return n / (time.perf_counter() - t0)


async def measure(args, direct: str, proxied: str, bare: str, pids: dict, msg) -> dict:
    request = msg(id="organic", body=b"x" * 64).SerializeToString()
    method = SERVICE + "Echo"
    added50, added99, cpu = [], [], {"proxy": [0.0, 0], "bare": [0.0, 0]}
    # with --workers, calls to the proxy go over connections of their own (a channel keeps one connection, and
    # the kernel gives each new connection to one worker): 4 per worker
    local = [("grpc.use_local_subchannel_pool", 1)]
    p = [aio.insecure_channel(proxied, options=local) for _ in range(4 * args.workers if args.workers > 1 else 1)]
    share = [0.0] * len(pids["workers"])
    async with aio.insecure_channel(direct) as d, aio.insecure_channel(bare) as b:
        for ch in (d, p, b):  # connections up and every path warm before anything counts
            await open_loop(ch, method, request, args.rate, 1.0)
        for r in range(args.rounds):
            lat_d = await open_loop(d, method, request, args.rate, args.seconds)
            c0 = [cpu_seconds(pid) for pid in pids["proxy"]]
            lat_p = await open_loop(p, method, request, args.rate, args.seconds)
            spent = [cpu_seconds(pid) - c for pid, c in zip(pids["proxy"], c0, strict=True)]
            cpu["proxy"][0] += sum(spent)
            cpu["proxy"][1] += len(lat_p)
            share = [a + b for a, b in zip(share, spent[-len(share):], strict=True)] if share else share
            c0 = cpu_seconds(pids["bare"])
            lat_b = await open_loop(b, method, request, args.rate, args.seconds)
            cpu["bare"][0] += cpu_seconds(pids["bare"]) - c0
            cpu["bare"][1] += len(lat_b)
            a50 = (quantile(lat_p, 0.5) - quantile(lat_d, 0.5)) * 1000
            a99 = (quantile(lat_p, 0.99) - quantile(lat_d, 0.99)) * 1000
            added50.append(a50)
            added99.append(a99)
            d50, d99 = quantile(lat_d, 0.5) * 1000, quantile(lat_d, 0.99) * 1000
            p50, p99 = quantile(lat_p, 0.5) * 1000, quantile(lat_p, 0.99) * 1000
            print(f"round {r + 1}: direct p50 {d50:.3f} ms p99 {d99:.3f} ms | proxied p50 {p50:.3f} ms p99 {p99:.3f} ms"
                  f" | added p50 {a50:+.3f} ms p99 {a99:+.3f} ms", flush=True)  # fmt: skip
    for ch in p:
        await ch.close()
    bidi = await bidi_rate(proxied, msg, args.seconds)
    per = {k: v[0] / v[1] * 1e6 for k, v in cpu.items()}
    return {
        "worker_cpu_shares": [x / sum(share) for x in share] if share and sum(share) else [],
        "added_p50_ms": statistics.median(added50), "added_p50_range": (min(added50), max(added50)),
        "added_p99_ms": statistics.median(added99), "added_p99_range": (min(added99), max(added99)),
        "proxy_cpu_us": per["proxy"], "bare_cpu_us": per["bare"], "cpu_ratio": per["proxy"] / per["bare"],
        "bidi_msgs_per_s": bidi,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=200.0, help="unary calls/s, open loop")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each slice")
    ap.add_argument("--rounds", type=int, default=6, help="direct/proxied/bare rounds")
    ap.add_argument("--workers", type=int, default=1, help="drill proxy --workers N (CPU per call: all of them)")
    args = ap.parse_args()
    server_cpu, client_cpu = cores()
    print(header("proxy_overhead"))
    print(f"# {args.rate:g} unary calls/s open loop, {args.rounds} rounds of {args.seconds:g}-s slices; proxy and "
          f"bare server on cpu {server_cpu}, Go service and this load generator on cpu {client_cpu}",
          flush=True)  # fmt: skip
    os.sched_setaffinity(0, {client_cpu})
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        binary = build()
        msg = message_class(descriptor_set(tmp / "probe.pb"))
        try:
            go = popen_pinned([str(binary), str(tmp / "go.port")], client_cpu, stderr=subprocess.DEVNULL)
            procs.append(go)
            direct = f"127.0.0.1:{wait_file(tmp / 'go.port', go, 'the Go service')}"
            env = {**os.environ, "PYTHONPATH": str(ROOT), "DRILL_FAULT_ENABLED": "true"}
            argv = [sys.executable, "-m", "harness.cli", "proxy", "--upstream", direct, "--port", "0",
                    "--metrics-port", "0", "--service", "probe", "--descriptor-set", str(tmp / "probe.pb"),
                    "--ready-file", str(tmp / "proxy.json"), "--workers", str(args.workers)]  # fmt: skip
            proxy = popen_pinned(argv, server_cpu, env=env, stderr=subprocess.DEVNULL)  # its workers inherit the core
            procs.append(proxy)
            info = json.loads(wait_file(tmp / "proxy.json", proxy, "drill proxy"))
            proxied = f"127.0.0.1:{info['port']}"
            workers = info.get("pids", []) if args.workers > 1 else []
            bare = popen_pinned([sys.executable, str(ROOT / "benchmarks" / "_bare_echo.py"), str(tmp / "bare.port")],
                                server_cpu, env=env)  # fmt: skip
            procs.append(bare)
            bare_at = f"127.0.0.1:{wait_file(tmp / 'bare.port', bare, 'the bare server')}"
            pids = {"proxy": [proxy.pid, *workers], "workers": workers, "bare": bare.pid}
            out = asyncio.run(measure(args, direct, proxied, bare_at, pids, msg))
        finally:
            stop_all(procs)
    lo50, hi50 = out["added_p50_range"]
    lo99, hi99 = out["added_p99_range"]
    print(f"added latency through the proxy: p50 {out['added_p50_ms']:+.3f} ms (rounds {lo50:+.3f}..{hi50:+.3f}), "
          f"p99 {out['added_p99_ms']:+.3f} ms (rounds {lo99:+.3f}..{hi99:+.3f})")  # fmt: skip
    print(f"CPU per unary call: proxy {out['proxy_cpu_us']:.0f} µs, bare grpc.aio server {out['bare_cpu_us']:.0f} µs "
          f"({out['cpu_ratio']:.2f}×)")  # fmt: skip
    print(f"one bidi stream through the proxy, ping-pong: {out['bidi_msgs_per_s']:.0f} messages/s each way")
    if out["worker_cpu_shares"]:
        shares = ", ".join(f"{x:.2f}" for x in out["worker_cpu_shares"])
        print(f"--workers {args.workers}: each worker's share of the proxy CPU: {shares}")
    print(f"proxy added_p50_ms={out['added_p50_ms']:.3f} added_p99_ms={out['added_p99_ms']:.3f} "
          f"proxy_cpu_us={out['proxy_cpu_us']:.1f} bare_cpu_us={out['bare_cpu_us']:.1f} "
          f"cpu_ratio={out['cpu_ratio']:.2f} bidi_msgs_per_s={out['bidi_msgs_per_s']:.0f} "
          f"workers={args.workers}")  # fmt: skip


if __name__ == "__main__":
    main()
