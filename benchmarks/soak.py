"""Soak: a long mixed drill against a real small topology, then the books must balance and memory come back.

Topology (benchmarks/soak_topology.py): `drill serve` gateway (naive retries) → ledger on
127.0.0.1, each under the memory probe (benchmarks/soak_probe.py), pinned to one core while
this load generator is pinned to the other. The generator measures the topology's capacity
(closed loop, 3 s, then recalibrated from how busy the servers' core is during the first fault
cycle: `Capacity`), then sends open-loop traffic (benchmarks/soak_traffic.py): 70 % organic,
30 % drill; the drill's fault switches on and off every `--switch-s` seconds (first window
off), alternating `abort:UNAVAILABLE` (x-fault-scope attempt) and `delay:20`, ratio 30,
targeted at the ledger.

Two modes:
- quiet (default): ~60 % of capacity for `--minutes`;
- `--overload F`: 60 % for `--warm-s`, then cycles of `--over-s` seconds at F × capacity
  (calls expire at their 2-s deadlines) and `--calm-s` seconds at 60 %, and the last
  `--recover-s` seconds at 60 %.
After the traffic, in both modes: a full garbage collection and glibc's `malloc_trim(0)` in every
server (a control that tells memory the allocator holds free from memory something owns).

At the end it asserts (`check`):
- open fds of every process back within ±5 of the start;
- memory (benchmarks/soak_memory.py): RSS of each server at the end within 10 % of its warm
  value (after the first off/on cycle of the fault; in overload mode, the end of the warm-up),
  or within the allocators' high-water mark of its peak calls in flight (warm + 128 KiB per
  call); what is still owned after a full collection (glibc's allocated bytes, Python's
  allocated blocks) back within 10 % + 2 MB of warm; no scope, plan or servicer context alive;
- zero organic calls faulted (client: no `x-drill-fault` trailer; server: fault_mode none);
- audit lines + audit lines dropped (`drill_audit_dropped_total`) + queued = `drill_fault_hits_total`;
  every audit line a hit `is_hit_attempt` predicts for its (request id, attempt); every drill call
  that was answered audited exactly as predicted, or disturbed by a failure that was not injected,
  or missing attempts the gateway's per-attempt timeout cut off before the ledger began them (no
  more such calls than the gateway's timed-out attempts); a call that ran out of its own deadline
  may have lost retries the gateway never sent, so only its lines are checked;
- `drill_fault_active_calls` back to 0; 5,000 hostile calls grow /metrics by < 50 series;
- overload mode: the overload happened (calls expired at their deadline), and calls in flight at
  the gateway never exceeded the servers' bound (`--concurrency` + `--queue`, and no more than
  arrive within one deadline at the overload rate).
Each server's RSS step is attributed (`soak_memory.attribute`): glibc's heap (allocated, and
freed but held), Python's arenas (allocated blocks, and arenas kept for their free blocks), the
rest; our objects; what a full collection and `malloc_trim` give back.

    .venv/bin/python benchmarks/soak.py --minutes 10 [--out DIR]
    .venv/bin/python benchmarks/soak.py --minutes 30 --overload 1.5 [--tracemalloc 6] [--out DIR]

Prints the result as JSON, then one figure per line and `soak: PASS` or `soak: FAIL …`; exit 0
only on PASS. `--tracemalloc N` (a diagnostic run: it inflates memory and CPU itself) adds the
15 allocation sites that grew most between the first and last third of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from grpc import aio  # noqa: E402

from benchmarks import soak_memory as mem  # noqa: E402
from benchmarks import soak_topology as topo_mod  # noqa: E402
from benchmarks import soak_traffic as tr  # noqa: E402
from benchmarks._cpu import header  # noqa: E402
from harness.demo.proto import drill_pb2_grpc  # noqa: E402

LOAD_SHARE = 0.6
#: seconds of arrivals beyond one deadline the generator may have in flight (stalls of its own loop)
GENERATOR_SLACK_S = 3.0
#: a calibration below this busy share of the servers' core measured nothing (keep the first guess)
MIN_BUSY = 0.05
FDS_SLACK = 5
#: where a server answers a call whose caller left without working on it (drill_server_expired_total)
EXPIRED_WHERE = ("handler", "queue")
MB = 2**20


class Capacity:
    """Calls per second the servers' core sustains with this traffic, in two steps.

    The closed-loop measure (32 calls at once, organic, no fault, 3 s) is only a first guess: it
    gave 199 and 570 calls/s in two runs an hour apart on the same quiet box, grpc batches many
    calls per wake-up there, and the soak's open-loop mix also carries the drill's faults (a
    naive retry storm in the abort windows). A "quiet" 60 % of 570/s kept the servers' core 85 %
    busy and overloaded it in bursts. So the first fault cycle of the traffic measures how busy
    the servers' core is at the offered rate (CPU seconds of both servers from /proc per second)
    and takes capacity = offered / busy share: the quiet rate then keeps that core ~60 % busy and
    the overload offers F times what it can serve."""

    def __init__(self, closed_loop: float, server_pids: list[int]) -> None:
        self.value = closed_loop
        self.closed_loop = closed_loop
        self.pids = server_pids
        self.calibration: dict = {}

    def _cpu(self) -> float:
        return sum(topo_mod.cpu_seconds(p) for p in self.pids)

    async def calibrate(self, seconds: float) -> None:
        offered = self.value * LOAD_SHARE
        c0, t0 = self._cpu(), time.monotonic()
        await asyncio.sleep(seconds)
        busy = (self._cpu() - c0) / (time.monotonic() - t0)
        if busy >= MIN_BUSY:
            self.value = offered / busy
        self.calibration = {"offered_per_s": round(offered, 1), "seconds": seconds, "server_core_busy": round(busy, 3)}


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the soak offers when: `seconds` of traffic, `rate_at(t)` in multiples of capacity."""

    seconds: float
    switch_s: float = 30.0
    overload: float = 0.0  # 0 = quiet
    warm_s: float = 120.0
    over_s: float = 90.0
    calm_s: float = 60.0
    recover_s: float = 180.0
    interval_s: float = 30.0
    frames: int = 0
    env: tuple[tuple[str, str], ...] = ()
    #: seconds of closed-loop calls that measure capacity; hostile calls at the end
    capacity_s: float = 3.0
    hostile_calls: int = tr.HOSTILE_CALLS

    def share(self, t: float) -> float:
        """Share of capacity offered at `t` seconds into the traffic."""
        if not self.overload or t < self.warm_s or t >= self.seconds - self.recover_s:
            return LOAD_SHARE
        return self.overload if (t - self.warm_s) % (self.over_s + self.calm_s) < self.over_s else LOAD_SHARE

    @property
    def calibrate_s(self) -> float:
        """Seconds at the start of the traffic over which the servers' CPU recalibrates capacity: one
        off/on cycle of the fault (both halves of the mix), within the first half of the warm-up."""
        if self.overload:
            return min(2 * self.switch_s, self.warm_s / 2)
        return 2 * self.switch_s if self.seconds >= 8 * self.switch_s else self.switch_s / 2

    @property
    def warm_at(self) -> float:
        """When the warm RSS is read: the end of the warm-up (overload), else one off/on cycle of the
        fault after the calibration, or one window after it in a run shorter than eight windows."""
        if self.overload:
            return self.warm_s
        return self.calibrate_s + (2 * self.switch_s if self.seconds >= 8 * self.switch_s else self.switch_s)

    @classmethod
    def scaled(cls, seconds: float, **given) -> Plan:
        """A plan whose unset phases fit `seconds`: the documented 120/90/60/180-s phases and 30-s probe
        interval from 20 minutes up, proportionally shorter below (a 1-minute run: 12/9/6/18 s, 3 s)."""
        phases = {"warm_s": 0.1, "over_s": 0.075, "calm_s": 0.05, "recover_s": 0.15, "interval_s": 0.025}
        full = {"warm_s": 120.0, "over_s": 90.0, "calm_s": 60.0, "recover_s": 180.0, "interval_s": 30.0}
        for k, share in phases.items():
            if given.get(k) is None:
                given[k] = max(1.0, min(full[k], round(seconds * share, 1)))
        return cls(seconds, **given)


