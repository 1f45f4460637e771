"""The server metrics of one method, with every label child looked up once (contracts §7).

A call's end records four series (calls, latency, A66 duration, deadline gap) and
its start one (A66 started). Resolving `.labels(...)` costs about as much as the
increment itself, so each method keeps the children it records into: the call
and gap series are created at 0 at first sight of the method (so `rate()` sees
their first increment; organic calls carry no fault), the latency and duration
children when first used. Label values come from bounded sets (methods are
bounded by `MethodLabels`), so these tables are bounded too.

The end of an organic call (most calls, no deadline gap) is not written at once:
it is queued (an OK call with no exemplar, most calls, as its seconds alone; others as
(status, seconds[, trace id, wall time])), and a batch sorts each status's seconds,
counts each bucket with one binary search, and writes one increment per (status,
bucket) instead of five locked writes and two bucket searches per call. A call's
start (A66 started) is queued as a mark. A call with a
sampled span leaves its trace id as the exemplar of its latency bucket unless a
later call of the batch in the same bucket does (what one-by-one writes leave:
a bucket keeps its newest exemplar), with the call's own end time and value; the
trace id is formatted only for that one. The batch is written before any of its
series is read (a scrape, `get_sample_value`, a direct `collect()`:
`metrics.PENDING`) and every `FLUSH_AT` queued ends or starts; one batch at a time per method, so a
reader that flushes while another thread is writing a batch waits for it and never
misses a call that has started or ended.
"""

from __future__ import annotations

import bisect
import collections
import math
import threading
import time

from prometheus_client import Histogram
from prometheus_client.samples import Exemplar

from harness.core import metrics as m
from harness.core.faults import Mode
from harness.core.status import STATUS_NAMES
from harness.core.tracing import sampled_trace_id, trace_id_hex

#: (traffic, fault_mode) pairs a call can carry: organic calls never carry a fault.
TRAFFIC_MODES = (("organic", Mode.NONE.value), *(("drill", mode.value) for mode in Mode))
_GAP_MODES = tuple(dict.fromkeys(mode for _, mode in TRAFFIC_MODES))
_NONE = Mode.NONE.value
#: Organic call ends queued before the caller that reaches this many writes the batch itself.
FLUSH_AT = 512
_BOUNDS = m.LATENCY_BUCKETS
_N_BUCKETS = len(_BOUNDS) + 1  # and +Inf


def _batchable() -> bool:
    """Whether prometheus-client's histogram keeps the parts a batch adds to (its per-bucket values and
    its sum, buckets in our order): if a release changes them, calls are written one by one. Probed on
    an unregistered histogram of our buckets, so no series of ours is touched."""
    probe = Histogram("drill_probe_seconds", "probe", buckets=_BOUNDS, registry=None)
    try:
        ok = list(probe._upper_bounds) == [*_BOUNDS, math.inf] and len(probe._buckets) == _N_BUCKETS
        return (
            ok
            and callable(probe._sum.inc)
            and all(callable(b.inc) and callable(b.set_exemplar) for b in probe._buckets)
        )
    except AttributeError:
        return False


BATCHED = _batchable()


def _exemplar(span) -> dict | None:
    """The latency exemplar of a call: its trace id when its span is sampled."""
    tid = trace_id_hex(span)
    return {"trace_id": tid} if tid else None


def _per_bucket(values: list[float]) -> list[int]:
    """How many of `values` fall in each bucket (le: a value equal to a bound is in that bound's bucket):
    sorted once, then one binary search per bound instead of one per value."""
    values = sorted(values)
    counts = [0] * _N_BUCKETS
    below = 0
    for i, bound in enumerate(_BOUNDS):
        upto = bisect.bisect_right(values, bound, below)  # values <= bound: this bucket and those before it
        counts[i] = upto - below
        below = upto
    counts[-1] = len(values) - below
    return counts


def _add(child, counts: list[int], total: float) -> None:
    """`observe` for a batch: `counts[i]` observations in bucket i, `total` seconds in all."""
    child._sum.inc(total)
    buckets = child._buckets
    for i, n in enumerate(counts):
        if n:
            buckets[i].inc(n)


