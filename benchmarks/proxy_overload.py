"""`drill proxy` offered 3× what it carries: does it shed, answer near its capacity and keep its memory?

    .venv/bin/python benchmarks/proxy_overload.py [--cycles 4 --cycle-seconds 10] [--only limited|unbounded] [--quick]

A Go service (tests/proxy/goprobe, grpc-go) answers `Echo`; an open-loop Go client (benchmarks/goload: each call
leaves at its planned time whatever the answers do, with a 1-s deadline) and the Go service share one core,
`drill proxy` has the other to itself (taskset). In one run, for each proxy:

1. capacity: rates rising by a quarter from `--start-rate` (then halving the last step twice) for
   `--probe-seconds` each; the capacity is the highest rate whose OK calls have p99 ≤ `--p99-ms` (50) and
   that answers ≥ 99 % of its calls OK. It is measured once, on the first proxy, and offered to both.
2. overload: `--cycles` cycles of `--cycle-seconds` at `--factor` (3) × capacity, `--rest` seconds apart; per
   cycle the OK calls' p50 and p99, OK calls/s as a share of capacity, the refusals per second by status
   (RESOURCE_EXHAUSTED: the in-flight limit; CANCELLED: the gRPC core's backlog bound, or grpc's own guard),
   the proxy's CPU per offered call from /proc, and its resident memory (VmRSS) after the cycle; its memory
   again after a rest of `--settle` seconds; and what the proxy's /metrics counted against what the client saw.
   Rates are per second of a run, from its first call to its last answer (a queue answers after the sending
   stops). Then the CPU a refusal cost (limited proxy: the cycles' CPU less their OK calls at the capacity's
   CPU per call), and one cycle at each `--also` factor (1.5, 2): the share answered as the offered load grows.
3. in flight (limited proxy): its `--max-in-flight` bidi streams held open at the Go service, then
   `--hold-rate` calls/s: the memory a call in flight holds, and the CPU and latency of a refusal made in
   Python.

The proxies: `limited` is `drill proxy` as shipped (its --max-in-flight and --max-backlog defaults); `unbounded`
is the same process without them (`_unbounded` below: no in-flight limit, grpc's own backlog guard), as it ran
before it had them. The last line is machine-readable: `proxy_overload capacity_rps=… <proxy>_ok_share_min=…
<proxy>_p99_ms_max=… <proxy>_rss_growth_mb=…` (growth: from the first cycle's RSS to the last one's, per cycle).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._cpu import cores, cpu_seconds, header, popen_pinned, stop_all  # noqa: E402
from benchmarks.proxy_overhead import wait_file  # noqa: E402
from tests.proxy.probe import SERVICE, build, descriptor_set, go_build  # noqa: E402

PROXIES = ("limited", "unbounded")
#: statuses the report names apart (the rest are summed as `other`)
REFUSALS = ("RESOURCE_EXHAUSTED", "CANCELLED", "DEADLINE_EXCEEDED")
_GO_CODES = {"OK": "OK", "ResourceExhausted": "RESOURCE_EXHAUSTED", "Canceled": "CANCELLED",
             "DeadlineExceeded": "DEADLINE_EXCEEDED", "Unavailable": "UNAVAILABLE"}  # fmt: skip


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@dataclasses.dataclass
class Load:
    """One goload run: counts per status (upper-case names), OK latency percentiles (ms), the OK calls answered
    within the goal, the time from its first call to its last answer, the proxy's CPU seconds meanwhile."""

    rate: float
    seconds: float
    counts: dict[str, int]
    ok_ms: dict[str, float]
    ok_within: int
    latency_ms: dict[str, dict[str, float]]
    elapsed_s: float
    cpu_s: float
    lag_ms: float

    @property
    def sent(self) -> int:
        return sum(self.counts.values())

    @property
    def ok(self) -> int:
        return self.counts.get("OK", 0)

    def latency(self, status: str, q: str) -> float:
        return self.latency_ms.get(status, {}).get(q, float("nan"))

    def per_s(self, status: str) -> float:
        """Calls of `status` per second of the run (first call to last answer)."""
        return self.counts.get(status, 0) / self.elapsed_s

    def carries(self, p99_ms: float) -> bool:
        return self.ok >= 0.99 * self.sent and self.ok_ms.get("p99", float("inf")) <= p99_ms


