"""The edge's calls counted per whole second of their end: what makes the runner and a read-back agree exactly.

A drill's numbers come from per-second counts of the edge client's calls. A
scraper and a Prometheus that watched the run each sample cumulative counters at
their own moments, so the same call can land in different seconds for the two,
and a second that sits on the SLO's edge can flip: the read-back then disagreed
with the runner by whole seconds (issue 19 saw MTTR 2 s against 4 s). And a busy
process samples late, so even one reader's seconds are not the seconds they claim.

`EdgeCounts` instead files every finished call under the whole unix second in
which it ended (the second (s−1, s] is filed as s, the runner's own convention)
and can tell, for any second s that has ended, the exact cumulative counts up to
s, whenever it is asked. The runner asks it directly for each second of a trial;
as a collector it exports the counts up to the last ended second, *stamped with
that second* (the exposition format carries a timestamp per sample and
Prometheus stores it as given). So every reader holds the same value for the
same second, however late it looks: the read-back equals the runner wherever
Prometheus scraped that second, and a second it missed shows as a gap in the
timestamps, which the read-back reports as its resolution. Calls are filed by
the load that makes them (not by sampling the interceptor's live counters), so a
stalled clock cannot move a call to another second.

Pure prometheus_client, no grpc: the aio load and a Locust process both use it.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator

from prometheus_client.core import Metric
from prometheus_client.process_collector import PROCESS_COLLECTOR
from prometheus_client.registry import Collector, CollectorRegistry

from harness.core import metrics as m
from harness.core.faults import Mode
from harness.core.status import STATUS_NAMES

#: (config, method, traffic, status, mode, injected) of `drill_client_calls_total`
CallKey = tuple[str, str, str, str, str, str]
#: (config, method, traffic, mode) of `drill_client_latency_seconds`
LatencyKey = tuple[str, str, str, str]
#: (config, method, traffic) of `drill_client_started_total`
StartedKey = tuple[str, str, str]

CALLS_NAME = m.sample_name(m.CLIENT_CALLS)
LATENCY_NAME = m.sample_name(m.CLIENT_LATENCY)
STARTED_NAME = m.sample_name(m.CLIENT_STARTED)
#: seconds of per-second increments kept apart before they are folded into the running base
HORIZON_S = 600


def second_of(unix: float) -> int:
    """The whole second a moment is filed under: (s−1, s] → s."""
    return math.ceil(unix)


class EdgeCounts(Collector):
    """Per-second counts of one load process's edge calls; a collector of their stamped cumulative values."""

    def __init__(self, service: str, buckets: Iterable[float] = m.LATENCY_BUCKETS) -> None:
        self.service = service
        self.buckets = tuple(sorted(buckets))
        self._lock = threading.Lock()
        self._calls: dict[int, Counter] = {}
        self._lat: dict[int, Counter] = {}  # (LatencyKey, bucket index or len = +Inf) -> count
        self._lat_sum: dict[int, Counter] = {}
        self._started: dict[int, Counter] = {}
        self._base_started: Counter = Counter()
        self._base_calls: Counter = Counter()
        self._base_lat: Counter = Counter()
        self._base_sum: Counter = Counter()
        self._base_second = -1  # every second ≤ this is in the base
        self._declared: set[CallKey] = set()
        self._declared_lat: set[LatencyKey] = set()

    # -- writing ---------------------------------------------------------------------------------
    def declare(self, config: str, method: str) -> None:
        """Every series of (config, method) at 0 from now: no series is born inside a reader's window."""
        with self._lock:
            for traffic in ("organic", "drill"):
                self._base_started.setdefault((config, method, traffic), 0)
            for traffic, modes in (("organic", (Mode.NONE.value,)), ("drill", tuple(x.value for x in Mode))):
                for mode in modes:
                    self._declared_lat.add((config, method, traffic, mode))
                    for status in STATUS_NAMES:
                        for injected in ("false", "true"):
                            self._declared.add((config, method, traffic, status, mode, injected))

    def record(
        self, config: str, method: str, traffic: str, status: str, mode: str, injected: bool, latency_s: float,
        ended: float | None = None,
    ) -> None:  # fmt: skip
        """File one finished call under the second it ended in (now, unless `ended` is given).

        "Now" is read while the lock is held, as `collect` reads its second: a thread paused between reading
        the clock and taking the lock could otherwise file a call under a second a reader had already
        exported without it (the read-back then disagrees with the runner by a second)."""
        b = next((i for i, le in enumerate(self.buckets) if latency_s <= le), len(self.buckets))
        lat_key = (config, method, traffic, mode)
        with self._lock:
            second = second_of(time.time() if ended is None else ended)
            if second <= self._base_second:  # later than the horizon: cannot happen for a live load
                second = self._base_second + 1
            self._calls.setdefault(second, Counter())[
                (config, method, traffic, status, mode, "true" if injected else "false")
            ] += 1
            self._lat.setdefault(second, Counter())[(lat_key, b)] += 1
            self._lat_sum.setdefault(second, Counter())[lat_key] += latency_s
            self._fold(second - HORIZON_S)

    def start(self, config: str, method: str, traffic: str, at: float | None = None) -> None:
        """File one call the load started under the second it started in (now, unless `at` is given): the
        offered load counted where it happens, not estimated from latencies after the calls end."""
        with self._lock:  # the clock under the lock: see record()
            second = max(second_of(time.time() if at is None else at), self._base_second + 1)
            self._started.setdefault(second, Counter())[(config, method, traffic)] += 1

    def _fold(self, upto: int) -> None:
        """Move every second ≤ upto into the base (held lock)."""
        for second in [s for s in self._started if s <= upto]:
            self._base_started.update(self._started.pop(second))
        for second in [s for s in self._calls if s <= upto]:
            self._base_calls.update(self._calls.pop(second))
            self._base_lat.update(self._lat.pop(second, Counter()))
            self._base_sum.update(self._lat_sum.pop(second, Counter()))
        self._base_second = max(self._base_second, upto)

    # -- reading ---------------------------------------------------------------------------------
    def _snapshot(self, second: int | None) -> tuple[int, Counter, Counter, Counter, Counter]:
        """(second, calls, latency buckets, latency sums, starts) up to `second` — the last whole second that
        has ended when None, read on the clock under the same lock as the counts (see record())."""
        with self._lock:
            if second is None:
                second = math.floor(time.time())
            calls, lat, sums = Counter(self._base_calls), Counter(self._base_lat), Counter(self._base_sum)
            started = Counter(self._base_started)
            for s, inc in self._calls.items():
                if s <= second:
                    calls.update(inc)
                    lat.update(self._lat.get(s, Counter()))
                    sums.update(self._lat_sum.get(s, Counter()))
            for s, inc in self._started.items():
                if s <= second:
                    started.update(inc)
            declared, declared_lat = set(self._declared), set(self._declared_lat)
        for key in declared:
            calls.setdefault(key, 0)
        for key in declared_lat:
            sums.setdefault(key, 0.0)
        return second, calls, lat, sums, started

    def families(self, second: int | None = None) -> list[Metric]:
        """`drill_client_calls_total`, `drill_client_latency_seconds` and `drill_client_started_total` as of
        `second` (None: the last whole second that has ended), stamped with it."""
        second, calls, lat, sums, started = self._snapshot(second)
        st = Metric(STARTED_NAME, m.CLIENT_STARTED.describe()[0].documentation, "counter")
        for (config, method, traffic), v in sorted(started.items()):
            labels = {"service": self.service, "grpc_method": method, "traffic": traffic, "config": config}
            st.add_sample(STARTED_NAME + "_total", labels, float(v), timestamp=float(second))
        c = Metric(CALLS_NAME, m.CLIENT_CALLS.describe()[0].documentation, "counter")
        for (config, method, traffic, status, mode, injected), v in sorted(calls.items()):
            labels = {"service": self.service, "grpc_method": method, "grpc_status": status, "fault_mode": mode,
                      "traffic": traffic, "config": config, "injected": injected}  # fmt: skip
            c.add_sample(CALLS_NAME + "_total", labels, float(v), timestamp=float(second))
        h = Metric(LATENCY_NAME, m.CLIENT_LATENCY.describe()[0].documentation, "histogram")
        per_key: dict[LatencyKey, list[int]] = {}
        for (key, b), v in lat.items():
            per_key.setdefault(key, [0] * (len(self.buckets) + 1))[b] += v
        for key in sorted(set(per_key) | set(sums)):
            config, method, traffic, mode = key
            base = {"service": self.service, "grpc_method": method, "fault_mode": mode, "traffic": traffic,
                    "config": config}  # fmt: skip
            counts = per_key.get(key, [0] * (len(self.buckets) + 1))
            running = 0
            for le, n in zip((*self.buckets, math.inf), counts, strict=True):
                running += n
                h.add_sample(LATENCY_NAME + "_bucket", {**base, "le": _le(le)}, float(running), timestamp=float(second))
            h.add_sample(LATENCY_NAME + "_count", base, float(running), timestamp=float(second))
            h.add_sample(LATENCY_NAME + "_sum", base, float(sums.get(key, 0.0)), timestamp=float(second))
        return [c, h, st]

    def collect(self) -> Iterator[Metric]:
        """The counts up to the last whole second that has ended, stamped with it."""
        yield from self.families(None)


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