class MethodMetrics:
    """The children one method records into on the server."""

    __slots__ = (
        "started", "call_started", "_service", "_method", "_calls", "_organic_calls", "_organic_latency", "_gap",
        "_latency", "_duration", "_lock", "_pending", "_ok", "_starts", "_flushing", "__weakref__",
    )  # fmt: skip

    def __init__(self, service: str, method: str) -> None:
        self._service = service
        self._method = method
        self.started = m.GRPC_SERVER_CALL_STARTED.labels(method)
        self._calls = {
            (status, traffic, mode): m.SERVER_CALLS.labels(service, method, status, traffic, mode)
            for traffic, mode in TRAFFIC_MODES
            for status in STATUS_NAMES
        }
        #: The children of organic calls (no fault), by status: most calls, one lookup each.
        self._organic_calls = {status: self._calls[(status, "organic", _NONE)] for status in STATUS_NAMES}
        self._organic_latency = None
        self._gap = {mode: m.DEADLINE_GAP.labels(service, method, mode) for mode in _GAP_MODES}
        self._latency: dict[tuple[str, str], object] = {}
        self._duration: dict[str, object] = {}
        self._lock = threading.Lock()
        #: Organic call ends not written yet that are not in `_ok`: (status, seconds[, trace id, wall time]).
        #: Deques: appends and pops are atomic.
        self._pending: collections.deque = collections.deque()
        #: Seconds of OK organic call ends with no exemplar (most calls), not written yet.
        self._ok: collections.deque = collections.deque()
        #: Calls started and not counted yet, a mark each (an append is atomic; a batch deletes what it counted).
        self._starts: list[None] = []
        #: Count one call started (A66): a mark for the next batch, or at once when calls are not batched.
        self.call_started = self._mark_start if BATCHED else self.started.inc
        #: Held while a batch is taken off the queues and written (not `_lock`: writing takes that one).
        self._flushing = threading.Lock()
        if BATCHED:
            m.PENDING.add(self)

    def _latency_child(self, mode: str, traffic: str):
        key = (mode, traffic)
        child = self._latency.get(key)
        if child is None:
            with self._lock:
                child = self._latency[key] = m.SERVER_LATENCY.labels(self._service, self._method, mode, traffic)
        return child

    def _organic_latency_child(self):
        latency = self._organic_latency
        if latency is None:
            latency = self._organic_latency = self._latency_child(_NONE, "organic")
        return latency

    def _duration_child(self, status: str):
        child = self._duration.get(status)
        if child is None:
            with self._lock:
                child = self._duration[status] = m.GRPC_SERVER_CALL_DURATION.labels(self._method, status)
        return child

    def _mark_start(self) -> None:
        starts = self._starts
        starts.append(None)
        if len(starts) >= FLUSH_AT:  # bounded without a reader too (drill calls' ends never trigger a batch)
            self.flush()

    def finished_organic(self, status: str, elapsed: float, span, gap: float | None) -> None:
        """`finished` for an organic call (traffic organic, no fault): queued for the next batch unless it
        carries a deadline gap. `span`: the call's span (its trace id is the latency exemplar), or None."""
        if BATCHED and gap is None:
            pending, ok = self._pending, self._ok
            tid = sampled_trace_id(span) if span is not None else 0  # the id: a queued span would outlive its call
            if tid:
                pending.append((status, elapsed, tid, time.time()))
            elif status == "OK":
                ok.append(elapsed)
            else:
                pending.append((status, elapsed))
            if len(ok) + len(pending) >= FLUSH_AT:
                self.flush()
            return
        self._organic_latency_child().observe(elapsed, _exemplar(span))
        self._duration_child(status).observe(elapsed)
        calls = self._organic_calls.get(status)
        if calls is None:
            calls = self._calls_child(status, "organic", _NONE)
        calls.inc()
        if gap is not None:
            self._gap[_NONE].observe(gap)

    def flush(self) -> None:
        """Write the queued starts and organic call ends: per status, its calls, and both histograms by bucket."""
        if not self._ok and not self._pending and not self._starts and not self._flushing.locked():
            return
        with self._flushing:
            self._write_batch()

    def _write_batch(self) -> None:
        starts = self._starts
        started = len(starts)
        if started:
            del starts[:started]  # marks appended meanwhile stay for the next batch
            self.started.inc(started)
        ok, pending = self._ok, self._pending
        # Take what is queued now (ends queued meanwhile stay for the next batch): seconds per status,
        # and per bucket the newest call with a sampled span (a bucket keeps its newest exemplar).
        popleft = ok.popleft
        seconds: dict[str, list[float]] = {"OK": [popleft() for _ in range(len(ok))]}
        traced: dict[int, tuple] = {}
        popleft = pending.popleft
        for entry in [popleft() for _ in range(len(pending))]:
            seconds.setdefault(entry[0], []).append(entry[1])
            if len(entry) > 2:
                traced[bisect.bisect_left(_BOUNDS, entry[1])] = entry  # its bucket: the first bound >= it
        latency = self._organic_latency_child()
        for status, values in seconds.items():
            if not values:
                continue
            per_bucket, total = _per_bucket(values), math.fsum(values)
            _add(latency, per_bucket, total)
            _add(self._duration_child(status), per_bucket, total)
            calls = self._organic_calls.get(status)
            if calls is None:
                calls = self._calls_child(status, "organic", _NONE)
            calls.inc(len(values))
        for i, (_, elapsed, tid, wall) in traced.items():
            latency._buckets[i].set_exemplar(Exemplar({"trace_id": format(tid, "032x")}, elapsed, wall))

    def expired(self, status: str, traffic: str) -> None:
        """A call answered without its handler because its caller had left (`where="handler"`): started and
        finished at once, with no fault."""
        m.SERVER_EXPIRED.labels(self._service, self._method, "handler").inc()
        self._answered_at_once(status, traffic)

    def refused(self, reason: str, traffic: str) -> None:
        """A call refused at once by a limit of the server's (`reason`, e.g. in_flight): RESOURCE_EXHAUSTED,
        started and finished at once, with no fault."""
        m.SERVER_REFUSED.labels(self._service, self._method, reason).inc()
        self._answered_at_once("RESOURCE_EXHAUSTED", traffic)

    def _answered_at_once(self, status: str, traffic: str) -> None:
        self.call_started()
        self._duration_child(status).observe(0.0)
        calls = self._calls.get((status, traffic, _NONE))
        if calls is None:
            calls = self._calls_child(status, traffic, _NONE)
        calls.inc()

    def _calls_child(self, status: str, traffic: str, mode: str):
        # a status outside the known names: created on the fly, like any label value
        return m.SERVER_CALLS.labels(self._service, self._method, status, traffic, mode)

    def finished(self, status: str, traffic: str, mode: str, elapsed: float, span, gap: float | None) -> None:
        """Record one finished call; `span`: its span or None; `gap`: seconds past the caller's deadline (None:
        none, or not past)."""
        self._latency_child(mode, traffic).observe(elapsed, _exemplar(span))
        self._duration_child(status).observe(elapsed)
        calls = self._calls.get((status, traffic, mode))
        if calls is None:
            calls = self._calls_child(status, traffic, mode)
        calls.inc()
        if gap is not None:
            self._gap[mode].observe(gap)


class ServerMetrics:
    """Per server: one `MethodMetrics` per method label, created at first sight."""

    __slots__ = ("_service", "_methods", "_lock")

    def __init__(self, service: str) -> None:
        self._service = service
        self._methods: dict[str, MethodMetrics] = {}
        self._lock = threading.Lock()

    def __call__(self, method: str) -> MethodMetrics:
        mm = self._methods.get(method)
        if mm is None:
            with self._lock:
                mm = self._methods.get(method)
                if mm is None:
                    mm = self._methods[method] = MethodMetrics(self._service, method)
        return mm
