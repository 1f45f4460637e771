"""Soak: a long mixed drill against a real small topology, then the books must balance.

Topology: `drill serve` gateway (naive retries: 4 attempts on UNAVAILABLE) → `drill serve`
ledger, both on 127.0.0.1, pinned to one core while this load generator is pinned to
the other (os.sched_setaffinity). The generator first measures the topology's capacity
(closed loop, a few seconds), then sends open-loop traffic at ~60 % of it: 70 % organic,
30 % drill. The drill's fault switches on and off every `--switch-s` seconds (first
window off, a warm-up), alternating `abort:UNAVAILABLE` (x-fault-scope attempt, so the
gateway's retries are new draws) and `delay:20`, ratio 30, targeted at the ledger.

At the end it asserts:
- open fds of every process back within ±5 of the start;
- RSS growth of each server < 10 % after the warm-up (the first off/on cycle of the fault,
  so every code path has run); RSS is sampled at every switch and reported as a series;
- zero organic calls faulted (client: no `x-drill-fault` trailer; server: fault_mode none);
- audit lines = `drill_fault_hits_total` = the hits `is_hit_attempt` predicts for the
  ids and attempts sent (the gateway's naive retries are replayed by the prediction),
  checked per request id from the audit lines: exactly for every drill call that was
  answered; a call that ran out of its 2 s deadline may have lost retries the gateway
  never sent, so for those the audit count is bounded by the prediction and reported;
- `drill_fault_active_calls` back to 0.
Then, separately, 5,000 calls with distinct hostile values in every drill header, half of
them to unknown methods, must grow the /metrics exposition by fewer than 50 series.

    .venv/bin/python benchmarks/soak.py --minutes 10 [--out DIR]

Prints one figure per line and `soak: PASS` or `soak: FAIL …`; exit 0 only on PASS.
Every loop is bounded in count and time; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import pathlib
import random
import string
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import grpc  # noqa: E402
from grpc import aio  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from harness.core import headers as h  # noqa: E402
from harness.core.faults import is_hit_attempt  # noqa: E402
from harness.demo.proto import drill_pb2, drill_pb2_grpc  # noqa: E402
from harness.procs.spawn import ServeProcess, spawn_serve, stop_processes, wait_serving  # noqa: E402

SEED = 20261130
TENANT = h.DEFAULT_DRILL_TENANT
RATIO = 30
DIRECTIVES = ("abort:UNAVAILABLE", "delay:20")
NAIVE_ATTEMPTS = 4  # harness/configs/naive.yaml retryPolicy.maxAttempts
DRILL_SHARE = 0.3
LOAD_SHARE = 0.6
CALL_TIMEOUT_S = 2.0
MAX_IN_FLIGHT = 2000
HOSTILE_CALLS = 5000
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


# --- /proc readings ------------------------------------------------------------------------
def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def pin(pid: int, cpu: int) -> bool:
    try:
        cpus = sorted(os.sched_getaffinity(0 if pid == os.getpid() else pid))
        if len(os.sched_getaffinity(0)) < 2 and pid == os.getpid():
            return False
        os.sched_setaffinity(pid, {cpu})
        return bool(cpus)
    except OSError:
        return False


def scrape(url: str) -> list:
    with urllib.request.urlopen(url, timeout=5) as r:
        return list(text_string_to_metric_families(r.read().decode()))


def series_count(url: str) -> int:
    return sum(len(f.samples) for f in scrape(url))


def metric_sum(url: str, name: str, **labels: str) -> float:
    total = 0.0
    for fam in scrape(url):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def audit_hits(log: pathlib.Path) -> dict[str, int]:
    """Hits per request id, from the `fault_hit` audit lines of a server log."""
    out: dict[str, int] = {}
    with open(log, errors="replace") as fh:
        for line in fh:
            if '"event":"fault_hit"' not in line:
                continue
            record = json.loads(line[line.index("{") :])
            out[record["request_id"]] = out.get(record["request_id"], 0) + 1
    return out


# --- the topology --------------------------------------------------------------------------
@dataclasses.dataclass
class Topology:
    gateway: ServeProcess
    ledger: ServeProcess

    @property
    def servers(self) -> list[ServeProcess]:
        return [self.gateway, self.ledger]


def start_topology(workdir: pathlib.Path) -> Topology:
    env = {"DRILL_FAULT_TENANTS": TENANT}
    common = ["--port", "0", "--metrics-port", "-1", "--enable-faults", "--seed", str(SEED)]
    common += ["--concurrency", "256", "--queue", "1024"]
    ledger = spawn_serve("ledger", [*common, "--service", "ledger", "--instance-id", "ledger-0"], workdir, env)
    wait_serving([ledger])
    gateway = spawn_serve(
        "gateway",
        [*common, "--service", "gateway", "--instance-id", "gateway-0", "--downstream", ledger.address,
         "--config", "naive"],
        workdir,
        env,
    )  # fmt: skip
    try:
        wait_serving([gateway])
    except BaseException:
        ledger.stop()
        raise
    return Topology(gateway, ledger)


# --- traffic ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Books:
    """What the generator sent and saw (per-id predictions kept for tagged drill calls only)."""

    organic: int = 0
    organic_failed: int = 0
    organic_injected: int = 0
    drill: int = 0
    drill_tagged: int = 0
    drill_failed: int = 0
    drill_injected: int = 0
    predicted_hits: int = 0
    skipped_overload: int = 0
    other_errors: dict = dataclasses.field(default_factory=dict)
    #: request id -> predicted ledger hits, for tagged drill calls
    expected: dict = dataclasses.field(default_factory=dict)
    #: tagged drill calls that ended other than OK/UNAVAILABLE (their retries may not all have been sent)
    unanswered: set = dataclasses.field(default_factory=set)


def predicted(request_id: str, directive: str) -> int:
    """Ledger hits for one drill call: attempt 0, and the gateway's naive retries of aborted attempts."""
    if directive.startswith("delay"):
        return int(is_hit_attempt(SEED, request_id, directive, RATIO, 0, "attempt"))
    hits = 0
    for n in range(NAIVE_ATTEMPTS):
        if not is_hit_attempt(SEED, request_id, directive, RATIO, n, "attempt"):
            break
        hits += 1
    return hits