async def soak(plan: Plan, workdir: pathlib.Path) -> dict:
    topo = topo_mod.start_topology(
        workdir, tr.SEED, tr.TENANT, interval_s=plan.interval_s, frames=plan.frames, env_extra=dict(plan.env)
    )
    me = os.getpid()
    load = {"start": topo_mod.load_average()}
    try:
        pinned = topo_mod.pin(me, 0) and all(topo_mod.pin(s.proc.pid, 1) for s in topo.servers)
        pids = {"generator": me, "gateway": topo.gateway.proc.pid, "ledger": topo.ledger.proc.pid}
        books = tr.Books()
        async with aio.insecure_channel(topo.gateway.address) as ch:
            stub = drill_pb2_grpc.DemoStub(ch)
            await tr.capacity(stub, 0.5)  # connections up, code paths warm
            fds0 = {k: topo_mod.open_fds(p) for k, p in pids.items()}
            cap0 = await tr.capacity(stub, plan.capacity_s)
            cap = Capacity(cap0, [pids["gateway"], pids["ledger"]])
            rss_warm: dict[str, int] = {}
            rss_series: list[dict] = []
            cpu0 = {k: topo_mod.cpu_seconds(p) for k, p in pids.items()}
            t0 = time.monotonic()
            traffic_wall = time.time()

            def on_window(n: int) -> None:
                rss = {k: topo_mod.rss_bytes(p) for k, p in pids.items()}
                row = {"t": n * plan.switch_s, "share": plan.share(n * plan.switch_s - 1e-6)}
                row.update({k: round(v / MB, 1) for k, v in rss.items()})
                row["load1"] = topo_mod.load_average()[0]
                rss_series.append(row)

            def on_warm() -> None:
                rss_warm.update({k: topo_mod.rss_bytes(p) for k, p in pids.items()})

            peak_share = max(LOAD_SHARE, plan.overload)

            def max_in_flight() -> int:
                # The generator's own memory bound, never its bottleneck: its calls end at their
                # deadline, when its loop gets to them, and after a stall it sends what it owes at
                # once. A 30-min overload run hit a bound of deadline + 1 s (46 arrivals skipped,
                # generator 0.58 s late): the bound is deadline + GENERATOR_SLACK_S, and follows
                # the calibrated capacity.
                return int(cap.value * peak_share * (tr.CALL_TIMEOUT_S + GENERATOR_SLACK_S)) + 100

            calibrating = asyncio.ensure_future(cap.calibrate(plan.calibrate_s))
            await tr.drive(
                stub,
                books,
                lambda t: cap.value * plan.share(t),
                plan.seconds,
                plan.switch_s,
                on_window,
                max_in_flight,
                at=(plan.warm_at, on_warm),
            )
            wall = time.monotonic() - t0
            cpu = {k: topo_mod.cpu_seconds(p) - cpu0[k] for k, p in pids.items()}
            calibrating.cancel()
        load["end_of_traffic"] = topo_mod.load_average()
        for _ in range(20):  # up to 2 s for the servers to close the channel's connection
            fds1 = {k: topo_mod.open_fds(p) for k, p in pids.items()}
            if all(abs(fds1[k] - fds0[k]) <= FDS_SLACK for k in fds0):
                break
            await asyncio.sleep(0.1)
        rss_end = {k: topo_mod.rss_bytes(p) for k, p in pids.items()}
        trim = await mem.trim_control(topo)
        ledger_url = topo.ledger.metrics_url
        urls = [topo.gateway.metrics_url, ledger_url]
        hits = tr.metric_sum(ledger_url, "drill_fault_hits_total")
        timed_out = tr.metric_sum(
            topo.gateway.metrics_url, "grpc_client_attempt_duration_seconds_count", grpc_status="DEADLINE_EXCEEDED"
        )
        dropped = tr.metric_sum(ledger_url, "drill_audit_dropped_total", event="fault_hit")
        queued = tr.metric_sum(ledger_url, "drill_audit_queue_lines")
        per_id = topo_mod.audit_hits(topo.ledger.log_path)
        active = sum(tr.metric_sum(u, "drill_fault_active_calls") for u in urls)
        expired = {
            s.name: {w: int(tr.metric_sum(s.metrics_url, "drill_server_expired_total", where=w)) for w in EXPIRED_WHERE}
            for s in topo.servers
        }
        organic_server_faulted = sum(
            tr.metric_sum(u, "drill_server_calls_total", traffic="organic")
            - tr.metric_sum(u, "drill_server_calls_total", traffic="organic", fault_mode="none")
            for u in urls
        )
        hostile_result = await tr.hostile(topo.gateway.address, urls, plan.hostile_calls)
        probes = {s.name: topo.probe(s.name) for s in topo.servers}
    finally:
        topo.stop()
    load["end"] = topo_mod.load_average()
    calls = books.organic + books.drill
    ledger_books = tr.reconcile(books, per_id)
    result = {
        "mode": f"overload x{plan.overload}" if plan.overload else "quiet",
        "plan": dataclasses.asdict(plan),
        "load_average": load,
        "seconds": round(wall, 1),
        "pinned": pinned,
        "capacity_closed_loop_per_s": round(cap0, 1),
        "capacity_per_s": round(cap.value, 1),
        "calibration": cap.calibration,
        "rate_per_s": round(cap.value * LOAD_SHARE, 1),
        "overload_rate_per_s": round(cap.value * plan.overload, 1),
        "calls": calls,
        "books": {
            k: v for k, v in dataclasses.asdict(books).items() if k not in ("expected", "unanswered", "directive_of")
        },  # fmt: skip
        "cpu_ms_per_call": {k: round(v * 1000 / max(calls, 1), 3) for k, v in cpu.items()},
        "fds_start": fds0,
        "fds_end": fds1,
        "rss_warm_mb": {k: round(v / MB, 1) for k, v in rss_warm.items()},
        "rss_end_mb": {k: round(v / MB, 1) for k, v in rss_end.items()},
        "rss_series_mb": rss_series,
        "trim": trim,
        "hits_metric": int(hits),
        "audit_lines": ledger_books["lines"],
        "audit_dropped": int(dropped),
        "audit_queued": int(queued),
        "predicted_hits": books.predicted_hits,
        "gateway_attempts_timed_out": int(timed_out),
        "ledger_books": ledger_books,
        "active_calls_end": active,
        "expired": expired,
        "organic_server_faulted": int(organic_server_faulted),
        "hostile": hostile_result,
    }
    result["memory"] = {name: mem.attribute(lines, plan, plan.warm_at, traffic_wall) for name, lines in probes.items()}
    if plan.frames:
        result["tracemalloc_top"] = {name: mem.top_sites(lines) for name, lines in probes.items()}
    return result