class Bench:
    """The Go client's runs against one proxy process, and every status it has seen from it (`seen`)."""

    def __init__(self, args, goload: pathlib.Path, client_cpu: int) -> None:
        self.args, self.goload, self.client_cpu = args, goload, client_cpu
        self.seen: dict[str, int] = {}
        #: the proxy's CPU per call at the capacity it carried (µs), once measured
        self.ok_cpu_us = 0.0

    def load(self, port: int, pid: int, rate: float, seconds: float) -> Load:
        argv = [str(self.goload), "-addr", f"127.0.0.1:{port}", "-method", SERVICE + "Echo", "-rate", f"{rate:.0f}",
                "-seconds", str(seconds), "-timeout", str(self.args.timeout), "-conns", str(self.args.conns),
                "-within", str(self.args.p99_ms)]  # fmt: skip
        c0 = cpu_seconds(pid)
        out = subprocess.run(["taskset", "-c", str(self.client_cpu), *argv], capture_output=True, text=True,
                             check=True, timeout=seconds + self.args.timeout + 60).stdout  # fmt: skip
        cpu = cpu_seconds(pid) - c0
        r = json.loads(out)
        counts = {_GO_CODES.get(k, k.upper()): v for k, v in r["status"].items()}
        for k, v in counts.items():
            self.seen[k] = self.seen.get(k, 0) + v
        latency = {_GO_CODES.get(k, k.upper()): v for k, v in r["latency_ms"].items()}
        return Load(rate, seconds, counts, latency.get("OK", {}), r["ok_within"], latency, r["elapsed_seconds"], cpu,
                    r["max_send_lag_ms"])  # fmt: skip

    def capacity(self, port: int, pid: int) -> float:
        """The highest rate that meets the goal: up by a quarter until one fails, then the gap halved twice."""
        a = self.args
        good, bad, rate, halvings = 0.0, None, a.start_rate, 0
        while halvings < 2 and rate < 100_000:
            probe = self.load(port, pid, rate, a.probe_seconds)
            carried = probe.carries(a.p99_ms)
            print(f"  probe {rate:.0f}/s: OK {probe.ok}/{probe.sent}, OK p50 {probe.ok_ms.get('p50', 0):.2f} ms "
                  f"p99 {probe.ok_ms.get('p99', 0):.2f} ms -> {'carried' if carried else 'not'}",
                  flush=True)  # fmt: skip
            if carried:
                good, self.ok_cpu_us = rate, probe.cpu_s / probe.sent * 1e6
            else:
                bad = rate
                if not good:
                    break
            if bad is None:
                rate *= 1.25
            else:
                halvings += 1
                rate = (good + bad) / 2
            time.sleep(a.rest)
        return good