def drill_metadata(request_id: str, directive: str | None) -> tuple:
    md = [(h.TENANT, TENANT), (h.REQUEST_ID, request_id)]
    if directive:
        md += [(h.FAULT, directive), (h.FAULT_RATIO, str(RATIO)), (h.FAULT_TARGET, "ledger"),
               (h.FAULT_SCOPE, "attempt")]  # fmt: skip
    return tuple(md)


async def one_call(stub, books: Books, drill: bool, directive: str | None, seq: int) -> None:
    request_id = f"soak-{seq}"
    md = drill_metadata(request_id, directive) if drill else ((h.REQUEST_ID, request_id),)
    call = stub.Call(drill_pb2.CallRequest(payload="s"), metadata=md, timeout=CALL_TIMEOUT_S)
    failed = False
    try:
        await call
        trailing = await call.trailing_metadata()
    except aio.AioRpcError as err:
        failed = True
        trailing = err.trailing_metadata()
        if not (drill and err.code() is grpc.StatusCode.UNAVAILABLE):
            key = f"{'drill' if drill else 'organic'}:{err.code().name}"
            books.other_errors[key] = books.other_errors.get(key, 0) + 1
            if drill and directive:
                books.unanswered.add(request_id)
    injected = h.has_fault_marker(trailing)
    if drill:
        books.drill_failed += failed
        books.drill_injected += injected
    else:
        books.organic_failed += failed
        books.organic_injected += injected


async def capacity(stub, seconds: float, workers: int = 32) -> float:
    """Closed-loop organic calls per second the topology (and this generator) sustains."""
    done = 0
    end = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal done
        while time.monotonic() < end:
            try:
                await stub.Call(drill_pb2.CallRequest(payload="c"), timeout=CALL_TIMEOUT_S)
            except aio.AioRpcError:
                pass
            done += 1

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return done / (time.monotonic() - t0)