def check(r: dict) -> list[str]:
    """The soak's assertions; returns what failed (empty = pass)."""
    bad = []
    for k in r["fds_start"]:
        if abs(r["fds_end"][k] - r["fds_start"][k]) > FDS_SLACK:
            bad.append(f"fds of {k}: {r['fds_start'][k]} -> {r['fds_end'][k]}")
    bad += mem.check_rss(r)
    b = r["books"]
    if b["organic_injected"] or r["organic_server_faulted"]:
        bad.append(f"organic calls faulted: client {b['organic_injected']}, server {r['organic_server_faulted']}")
    if r["audit_lines"] + r["audit_dropped"] + r["audit_queued"] != r["hits_metric"]:
        bad.append(f"audit lines {r['audit_lines']} + dropped {r['audit_dropped']} + queued {r['audit_queued']} "
                   f"!= drill_fault_hits_total {r['hits_metric']}")  # fmt: skip
    lb = r["ledger_books"]
    if lb["unpredicted_count"] or lb["unknown_count"] or lb["mismatched_count"]:
        bad.append(
            f"audited hits differ from is_hit_attempt: {lb['unpredicted_count']} lines no hash predicts "
            f"{lb['unpredicted']}, {lb['unknown_count']} ids never sent tagged {lb['unknown_ids']}, "
            f"{lb['mismatched_count']} answered calls {lb['mismatched']}"
        )
    if r["predicted_hits"] == 0:
        bad.append("no fault was predicted: the run proves nothing")
    if r["active_calls_end"] != 0:
        bad.append(f"drill_fault_active_calls {r['active_calls_end']} at the end")
    if b["skipped_overload"]:
        bad.append(f"{b['skipped_overload']} arrivals skipped (generator overloaded)")
    if r["hostile"]["growth"] >= 50:
        bad.append(f"hostile values grew the exposition by {r['hostile']['growth']} series")
    if lb["missing_count"] > r["gateway_attempts_timed_out"]:
        bad.append(
            f"{lb['missing_count']} answered calls lost a predicted hit, more than the "
            f"{r['gateway_attempts_timed_out']} gateway attempts cut off by their timeout {lb['missing']}"
        )
    bad += mem.check_objects(r)
    if r["plan"]["overload"]:
        bad += mem.check_overload(r)
    return bad


