"""The server metrics of one method, with every label child looked up once (contracts §7).

A call's end records four series (calls, latency, A66 duration, deadline gap) and
its start one (A66 started). Resolving `.labels(...)` costs about as much as the
increment itself, so each method keeps the children it records into: the call
and gap series are created at 0 at first sight of the method (so `rate()` sees
their first increment; organic calls carry no fault), the latency and duration
children when first used. Label values come from bounded sets (methods are
bounded by `MethodLabels`), so these tables are bounded too.
"""

from __future__ import annotations

import threading

from harness.core import metrics as m
from harness.core.faults import Mode
from harness.core.status import STATUS_NAMES

#: (traffic, fault_mode) pairs a call can carry: organic calls never carry a fault.
TRAFFIC_MODES = (("organic", Mode.NONE.value), *(("drill", mode.value) for mode in Mode))
_GAP_MODES = tuple(dict.fromkeys(mode for _, mode in TRAFFIC_MODES))
_NONE = Mode.NONE.value


class MethodMetrics:
    """The children one method records into on the server."""

    __slots__ = (
        "started", "_service", "_method", "_calls", "_organic_calls", "_organic_latency", "_gap", "_latency",
        "_duration", "_lock",
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

    def _latency_child(self, mode: str, traffic: str):
        key = (mode, traffic)
        child = self._latency.get(key)
        if child is None:
            with self._lock:
                child = self._latency[key] = m.SERVER_LATENCY.labels(self._service, self._method, mode, traffic)
        return child

    def _duration_child(self, status: str):
        child = self._duration.get(status)
        if child is None:
            with self._lock:
                child = self._duration[status] = m.GRPC_SERVER_CALL_DURATION.labels(self._method, status)
        return child

    def finished_organic(self, status: str, elapsed: float, exemplar: dict | None, gap: float | None) -> None:
        """`finished` for an organic call (traffic organic, no fault), with fewer lookups."""
        latency = self._organic_latency
        if latency is None:
            latency = self._organic_latency = self._latency_child(_NONE, "organic")
        latency.observe(elapsed, exemplar)
        self._duration_child(status).observe(elapsed)
        calls = self._organic_calls.get(status)
        if calls is None:
            calls = self._calls_child(status, "organic", _NONE)
        calls.inc()
        if gap is not None:
            self._gap[_NONE].observe(gap)

    def expired(self, status: str, traffic: str) -> None:
        """A call answered without its handler because its caller had left (`where="handler"`): started and
        finished at once, with no fault."""
        m.SERVER_EXPIRED.labels(self._service, self._method, "handler").inc()
        self.started.inc()
        self._duration_child(status).observe(0.0)
        calls = self._calls.get((status, traffic, _NONE))
        if calls is None:
            calls = self._calls_child(status, traffic, _NONE)
        calls.inc()

    def _calls_child(self, status: str, traffic: str, mode: str):
        # a status outside the known names: created on the fly, like any label value
        return m.SERVER_CALLS.labels(self._service, self._method, status, traffic, mode)

    def finished(
        self, status: str, traffic: str, mode: str, elapsed: float, exemplar: dict | None, gap: float | None
    ) -> None:
        """Record one finished call; `gap`: seconds past the caller's deadline (None: none, or not past)."""
        self._latency_child(mode, traffic).observe(elapsed, exemplar)
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