async def drive(stub, books: Books, rate: float, seconds: float, switch_s: float, on_window) -> None:
    """Open-loop arrivals at `rate`/s for `seconds`; the fault is on in odd windows of `switch_s`.

    `on_window(n)` is called as window n starts."""
    rng = random.Random(SEED)
    total = int(rate * seconds)
    tasks: set[asyncio.Task] = set()
    start = time.monotonic()
    current = 0
    for seq in range(total):
        due = start + seq / rate
        now = time.monotonic()
        if due > now:
            await asyncio.sleep(due - now)
        elapsed = time.monotonic() - start
        if elapsed > seconds + 5:  # time bound even if the loop fell behind
            break
        window = int(elapsed // switch_s)
        if window != current:
            current = window
            on_window(window)
        if len(tasks) >= MAX_IN_FLIGHT:
            books.skipped_overload += 1
            continue
        drill = rng.random() < DRILL_SHARE
        directive = DIRECTIVES[(window // 2) % len(DIRECTIVES)] if window % 2 == 1 else None
        if drill:
            books.drill += 1
            if directive:
                books.drill_tagged += 1
                expect = predicted(f"soak-{seq}", directive)
                books.predicted_hits += expect
                if expect:
                    books.expected[f"soak-{seq}"] = expect
        else:
            books.organic += 1
        task = asyncio.ensure_future(one_call(stub, books, drill, directive if drill else None, seq))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=CALL_TIMEOUT_S * NAIVE_ATTEMPTS + 5)


# --- hostile values --------------------------------------------------------------------------
_PRINTABLE = string.ascii_letters + string.digits + string.punctuation + " "


def hostile_value(rng: random.Random, i: int) -> str:
    """A distinct, valid (printable ASCII) metadata value: odd, long, label-breaking."""
    kind = i % 6
    if kind == 0:
        return f'x"}}{{le="{i}"\\,' + "".join(rng.choices(_PRINTABLE, k=20))
    if kind == 1:
        return str(i) * (300 // len(str(i)) + 1)  # oversize
    if kind == 2:
        return f"delay:{i}-{i * 7}"
    if kind == 3:
        return f"abort:NOPE_{i}"
    if kind == 4:
        return f"-{i}"
    return "".join(rng.choices(_PRINTABLE, k=1 + i % 200))


HOSTILE_KEYS = (
    h.TENANT, h.FAULT, h.FAULT_RATIO, h.FAULT_TARGET, h.FAULT_INSTANCES, h.FAULT_METHOD, h.FAULT_SCOPE,
    h.FAULT_ATTEMPTS, h.REQUEST_ID, h.DRILL_TOKEN, h.ORIGIN_DEADLINE, h.CONFIG, h.DRILL_PREVIOUS_RPC_ATTEMPTS,
)  # fmt: skip


async def hostile(address: str, urls: list[str], calls: int = HOSTILE_CALLS, batch: int = 100) -> dict:
    """`calls` calls with distinct hostile values in every drill header, half to unknown methods."""
    before = {u: series_count(u) for u in urls}
    rng = random.Random(7)
    serialize = drill_pb2.CallRequest.SerializeToString
    deserialize = drill_pb2.CallReply.FromString
    async with aio.insecure_channel(address) as ch:
        known = ch.unary_unary("/drill.v1.Demo/Call", request_serializer=serialize, response_deserializer=deserialize)

        async def one(i: int) -> None:
            md = [(k, hostile_value(rng, i * 31 + j)) for j, k in enumerate(HOSTILE_KEYS)]
            if i % 4 == 0:
                md[0] = (h.TENANT, TENANT)  # an allowed tenant: the values reach the parser and the gates
            if i % 2:
                method = f"/drill.v1.Demo/Nope{i}" if i % 4 == 1 else f"/evil{i}.Svc{i}/M{i}"
                mc = ch.unary_unary(method, request_serializer=serialize, response_deserializer=deserialize)
            else:
                mc = known
            try:
                await mc(drill_pb2.CallRequest(payload="h"), metadata=tuple(md), timeout=CALL_TIMEOUT_S)
            except aio.AioRpcError:
                pass

        deadline = time.monotonic() + 300
        for start in range(0, calls, batch):
            if time.monotonic() > deadline:
                break
            await asyncio.gather(*(one(i) for i in range(start, min(calls, start + batch))))
    after = {u: series_count(u) for u in urls}
    return {"before": before, "after": after, "growth": sum(after[u] - before[u] for u in urls)}


# --- the run ---------------------------------------------------------------------------------
async def soak(seconds: float, switch_s: float, workdir: pathlib.Path, capacity_s: float = 3.0) -> dict:
    topo = start_topology(workdir)
    me = os.getpid()
    try:
        pinned = pin(me, 0) and all(pin(s.proc.pid, 1) for s in topo.servers)
        pids = {"generator": me, "gateway": topo.gateway.proc.pid, "ledger": topo.ledger.proc.pid}
        books = Books()
        async with aio.insecure_channel(topo.gateway.address) as ch:
            stub = drill_pb2_grpc.DemoStub(ch)
            await capacity(stub, 0.5)  # connections up, code paths warm
            fds0 = {k: open_fds(p) for k, p in pids.items()}
            cap = await capacity(stub, capacity_s)
            rate = cap * LOAD_SHARE
            rss_warm: dict[str, int] = {}
            rss_series: list[dict] = []
            cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
            t0 = time.monotonic()

            def on_window(n: int) -> None:
                rss = {k: rss_bytes(p) for k, p in pids.items()}
                rss_series.append({"t": n * switch_s, **{k: round(v / 2**20, 1) for k, v in rss.items()}})
                if n == 2:  # warm: one full off/on cycle of the fault has run
                    rss_warm.update(rss)

            await drive(stub, books, rate, seconds, switch_s, on_window)
            wall = time.monotonic() - t0
            cpu = {k: cpu_seconds(p) - cpu0[k] for k, p in pids.items()}
        await asyncio.sleep(2.0)  # let the servers close the channel's connection
        fds1 = {k: open_fds(p) for k, p in pids.items()}
        rss_end = {k: rss_bytes(p) for k, p in pids.items()}
        ledger_url = topo.ledger.metrics_url
        hits = metric_sum(ledger_url, "drill_fault_hits_total")
        per_id = audit_hits(topo.ledger.log_path)
        active = metric_sum(ledger_url, "drill_fault_active_calls") + metric_sum(
            topo.gateway.metrics_url, "drill_fault_active_calls"
        )
        organic_server_faulted = sum(
            metric_sum(s.metrics_url, "drill_server_calls_total", traffic="organic")
            - metric_sum(s.metrics_url, "drill_server_calls_total", traffic="organic", fault_mode="none")
            for s in topo.servers
        )
        hostile_result = await hostile(topo.gateway.address, [topo.gateway.metrics_url, ledger_url])
    finally:
        stop_processes([s.proc for s in topo.servers])
    calls = books.organic + books.drill
    answered = {rid: n for rid, n in books.expected.items() if rid not in books.unanswered}
    mismatched = sorted(rid for rid, n in answered.items() if per_id.get(rid, 0) != n)
    unexpected = sorted(rid for rid in per_id if rid not in books.expected)
    over = sorted(rid for rid in books.unanswered if per_id.get(rid, 0) > books.expected.get(rid, 0))
    return {
        "seconds": round(wall, 1),
        "switch_s": switch_s,
        "pinned": pinned,
        "capacity_per_s": round(cap, 1),
        "rate_per_s": round(rate, 1),
        "calls": calls,
        "books": {k: v for k, v in dataclasses.asdict(books).items() if k not in ("expected", "unanswered")},
        "cpu_ms_per_call": {k: round(v * 1000 / max(calls, 1), 3) for k, v in cpu.items()},
        "fds_start": fds0,
        "fds_end": fds1,
        "rss_warm_mb": {k: round(v / 2**20, 1) for k, v in rss_warm.items()},
        "rss_end_mb": {k: round(v / 2**20, 1) for k, v in rss_end.items()},
        "rss_series_mb": rss_series,
        "hits_metric": int(hits),
        "audit_lines": sum(per_id.values()),
        "predicted_hits": books.predicted_hits,
        "predicted_hits_answered": sum(answered.values()),
        "audit_hits_answered": sum(per_id.get(rid, 0) for rid in answered),
        "unanswered_drill_calls": len(books.unanswered),
        "unanswered_predicted": sum(books.expected.get(rid, 0) for rid in books.unanswered),
        "unanswered_audited": sum(per_id.get(rid, 0) for rid in books.unanswered),
        "ids_mismatched": mismatched[:10],
        "ids_mismatched_count": len(mismatched),
        "ids_unexpected": unexpected[:10],
        "ids_over_prediction": over[:10],
        "active_calls_end": active,
        "organic_server_faulted": int(organic_server_faulted),
        "hostile": hostile_result,
    }


def check(r: dict) -> list[str]:
    """The soak's assertions; returns what failed (empty = pass)."""
    bad = []
    for k in r["fds_start"]:
        if abs(r["fds_end"][k] - r["fds_start"][k]) > 5:
            bad.append(f"fds of {k}: {r['fds_start'][k]} -> {r['fds_end'][k]}")
    for k in ("gateway", "ledger"):
        warm, end = r["rss_warm_mb"].get(k), r["rss_end_mb"][k]
        if warm is None:
            bad.append(f"no warm-up RSS for {k} (run shorter than three windows)")
        elif end > warm * 1.10:
            bad.append(f"RSS of {k} grew {warm} -> {end} MB (>= 10 %)")
    b = r["books"]
    if b["organic_injected"] or r["organic_server_faulted"]:
        bad.append(f"organic calls faulted: client {b['organic_injected']}, server {r['organic_server_faulted']}")
    if r["audit_lines"] != r["hits_metric"]:
        bad.append(f"audit lines {r['audit_lines']} != drill_fault_hits_total {r['hits_metric']}")
    if r["ids_mismatched_count"] or r["ids_unexpected"] or r["ids_over_prediction"]:
        bad.append(
            f"per-id hits differ from is_hit_attempt: {r['ids_mismatched_count']} answered ids "
            f"{r['ids_mismatched']}, unexpected {r['ids_unexpected']}, over {r['ids_over_prediction']}"
        )
    if r["audit_lines"] != r["audit_hits_answered"] + r["unanswered_audited"]:
        bad.append("audit lines are not all accounted for by the ids sent")
    if r["predicted_hits"] == 0:
        bad.append("no fault was predicted: the run proves nothing")
    if r["active_calls_end"] != 0:
        bad.append(f"drill_fault_active_calls {r['active_calls_end']} at the end")
    if b["skipped_overload"]:
        bad.append(f"{b['skipped_overload']} arrivals skipped (generator overloaded)")
    if r["hostile"]["growth"] >= 50:
        bad.append(f"hostile values grew the exposition by {r['hostile']['growth']} series")
    return bad


def run(seconds: float, switch_s: float = 30.0, workdir: pathlib.Path | None = None) -> tuple[dict, list[str]]:
    if workdir is None:
        workdir = pathlib.Path(tempfile.mkdtemp(prefix="drill-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    affinity = os.sched_getaffinity(0)
    try:
        result = asyncio.run(soak(seconds, switch_s, workdir))
    finally:
        os.sched_setaffinity(0, affinity)
    return result, check(result)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="traffic duration (default 10)")
    ap.add_argument("--switch-s", type=float, default=30.0, help="fault on/off period (default 30 s)")
    ap.add_argument("--out", default=None, help="work directory for server logs (default: a temp dir)")
    args = ap.parse_args(argv)
    if not 0 < args.minutes <= 120:
        ap.error("--minutes must be in (0, 120]")
    result, bad = run(args.minutes * 60, args.switch_s, pathlib.Path(args.out) if args.out else None)
    print(json.dumps(result, indent=1, sort_keys=True))
    b = result["books"]
    print(f"soak: {result['seconds']} s at {result['rate_per_s']}/s (capacity {result['capacity_per_s']}/s, "
          f"pinned={result['pinned']}): {result['calls']} calls, {b['organic']} organic "
          f"({b['organic_failed']} failed, {b['organic_injected']} injected), {b['drill']} drill "
          f"({b['drill_tagged']} tagged, {b['drill_failed']} failed, {b['drill_injected']} injected)")  # fmt: skip
    print(f"soak: hits audit={result['audit_lines']} metric={result['hits_metric']} "
          f"predicted={result['predicted_hits']} (answered calls: predicted {result['predicted_hits_answered']}, "
          f"audited {result['audit_hits_answered']}, ids differing {result['ids_mismatched_count']}; "
          f"{result['unanswered_drill_calls']} tagged drill calls out of deadline: predicted "
          f"{result['unanswered_predicted']}, audited {result['unanswered_audited']})")  # fmt: skip
    print(f"soak: fds {result['fds_start']} -> {result['fds_end']}; "
          f"RSS MB after warm-up {result['rss_warm_mb']} -> end {result['rss_end_mb']}; "
          f"CPU ms/call {result['cpu_ms_per_call']}")  # fmt: skip
    print(f"soak: hostile {HOSTILE_CALLS} calls grew the exposition by {result['hostile']['growth']} series "
          f"({result['hostile']['before']} -> {result['hostile']['after']})")  # fmt: skip
    print("soak: PASS" if not bad else "soak: FAIL " + "; ".join(bad))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