def run(plan: Plan, workdir: pathlib.Path | None = None) -> tuple[dict, list[str]]:
    if workdir is None:
        workdir = pathlib.Path(tempfile.mkdtemp(prefix="drill-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    affinity = os.sched_getaffinity(0)
    try:
        result = asyncio.run(soak(plan, workdir))
    finally:
        os.sched_setaffinity(0, affinity)
    return result, check(result)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="traffic duration (default 10)")
    ap.add_argument("--switch-s", type=float, default=30.0, help="fault on/off period (default 30 s)")
    ap.add_argument("--overload", type=float, default=0.0, help="overload mode: offered share of capacity (e.g. 1.5)")
    phases = " (default 10 %%/7.5 %%/5 %%/15 %%/2.5 %% of the run, at most 120/90/60/180/30 s)"
    ap.add_argument("--warm-s", type=float, default=None, help="overload mode: warm-up at 60 %%" + phases)
    ap.add_argument("--over-s", type=float, default=None, help="overload mode: seconds of each overload")
    ap.add_argument("--calm-s", type=float, default=None, help="overload mode: seconds at 60 %% between")
    ap.add_argument("--recover-s", type=float, default=None, help="overload mode: last seconds at 60 %%")
    ap.add_argument("--interval-s", type=float, default=None, help="probe sample period")
    ap.add_argument("--tracemalloc", type=int, default=0, metavar="N", help="diagnostic: trace N frames deep")
    ap.add_argument("--server-env", action="append", default=[], metavar="K=V", help="e.g. MALLOC_ARENA_MAX=2")
    ap.add_argument("--out", default=None, help="work directory for server logs and probes (default: a temp dir)")
    ap.add_argument("--judge", metavar="FILE", help="judge a saved run (its printed JSON) by these rules")
    args = ap.parse_args(argv)
    if args.judge:
        return judge(pathlib.Path(args.judge))
    if not 0 < args.minutes <= 120:
        ap.error("--minutes must be in (0, 120]")
    if args.overload and not 1.0 < args.overload <= 4.0:
        ap.error("--overload must be in (1, 4]")
    env = tuple(tuple(kv.split("=", 1)) for kv in args.server_env)
    plan = Plan.scaled(args.minutes * 60, switch_s=args.switch_s, overload=args.overload, warm_s=args.warm_s,
                       over_s=args.over_s, calm_s=args.calm_s, recover_s=args.recover_s, interval_s=args.interval_s,
                       frames=args.tracemalloc, env=env)  # fmt: skip
    if plan.overload and plan.warm_s + plan.recover_s >= plan.seconds:
        ap.error("--minutes leaves no time for overload after --warm-s and --recover-s")
    print(header("soak", pinned=False), flush=True)  # the JSON --judge reads follows
    result, bad = run(plan, pathlib.Path(args.out) if args.out else None)
    print(json.dumps(result, indent=1, sort_keys=True))
    for line in summary(result):
        print(line)
    print("soak: PASS" if not bad else "soak: FAIL " + "; ".join(bad))
    return 0 if not bad else 1


def judge(path: pathlib.Path) -> int:
    """The verdict of a saved run (the JSON this script printed) under the current rules."""
    text = path.read_text()
    start = text.index("\n{") + 1
    result = json.loads(text[start : text.index("\n}\n", start) + 2])
    bad = check(result)
    for line in summary(result):
        print(line)
    print("soak: PASS" if not bad else "soak: FAIL " + "; ".join(bad))
    return 0 if not bad else 1


def summary(r: dict) -> list[str]:
    b = r["books"]
    calibration = r.get("calibration", {})  # runs saved before the calibration have none
    lines = [
        f"soak: {r['mode']}, {r['seconds']} s at {r['rate_per_s']}/s"
        + (f" and {r['overload_rate_per_s']}/s in overload" if r["plan"]["overload"] else "")
        + f" (capacity {r['capacity_per_s']}/s: closed loop {r.get('capacity_closed_loop_per_s')}/s, servers' core"
        f" {calibration.get('server_core_busy')} busy at {calibration.get('offered_per_s')}/s;"
        f" pinned={r['pinned']}, load average {r['load_average']}): "
        f"{r['calls']} calls, {b['organic']} organic ({b['organic_failed']} failed, {b['organic_injected']} "
        f"injected), {b['drill']} drill ({b['drill_tagged']} tagged, {b['drill_failed']} failed, "
        f"{b['drill_injected']} injected); errors {b['other_errors']}",
        f"soak: hits audit lines={r['audit_lines']} (+{r['audit_dropped']} dropped, {r['audit_queued']} queued) "
        f"metric={r['hits_metric']} predicted={r['predicted_hits']}; every line a predicted hit of its attempt: "
        f"{not r['ledger_books']['unpredicted_count']}; answered tagged calls exactly as predicted "
        f"{r['ledger_books']['answered_exact']}, retried after a failure not injected "
        f"{r['ledger_books']['answered_disturbed']}, an attempt cut off before the ledger began it "
        f"{r['ledger_books']['missing_count']}, differing {r['ledger_books']['mismatched_count']}; "
        f"{r['ledger_books']['unanswered']} out of deadline (predicted {r['ledger_books']['unanswered_predicted']}, "
        f"audited {r['ledger_books']['unanswered_audited']})",
        f"soak: fds {r['fds_start']} -> {r['fds_end']}; RSS MB warm {r['rss_warm_mb']} -> end {r['rss_end_mb']}; "
        f"CPU ms/call {r['cpu_ms_per_call']}; answered without work because the caller had left "
        f"(drill_server_expired_total by where) {r['expired']}",
        f"soak: hostile {r['plan']['hostile_calls']} calls grew the exposition by {r['hostile']['growth']} series",
    ]
    lines += mem.summary(r)
    return lines


if __name__ == "__main__":
    sys.exit(main())
