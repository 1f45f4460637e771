"""What a grpc.aio server does past its limits: refuse at once, never queue, and count it (contracts §7, §15).

A grpc.aio server holds calls in two places; each gets a bound:

- **In flight** (`InFlight`): calls whose handler is running. Past `limit` the server interceptor refuses a
  new call at once with RESOURCE_EXHAUSTED `drill: in-flight limit N reached`, before the gate: never faulted
  (no hit, no marker, no span), never queued. It is counted in
  `drill_server_refused_total{reason="in_flight"}` and in the call counts (status RESOURCE_EXHAUSTED,
  fault_mode none), with a `call_refused` audit line rate-limited like the other refusals. Health and
  reflection calls are neither counted nor refused: a probe must not fail because the service is busy (a
  liveness probe failing under load restarts the pod and turns an overload into an outage). The limit is
  checked when grpc hands the call over (a handler that aborts without reading the request) and again at
  handler entry (for a call let in meanwhile), so at most `limit` handlers run at once.
- **Backlog** (`backlog_options`): calls the gRPC core has accepted and holds until the event loop takes
  them. grpc.aio takes one call at a time from the core, so when the loop is saturated that is where calls
  wait: without a bound, for seconds (grpc's own guard starts refusing at 1,000 waiting). With a backlog
  of B the core holds at most B + 1 and refuses the next one at once, in C: tens of µs of CPU, where any
  refusal made in Python pays grpc.aio's whole per-call floor (a task, its state, a status batch: as much
  as a bare grpc.aio call). That is the bound that holds when even refusing in Python would cost more than
  the process has. grpcio 1.85 answers those calls CANCELLED (its filter-stack server cancels them; the
  RESOURCE_EXHAUSTED "Too many pending requests" exists only on its promise-based path), and this process
  never sees them: `BacklogCounter` derives their number from the core's own count (channelz).
"""

from __future__ import annotations

import json
import logging
import threading
import weakref

import grpc
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from harness.core import audit
from harness.core import metrics as m
from harness.core.audit import RefusalLimiter
from harness.core.faults import Kind
from harness.core.headers import MAX_VALUE_LEN
from harness.interceptors._handlers import method_handler

_log = logging.getLogger("drill.overload")

#: The `reason` label of `drill_server_refused_total` for the in-flight limit.
IN_FLIGHT = "in_flight"
#: The audit event of a call refused by a limit.
REFUSED_EVENT = "call_refused"
#: grpc core channel args: calls the core holds for the application before it refuses (soft: from here a
#: share is refused; hard: all). Both set to one value: the bound is exact, not random early detection.
_PENDING_SOFT = "grpc.server.max_pending_requests"
_PENDING_HARD = "grpc.server.max_pending_requests_hard_limit"


def refusal_details(limit: int) -> str:
    """The status description of a call refused by the in-flight limit."""
    return f"drill: in-flight limit {limit} reached"


class InFlight:
    """Calls whose handler is running on one server (changed on its event loop only), their `limit` (0: none),
    every call grpc handed to the interceptor (`arrived`, health and reflection included: what `BacklogCounter`
    subtracts from the core's count), and what a refusal records (`refused`)."""

    __slots__ = ("limit", "bound", "calls", "arrived", "details", "handler", "_service", "_instance", "_limiter",
                 "__weakref__")  # fmt: skip

    def __init__(self, limit: int, service: str = "", instance: str = "", limiter: RefusalLimiter | None = None):
        self.limit = limit
        #: The limit to compare `calls` with: `inf` when there is none.
        self.bound = limit or float("inf")
        self.calls = 0
        self.arrived = 0
        self.details = refusal_details(limit)
        #: What a call refused when grpc hands it over gets: a client-streaming handler whatever the method's
        #: kind (on the wire every kind is a stream), so grpc reads no request before the status goes out.
        self.handler = method_handler(Kind.CLIENT_STREAMING, self._refuse)
        self._service, self._instance = service, instance
        self._limiter = limiter if limiter is not None else RefusalLimiter()

    async def _refuse(self, requests, context) -> None:
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, self.details)

    def refused(self, real: str, method: str, metrics, traffic: str, request_id: str) -> None:
        """Record one refused call of `real` (`pkg.Service/Method`; `method`: its metric label, `metrics`: its
        children or None): its series and, at most 5 per method every 10 s, a `call_refused` audit line (the
        next one says how many were held back). Never raises."""
        try:
            if metrics is not None:
                metrics.refused(IN_FLIGHT, traffic)
            suppressed = self._limiter.admit((REFUSED_EVENT, IN_FLIGHT, method))
            if suppressed is None:
                return
            fields = dict(reason=IN_FLIGHT, limit=self.limit, request_id=request_id[:MAX_VALUE_LEN], traffic=traffic,
                          service=self._service, method=real, instance=self._instance)  # fmt: skip
            if suppressed:
                fields["suppressed"] = suppressed
            audit.emit(REFUSED_EVENT, logging.WARNING, **fields)
        except Exception:  # noqa: BLE001 - observability must never fail a call
            pass