def metric(port: int, name: str, **labels: tuple[str, ...]) -> float:
    """The sum of the samples of `name` on a /metrics page whose label `k` is one of `labels[k]`, for each k."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    total = 0.0
    for m in re.finditer(rf"^{name}(?:{{([^}}]*)}})? (\S+)$", text, re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) in v for k, v in labels.items()):
            total += float(m.group(2))
    return total


#: the statuses of calls that ended cut short in the proxy: their caller left while they were forwarded
CUT_SHORT = ("CANCELLED", "DEADLINE_EXCEEDED")


def start_proxy(kind: str, upstream: str, tmp: pathlib.Path, server_cpu: int,
                extra: list[str]) -> tuple[subprocess.Popen, dict]:  # fmt: skip
    ready = tmp / f"{kind}.json"
    options = ["--upstream", upstream, "--port", "0", "--metrics-port", "-1", "--service", "probe",
               "--descriptor-set", str(tmp / "probe.pb"), "--ready-file", str(ready)]  # fmt: skip
    argv = [sys.executable, "-m", "harness.cli", "proxy", *options, *extra] if kind == "limited" else \
        [sys.executable, str(pathlib.Path(__file__).resolve()), "_unbounded", *options]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DRILL_FAULT_ENABLED": "true"}
    env.pop("DRILL_MAX_IN_FLIGHT", None)
    proc = popen_pinned(argv, server_cpu, env=env, stderr=open(tmp / f"{kind}.log", "w"))
    return proc, json.loads(wait_file(ready, proc, f"the {kind} proxy"))


def overload(bench: Bench, kind: str, port: int, metrics_port: int, pid: int, capacity: float) -> dict:
    a = bench.args
    rate = a.factor * capacity
    print(f"  offered {rate:.0f} calls/s ({a.factor:g} × capacity) for {a.cycle_seconds:g} s per cycle, "
          f"{a.timeout:g}-s deadlines; RSS before the first cycle {rss_mb(pid):.1f} MB", flush=True)  # fmt: skip
    cycles = []
    cut0, rss0 = metric(metrics_port, "drill_server_calls_total", grpc_status=CUT_SHORT), rss_mb(pid)
    for i in range(a.cycles):
        r = bench.load(port, pid, rate, a.cycle_seconds)
        rss = rss_mb(pid)
        cut = metric(metrics_port, "drill_server_calls_total", grpc_status=CUT_SHORT)
        ok_s, share = r.per_s("OK"), r.per_s("OK") / capacity
        other = sum(v for k, v in r.counts.items() if k not in ("OK", *REFUSALS)) / r.elapsed_s
        print(f"  cycle {i + 1}: OK {ok_s:.0f}/s = {share:.2f} of capacity ({r.ok_within / r.elapsed_s:.0f}/s within "
              f"{a.p99_ms:g} ms), OK p50 {r.ok_ms.get('p50', 0):.2f} ms p99 {r.ok_ms.get('p99', 0):.2f} ms | "
              f"RESOURCE_EXHAUSTED {r.per_s('RESOURCE_EXHAUSTED'):.0f}/s, CANCELLED {r.per_s('CANCELLED'):.0f}/s, "
              f"DEADLINE_EXCEEDED {r.per_s('DEADLINE_EXCEEDED'):.0f}/s, other {other:.0f}/s | proxy CPU "
              f"{r.cpu_s / r.sent * 1e6:.0f} µs per offered call ({r.cpu_s / r.elapsed_s:.2f} of a core) | RSS "
              f"after {rss:.1f} MB ({rss - rss0:+.2f}), calls cut short in the proxy {cut - cut0:.0f} | "
              f"{r.elapsed_s:.2f} s from first call to last answer", flush=True)  # fmt: skip
        cycles.append({"ok_share": share, "p50_ms": r.ok_ms.get("p50", 0.0), "p99_ms": r.ok_ms.get("p99", 0.0),
                       "rss_mb": rss, "cut_short": cut - cut0, "cpu_s": r.cpu_s, "ok": r.ok,
                       "refused": r.counts.get("CANCELLED", 0) + r.counts.get("RESOURCE_EXHAUSTED", 0)})  # fmt: skip
        cut0, rss0 = cut, rss
        time.sleep(a.rest)
    time.sleep(max(0.0, a.settle - a.rest))
    settled = rss_mb(pid)
    growth = (cycles[-1]["rss_mb"] - cycles[0]["rss_mb"]) / max(1, len(cycles) - 1)
    later_cut = sum(c["cut_short"] for c in cycles[1:])
    per_call = f", {growth * (len(cycles) - 1) * 2**20 / later_cut:.0f} bytes per call cut short" if later_cut else ""
    print(f"  RSS after {a.settle:g} s at rest: {settled:.1f} MB; from cycle 1 to cycle {len(cycles)}: "
          f"{growth:+.2f} MB per cycle{per_call}", flush=True)  # fmt: skip
    refusals = sum(c["refused"] for c in cycles)
    if kind == "limited" and bench.ok_cpu_us and refusals:
        spent = sum(c["cpu_s"] for c in cycles) - sum(c["ok"] for c in cycles) * bench.ok_cpu_us / 1e6
        print(f"  a refusal cost the proxy about {spent / refusals * 1e6:.1f} µs of CPU (the cycles' CPU less their OK "
              f"calls at {bench.ok_cpu_us:.0f} µs each, the CPU per call at capacity)", flush=True)  # fmt: skip
    for factor in a.also:
        r = bench.load(port, pid, factor * capacity, a.cycle_seconds)
        print(f"  one cycle at {factor:g} × capacity ({factor * capacity:.0f}/s): OK {r.per_s('OK'):.0f}/s = "
              f"{r.per_s('OK') / capacity:.2f} of capacity ({r.ok_within / r.elapsed_s:.0f}/s within {a.p99_ms:g} ms), "
              f"OK p50 {r.ok_ms.get('p50', 0):.2f} ms p99 {r.ok_ms.get('p99', 0):.2f} ms", flush=True)  # fmt: skip
        time.sleep(a.rest)
    refused = metric(metrics_port, "drill_server_refused_total")
    backlog = metric(metrics_port, "drill_server_backlog_refused_total") if kind == "limited" else None
    print(f"  the proxy counted, since it started: drill_server_refused_total {refused:.0f} (the client saw "
          f"RESOURCE_EXHAUSTED {bench.seen.get('RESOURCE_EXHAUSTED', 0)}), drill_server_backlog_refused_total "
          + (f"{backlog:.0f}" if backlog is not None else "none (no backlog bound, no count)")
          + f" (the client saw CANCELLED {bench.seen.get('CANCELLED', 0)})", flush=True)  # fmt: skip
    return {"cycles": cycles, "rss_settled_mb": settled, "rss_growth_mb": growth,
            "ok_share_min": min(c["ok_share"] for c in cycles), "p99_ms_max": max(c["p99_ms"] for c in cycles)}


def hold_phase(bench: Bench, port: int, metrics_port: int, pid: int, limit: int) -> dict:
    """The in-flight limit, reached by a slow upstream: `limit` bidi streams held open at the Go service (each
    answered its first message), then calls at `--hold-rate`: each is refused by the proxy itself, in Python. The
    memory a call in flight costs, and the CPU and latency of such a refusal."""
    from grpc import aio

    a = bench.args

    async def run() -> tuple[float, float, Load, Load]:
        channels = [aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(a.conns)]
        try:
            rss0 = rss_mb(pid)
            streams = []
            for i in range(limit):
                call = channels[i % len(channels)].stream_stream(SERVICE + "Chat")(timeout=a.hold_seconds + 60)
                await call.write(b"\n\x04hold")  # a probe.v1.Msg with id "hold": Chat answers it and waits
                await call.read()
                streams.append(call)
            rss1 = rss_mb(pid)
            refused = await asyncio.to_thread(bench.load, port, pid, a.hold_rate, a.hold_seconds)
            for call in streams:
                call.cancel()
            await asyncio.sleep(1.0)
            after = await asyncio.to_thread(bench.load, port, pid, 300, 2.0)
            return rss0, rss1, refused, after
        finally:
            for c in channels:
                await c.close()

    rss0, rss1, refused, after = asyncio.run(run())
    n = refused.counts.get("RESOURCE_EXHAUSTED", 0)
    print(f"  {limit} bidi streams held open through the proxy (its in-flight limit): RSS {rss0:.1f} -> {rss1:.1f} MB "
          f"({(rss1 - rss0) * 1024 / limit:.1f} KB per call in flight)", flush=True)  # fmt: skip
    print(f"  then {a.hold_rate:.0f} calls/s for {a.hold_seconds:g} s: {refused.counts}; RESOURCE_EXHAUSTED "
          f"refused in p50 {refused.latency('RESOURCE_EXHAUSTED', 'p50'):.2f} ms p99 "
          f"{refused.latency('RESOURCE_EXHAUSTED', 'p99'):.2f} ms; proxy CPU "
          f"{refused.cpu_s / refused.sent * 1e6:.0f} µs per refused call (a refusal made in Python)",
          flush=True)  # fmt: skip
    print(f"  the streams ended: {after.ok} of {after.sent} calls OK at 300/s; the proxy counted "
          f"drill_server_refused_total {metric(metrics_port, 'drill_server_refused_total'):.0f} (the client saw "
          f"RESOURCE_EXHAUSTED {bench.seen.get('RESOURCE_EXHAUSTED', 0)})", flush=True)  # fmt: skip
    return {"refusal_cpu_us": refused.cpu_s / refused.sent * 1e6, "kb_per_call": (rss1 - rss0) * 1024 / limit,
            "refused_share": n / refused.sent, "admitted_after": after.ok / after.sent}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=PROXIES, default=None, help="one proxy (default: both, limited first)")
    ap.add_argument("--quick", action="store_true", help="short probes and cycles: to check the benchmark runs")
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--cycle-seconds", type=float, default=10.0)
    ap.add_argument("--factor", type=float, default=3.0, help="offered load ÷ capacity in the cycles")
    ap.add_argument("--timeout", type=float, default=1.0, help="each call's deadline, seconds")
    ap.add_argument("--start-rate", type=float, default=800.0)
    ap.add_argument("--probe-seconds", type=float, default=5.0)
    ap.add_argument("--p99-ms", type=float, default=50.0, help="the capacity's latency goal for OK calls")
    ap.add_argument("--rest", type=float, default=3.0, help="seconds between loads")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds at rest before the last RSS reading")
    ap.add_argument("--conns", type=int, default=4, help="the client's connections")
    ap.add_argument("--also", type=lambda t: [float(x) for x in t.split(",") if x], default=[1.5, 2.0],
                    help="after the cycles, one more cycle at each of these factors (comma separated; '' for none)")
    ap.add_argument("--hold-rate", type=float, default=1000.0, help="calls/s offered while the limit is held")
    ap.add_argument("--hold-seconds", type=float, default=5.0)
    ap.add_argument("--capacity", type=float, default=0.0, help="take this capacity (calls/s) instead of measuring")
    ap.add_argument("--proxy-args", default="", help="more options for the limited proxy, e.g. '--max-backlog 16'")
    args = ap.parse_args()
    if args.quick:
        args.cycles, args.cycle_seconds, args.probe_seconds, args.rest, args.settle = 2, 3.0, 2.0, 1.0, 2.0
        args.hold_seconds = 2.0
    server_cpu, client_cpu = cores()
    print(header("proxy_overload"))
    print(f"# Go service and open-loop Go client on cpu {client_cpu}, drill proxy on cpu {server_cpu}; capacity: "
          f"p99 of OK calls ≤ {args.p99_ms:g} ms and ≥ 99 % OK; overload {args.factor:g} × capacity, "
          f"{args.cycles} cycles of {args.cycle_seconds:g} s, {args.timeout:g}-s deadlines", flush=True)  # fmt: skip
    bench = Bench(args, go_build(ROOT / "benchmarks" / "goload"), client_cpu)
    results: dict[str, dict] = {}
    capacity = args.capacity
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        descriptor_set(tmp / "probe.pb")
        procs = []
        try:
            go = popen_pinned([str(build()), str(tmp / "go.port")], client_cpu, stderr=subprocess.DEVNULL)
            procs.append(go)
            upstream = f"127.0.0.1:{wait_file(tmp / 'go.port', go, 'the Go service')}"
            for kind in [args.only] if args.only else PROXIES:
                proxy, info = start_proxy(kind, upstream, tmp, server_cpu, args.proxy_args.split())
                procs.append(proxy)
                shipped = args.proxy_args or "as shipped (its --max-in-flight and --max-backlog defaults)"
                without = "drill proxy without its limits (no in-flight limit, grpc's own backlog guard)"
                print(f"== {kind}: " + (f"drill proxy {shipped}" if kind == "limited" else without), flush=True)
                bench.seen = {}
                bench.load(info["port"], proxy.pid, 300, 2.0)  # connections up, every path warm
                if not capacity:
                    capacity = bench.capacity(info["port"], proxy.pid)
                    print(f"  capacity: {capacity:.0f} calls/s", flush=True)
                else:
                    print(f"  capacity: {capacity:.0f} calls/s" + (" (given)" if args.capacity else ""), flush=True)
                    if not capacity:
                        raise SystemExit("the proxy carried no rate within the goal: nothing to overload")
                results[kind] = overload(bench, kind, info["port"], info["metrics_port"], proxy.pid, capacity)
                if kind == "limited":
                    limit = int(re.search(r"at most (\d+) in flight", (tmp / "limited.log").read_text()).group(1))
                    results[kind]["hold"] = hold_phase(bench, info["port"], info["metrics_port"], proxy.pid, limit)
                stop_all([proxy])
                procs.remove(proxy)
        finally:
            stop_all(procs)
    figures = [f"capacity_rps={capacity:.0f}"]
    for kind, r in results.items():
        figures += [f"{kind}_ok_share_min={r['ok_share_min']:.2f}", f"{kind}_p99_ms_max={r['p99_ms_max']:.2f}",
                    f"{kind}_rss_growth_mb={r['rss_growth_mb']:.2f}"]  # fmt: skip
        if "hold" in r:
            figures += [f"refusal_cpu_us={r['hold']['refusal_cpu_us']:.0f}",
                        f"kb_per_call_in_flight={r['hold']['kb_per_call']:.1f}"]  # fmt: skip
    print("proxy_overload " + " ".join(figures))


def _unbounded() -> None:
    """`drill proxy` without its two limits (the `unbounded` proxy): its options, pipeline, metrics and stop,
    with no in-flight limit and the core's backlog left to grpc's own guard."""
    from harness.demo.lifecycle import announce, serve_metrics, serve_until_signal
    from harness.proxy import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(sys.argv[2:])

    async def serve() -> int:
        settings = dataclasses.replace(cli.settings_from_args(args, "proxy"), max_in_flight=0)
        table = cli.method_kinds(args)
        metrics_port = serve_metrics(args, "proxy")
        server, port, channel = await cli.start_proxy(args.upstream, host=args.host, port=args.port,
                                                      settings=settings, method_kinds=table,
                                                      max_backlog=None)  # fmt: skip
        return await serve_until_signal(server, channel,
                                        ready=lambda: announce(args, port, {"metrics_port": metrics_port}))  # fmt: skip

    sys.exit(asyncio.run(serve()))


if __name__ == "__main__":
    if sys.argv[1:2] == ["_unbounded"]:
        _unbounded()
    else:
        main()
