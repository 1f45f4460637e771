"""The soak's traffic: open-loop organic and drill calls, the books they keep, and hostile values.

`drive` sends open-loop arrivals at a rate that may change with time (`rate_at`),
70 % organic and 30 % drill, with the drill's fault on in odd windows of
`switch_s` (alternating `abort:UNAVAILABLE` with `x-fault-scope: attempt`, and
`delay:20`, ratio 30, targeted at the ledger). `Books` counts what was sent and
what came back, and keeps, per tagged drill call, the hits `is_hit_attempt`
predicts at the ledger (the gateway's naive retries replayed). `hostile` sends
calls with distinct hostile values in every drill header.
Every loop is bounded in count and time; loopback only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import string
import time
import urllib.request
from collections.abc import Callable

import grpc
from grpc import aio
from prometheus_client.parser import text_string_to_metric_families

from harness.core import headers as h
from harness.core.faults import is_hit_attempt
from harness.demo.proto import drill_pb2

SEED = 20261130
TENANT = h.DEFAULT_DRILL_TENANT
RATIO = 30
DIRECTIVES = ("abort:UNAVAILABLE", "delay:20")
NAIVE_ATTEMPTS = 4  # harness/configs/naive.yaml retryPolicy.maxAttempts
DRILL_SHARE = 0.3
CALL_TIMEOUT_S = 2.0
HOSTILE_CALLS = 5000


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
    #: most calls the generator had in flight at once
    in_flight_max: int = 0
    #: how late the generator sent its latest arrival (s): an open-loop schedule sends what it owes
    #: at once after a lag, so any window of its arrivals holds at most rate x (window + this)
    late_max_s: float = 0.0
    other_errors: dict = dataclasses.field(default_factory=dict)
    #: request id -> predicted ledger hits, for tagged drill calls
    expected: dict = dataclasses.field(default_factory=dict)
    #: request id -> the directive it was sent with, for every tagged drill call
    directive_of: dict = dataclasses.field(default_factory=dict)
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


async def drive(
    stub,
    books: Books,
    rate_at: Callable[[float], float],
    seconds: float,
    switch_s: float,
    on_window: Callable[[int], None],
    max_in_flight: Callable[[], int],
    at: tuple[float, Callable[[], None]] | None = None,
) -> None:
    """Open-loop arrivals at `rate_at(elapsed)`/s for `seconds`; the fault is on in odd windows of `switch_s`.

    `on_window(n)` is called as window n starts. Arrivals beyond `max_in_flight()` calls in flight
    are not sent (counted in `books.skipped_overload`). `at=(t, f)` calls `f()` once, `t` seconds in."""
    rng = random.Random(SEED)
    tasks: set[asyncio.Task] = set()
    start = time.monotonic()
    current = 0
    due = start
    seq = 0
    while True:
        now = time.monotonic()
        if due > now:
            await asyncio.sleep(due - now)
        elapsed = time.monotonic() - start
        if due - start >= seconds or elapsed > seconds + 5:  # time bound even if the loop fell behind
            break
        books.late_max_s = max(books.late_max_s, elapsed - (due - start))  # this arrival's lateness
        due += 1.0 / rate_at(due - start)
        if at is not None and elapsed >= at[0]:
            at[1]()
            at = None
        window = int(elapsed // switch_s)
        if window != current:
            current = window
            on_window(window)
        seq += 1
        if len(tasks) >= max_in_flight():
            books.skipped_overload += 1
            continue
        drill = rng.random() < DRILL_SHARE
        directive = DIRECTIVES[(window // 2) % len(DIRECTIVES)] if window % 2 == 1 else None
        if drill:
            books.drill += 1
            if directive:
                books.drill_tagged += 1
                books.directive_of[f"soak-{seq}"] = directive
                expect = predicted(f"soak-{seq}", directive)
                books.predicted_hits += expect
                if expect:
                    books.expected[f"soak-{seq}"] = expect
        else:
            books.organic += 1
        task = asyncio.ensure_future(one_call(stub, books, drill, directive if drill else None, seq))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        books.in_flight_max = max(books.in_flight_max, len(tasks))
    if tasks:
        await asyncio.wait(tasks, timeout=CALL_TIMEOUT_S * NAIVE_ATTEMPTS + 5)


def injected_failure(request_id: str, directive: str, attempt: int) -> bool:
    """Whether the fault failed that attempt of the call (an abort that hits it; a 20-ms delay fails none)."""
    return directive.startswith("abort") and is_hit_attempt(SEED, request_id, directive, RATIO, attempt, "attempt")


def reconcile(books: Books, attempts_by_id: dict[str, list[int]]) -> dict:
    """The ledger's audit lines (request id, attempt) against what `is_hit_attempt` predicts.

    Exact, line by line: every audited (id, attempt) is a hit of the directive that id was sent
    with (`unpredicted` lists those that are not, `unknown` the ids never sent tagged). Per call,
    for tagged drill calls that were answered (OK, or UNAVAILABLE from the gateway's retries):
    the audited attempts are exactly 0..k-1 for the predicted k (`exact`), or the call was
    `disturbed`: an audited attempt n follows an attempt n-1 that no injected fault failed (the
    hash does not hit it, or it was hit with a delay, which fails nothing), so the gateway
    retried after a failure that was not injected (a per-attempt timeout, a shed or a transport
    error under load), which
    the prediction cannot replay; or `missing`: the audited attempts are a strict part of the
    predicted ones (an attempt the gateway's 1-s per-attempt timeout cut off before the ledger's
    handler began, then retried: the overload's doing, never a line too many). Anything else is
    `mismatched`. Calls that ran out of their
    deadline may have lost retries the gateway never sent: their audited attempts are only
    checked line by line.
    """
    unpredicted, unknown = [], []
    for rid, attempts in attempts_by_id.items():
        directive = books.directive_of.get(rid)
        if directive is None:
            unknown.append(rid)
            continue
        unpredicted += [(rid, n) for n in attempts if not is_hit_attempt(SEED, rid, directive, RATIO, n, "attempt")]
    exact = disturbed = 0
    mismatched, missing = [], []
    for rid, directive in books.directive_of.items():
        if rid in books.unanswered:
            continue
        got = sorted(attempts_by_id.get(rid, ()))
        want = list(range(books.expected.get(rid, 0)))
        if got == want:
            exact += 1
        elif set(got) < set(want):
            missing.append(rid)
        elif any(n > 0 and not injected_failure(rid, directive, n - 1) for n in got):
            disturbed += 1
        else:
            mismatched.append(rid)
    return {
        "lines": sum(len(a) for a in attempts_by_id.values()),
        "unpredicted": unpredicted[:10],
        "unpredicted_count": len(unpredicted),
        "unknown_ids": sorted(unknown)[:10],
        "unknown_count": len(unknown),
        "answered_exact": exact,
        "answered_disturbed": disturbed,
        "mismatched": sorted(mismatched)[:10],
        "mismatched_count": len(mismatched),
        "missing": sorted(missing)[:10],
        "missing_count": len(missing),
        "unanswered": len(books.unanswered),
        "unanswered_audited": sum(len(attempts_by_id.get(rid, ())) for rid in books.unanswered),
        "unanswered_predicted": sum(books.expected.get(rid, 0) for rid in books.unanswered),
    }


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