def backlog_options(max_backlog: int) -> tuple[tuple[str, int], ...]:
    """The server's channel args that bound the core's backlog: at most `max_backlog` + 1 calls wait there."""
    return ((_PENDING_SOFT, max_backlog), (_PENDING_HARD, max_backlog))


# --- the core's backlog refusals, from channelz ---------------------------------------------------------------
def _channelz():
    try:
        from grpc._cython import cygrpc  # what grpcio-channelz reads: no public API exposes the core's counts

        return cygrpc
    except ImportError:  # pragma: no cover - depends on the grpc build
        return None


def channelz_server_ids() -> set[int]:
    """The channelz ids of every gRPC server alive in this process (empty if channelz cannot be read)."""
    cz = _channelz()
    ids: set[int] = set()
    if cz is None:
        return ids
    start = 0
    try:
        while True:
            page = json.loads(cz.channelz_get_servers(start))
            servers = page.get("server", [])
            for s in servers:
                ids.add(int(s["ref"]["serverId"]))
            if page.get("end", True) or not servers:
                return ids
            start = max(ids) + 1
    except Exception:  # noqa: BLE001 - channelz off or a shape we do not know: nothing to count from
        return ids


def calls_started(server_id: int) -> int | None:
    """How many calls the core has started on server `server_id` (channelz), or None if it cannot tell."""
    cz = _channelz()
    if cz is None:
        return None
    try:
        data = json.loads(cz.channelz_get_server(server_id))["server"]["data"]
        return int(data.get("callsStarted", 0))
    except Exception:  # noqa: BLE001 - the server is gone, or channelz is off
        return None


class BacklogCounter(Collector):
    """`drill_server_backlog_refused_total{service}`: per watched server, the calls its core started minus the
    calls that reached its interceptor, read at scrape time and never allowed to go down (a call waiting in the
    backlog at one scrape is counted there and reaches the interceptor later: the count runs ahead by at most
    the calls waiting at a scrape, and is exact once the server is idle unless it ran ahead before)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: channelz server id -> (service, its InFlight (weakly), the last value reported)
        self._servers: dict[int, list] = {}

    def watch(self, server_id: int, service: str, flight: InFlight) -> None:
        with self._lock:
            self._servers[server_id] = [service, weakref.ref(flight), 0]

    def value(self, server_id: int) -> int | None:
        """The count for one watched server (None when the core cannot tell or the server is gone)."""
        with self._lock:
            entry = self._servers.get(server_id)
            if entry is None:
                return None
            flight = entry[1]()
            started = calls_started(server_id) if flight is not None else None
            if started is None:
                del self._servers[server_id]  # stopped and destroyed: its count is no longer the core's
                return None
            entry[2] = max(entry[2], started - flight.arrived)
            return entry[2]

    def collect(self):
        family = CounterMetricFamily(m.SERVER_BACKLOG_REFUSED_NAME, m.SERVER_BACKLOG_REFUSED_HELP, labels=["service"])
        per_service: dict[str, int] = {}
        for server_id in list(self._servers):
            value = self.value(server_id)
            if value is not None:
                service = self._servers[server_id][0]
                per_service[service] = per_service.get(service, 0) + value
        for service, value in sorted(per_service.items()):
            family.add_metric([service], value)
        yield family


_counter: BacklogCounter | None = None
_counter_lock = threading.Lock()


def watch_backlog(server_id: int | None, service: str, flight: InFlight) -> BacklogCounter | None:
    """Count server `server_id`'s backlog refusals on the process-wide collector (registered on first use);
    None (and one log line) when channelz gave no id for it."""
    global _counter
    if server_id is None:
        _log.warning("the gRPC core's channelz did not list this server: calls its backlog bound refuses are "
                     "not counted (drill_server_backlog_refused_total)")  # fmt: skip
        return None
    with _counter_lock:
        if _counter is None:
            _counter = BacklogCounter()
            REGISTRY.register(_counter)
    _counter.watch(server_id, service, flight)
    return _counter