class LoadExport(Collector):
    """A load process's /metrics: its `EdgeCounts` (stamped), the drill timeline gauges, its streams' messages
    and the process metrics, live. Nothing else of the process's registry: a test process (or an embedding program) may
    hold thousands of unrelated series, and a 1-s scrape must stay small."""

    def __init__(self, counts: EdgeCounts, extra: tuple = ()) -> None:
        """`extra`: more collectors the process serves (the runner: the links its trials run in it)."""
        self.counts = counts
        self.sources = (
            m.PHASE, m.FAULT_ACTIVE, m.TRIAL_PHASE_START, m.PLAN_INFO, m.CLIENT_STREAM_MESSAGES, PROCESS_COLLECTOR,
            *extra,
        )  # fmt: skip

    def collect(self) -> Iterator[Metric]:
        yield from self.counts.collect()
        for source in self.sources:
            yield from source.collect()

    def registry(self) -> CollectorRegistry:
        """A registry serving this export (for `start_http_server(..., registry=)`)."""
        reg = CollectorRegistry(auto_describe=False)
        reg.register(self)
        return reg


def next_second(now: float | None = None) -> float:
    """The next whole unix second after `now`: a schedule starting there has time to begin."""
    now = time.time() if now is None else now
    return float(math.floor(now) + 1)
