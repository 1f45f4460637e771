"""Every Prometheus metric the harness exports (contracts §7): names, labels, buckets.

This module is the single home of metric names. Metrics are declared once at
import on the default registry; hot paths go through the small caches below,
which keep `.labels()` children instead of resolving them per call (resolving
costs ~1 µs, four times an increment).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

# `_created` series double the series count and no dashboard or rule reads them.
disable_created_metrics()


class _Pending:
    """Recorders that hold observations back and write them in batches (the server's organic calls:
    `harness.interceptors._server_metrics`). Every collect of a series they write flushes them
    first, so a scrape, `REGISTRY.get_sample_value` or a direct `collect()` sees every call that
    has ended; between scrapes they flush themselves every few hundred calls."""

    def __init__(self) -> None:
        self._recorders: weakref.WeakSet = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, recorder) -> None:
        with self._lock:
            self._recorders.add(recorder)

    def flush(self) -> None:
        with self._lock:
            recorders = list(self._recorders)
        for recorder in recorders:
            recorder.flush()


PENDING = _Pending()


class _Flushing:
    """A metric that some recorders write in batches: pending writes land before it is read."""

    def collect(self):
        PENDING.flush()
        return super().collect()


class _FlushingCounter(_Flushing, Counter):
    pass


class _FlushingHistogram(_Flushing, Histogram):
    pass


#: 1 ms to 30 s, dense where drills live (tens of ms to a few seconds).
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
    1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0,
)  # fmt: skip

# --- gRFC A66 standard RPC metrics, as Prometheus renders them ---------------------------
GRPC_SERVER_CALL_STARTED = _FlushingCounter(
    "grpc_server_call_started", "Server calls started (gRFC A66).", ["grpc_method"]
)
GRPC_SERVER_CALL_DURATION = _FlushingHistogram(
    "grpc_server_call_duration_seconds",
    "Server call duration (gRFC A66).",
    ["grpc_method", "grpc_status"],
    buckets=LATENCY_BUCKETS,
)
GRPC_CLIENT_ATTEMPT_STARTED = Counter(
    "grpc_client_attempt_started", "Client attempts started (gRFC A66).", ["grpc_method", "grpc_target"]
)
GRPC_CLIENT_ATTEMPT_DURATION = Histogram(
    "grpc_client_attempt_duration_seconds",
    "Client attempt duration (gRFC A66).",
    ["grpc_method", "grpc_target", "grpc_status"],
    buckets=LATENCY_BUCKETS,
)
GRPC_CLIENT_CALL_DURATION = Histogram(
    "grpc_client_call_duration_seconds",
    "Client call duration including retries (gRFC A66).",
    ["grpc_method", "grpc_target", "grpc_status"],
    buckets=LATENCY_BUCKETS,
)

# --- fault injection ---------------------------------------------------------------------
FAULT_HITS = Counter("drill_fault_hits", "Faults injected.", ["service", "grpc_method", "mode"])
FAULT_SKIPPED = Counter(
    "drill_fault_skipped", "Directives seen but not applied, by gate.", ["service", "grpc_method", "reason"]
)
FAULT_REJECTED = Counter(
    "drill_fault_rejected", "Malformed or unsafe directives refused.", ["service", "grpc_method", "reason"]
)
FAULT_ACTIVE_CALLS = Gauge(
    "drill_fault_active_calls",
    "Injected faults in flight (capped by DRILL_FAULT_MAX_ACTIVE).",
    ["service"],
)
FAULT_SWITCH = Gauge(
    "drill_fault_switch",
    "Injection switch of this server: 1 on, 0 off or stopped (the emergency stop is one way).",
    ["service"],
)
SERVER_LATENCY = _FlushingHistogram(
    "drill_server_latency_seconds",
    "Server-side latency by injected fault mode and traffic class.",
    ["service", "grpc_method", "fault_mode", "traffic"],
    buckets=LATENCY_BUCKETS,
)
SERVER_CALLS = _FlushingCounter(
    "drill_server_calls",
    "Server calls by final status, traffic class and injected fault (per-service error rate, amplification).",
    ["service", "grpc_method", "grpc_status", "traffic", "fault_mode"],
)
SERVER_QUEUE = Gauge(
    "drill_server_queue_depth",
    "Calls admitted to this hop's queue and waiting for a worker slot (bounded capacity, harness.demo.service).",
    ["service"],
)
SERVER_SHED = Counter(
    "drill_server_shed",
    "Calls refused by a demo hop's bounded capacity before the fault interceptor (overload).",
    ["service", "grpc_method"],
)
DEADLINE_GAP = Histogram(
    "drill_deadline_gap_seconds",
    "How long after the edge caller's deadline this server finished the call.",
    ["service", "grpc_method", "fault_mode"],
    buckets=LATENCY_BUCKETS,
)

SERVER_EXPIRED = Counter(
    "drill_server_expired",
    "Calls not worked on because their caller's deadline had passed: at handler entry (where=handler, the "
    "interceptor answers DEADLINE_EXCEEDED without running the handler) or after waiting in a bounded queue "
    "(where=queue, the demo's capacity).",
    ["service", "grpc_method", "where"],
)

SERVER_REFUSED = Counter(
    "drill_server_refused",
    "Calls a server refused at once, before any work or fault, because it was at a limit of its own "
    "(reason=in_flight: its in-flight limit, DRILL_MAX_IN_FLIGHT / --max-in-flight); answered RESOURCE_EXHAUSTED.",
    ["service", "grpc_method", "reason"],
)
#: Collected from the gRPC core's own count (harness.interceptors._overload.BacklogCounter), label `service`:
#: calls the core took that never reached the process, refused by the core's backlog bound (--max-backlog).
SERVER_BACKLOG_REFUSED_NAME = "drill_server_backlog_refused"
SERVER_BACKLOG_REFUSED_HELP = (
    "Calls the gRPC core accepted but never handed to this process (derived: the core's calls started minus the "
    "calls that reached the interceptor): refused by the core's backlog bound (--max-backlog; grpcio answers them "
    "CANCELLED), or cancelled by their caller while waiting there. May run ahead by the calls waiting at a scrape."
)

# --- bounded records a call leaves behind (audit lines, spans) ----------------------------
AUDIT_DROPPED = Counter(
    "drill_audit_dropped",
    "Audit lines not written: the writer's bounded queue was full (reason=queue_full, e.g. a slow disk) or an "
    "unauthenticated refusal was rate-limited (reason=rate_limited; the next line says how many).",
    ["event", "reason"],
)
AUDIT_QUEUE = Gauge("drill_audit_queue_lines", "Audit lines waiting for the audit writer thread.")
TRACE_SPANS_DROPPED = Counter(
    "drill_trace_spans_dropped",
    "Ended spans the batch span processor did not export: its bounded queue was full (reason=queue_full: the "
    "exporter is down or slow) or it was shut down (reason=already_shutdown).",
    ["reason"],
)

# --- client side -------------------------------------------------------------------------
CLIENT_LATENCY = Histogram(
    "drill_client_latency_seconds",
    "Client-observed call latency by requested fault mode, traffic class and resilience config.",
    ["service", "grpc_method", "fault_mode", "traffic", "config"],
    buckets=LATENCY_BUCKETS,
)
CLIENT_STARTED = Counter(
    "drill_client_started",
    "Calls the load driver started, filed under the second each started in (exported stamped by the drill "
    "loads): the offered load, exact however long its calls take.",
    ["service", "grpc_method", "traffic", "config"],
)
CLIENT_CALLS = Counter(
    "drill_client_calls",
    "Client calls by final status, traffic class, requested fault mode, resilience config and whether "
    "the server marked the call as injected (x-drill-fault trailer).",
    ["service", "grpc_method", "grpc_status", "fault_mode", "traffic", "config", "injected"],
)
CLIENT_STREAM_MESSAGES = Counter(
    "drill_client_stream_messages",
    "Messages the load's streaming calls sent and received (direction sent|received), counted apart: a "
    "stream is one call of drill_client_calls_total, whatever its messages.",
    ["service", "grpc_method", "direction", "traffic", "config"],
)
#: `direction` of drill_client_stream_messages_total (the Locust user's `messages_sent`/`messages_received`)
STREAM_DIRECTIONS = ("sent", "received")

# --- resilience --------------------------------------------------------------------------
RETRY_ATTEMPTS = Counter(
    "drill_retry_attempts",
    "Retry attempts (not counting first attempts).",
    ["service", "grpc_method", "config"],
)
RETRY_BUDGET_EXHAUSTED = Counter(
    "drill_retry_budget_exhausted",
    "Retries refused by the retry budget.",
    ["service", "grpc_method", "config"],
)
BREAKER_STATE = Gauge(
    "drill_breaker_state",
    "Circuit breaker state: 0 closed, 1 half-open, 2 open.",
    ["service", "backend", "config"],
)
BREAKER_TRANSITIONS = Counter(
    "drill_breaker_transitions",
    "Circuit breaker transitions.",
    ["service", "backend", "config", "from", "to"],
)
BALANCER_PICKS = Counter("drill_balancer_picks", "Backend picks by the balancer.", ["service", "backend", "config"])
FAIL_FAST = Counter(
    "drill_fail_fast",
    "Logical calls answered without (more) downstream attempts: breaker open, no backend, early deadline give-up, "
    "adaptive throttling (reason throttle).",
    ["service", "grpc_method", "config", "reason"],
)
ADAPTIVE_THROTTLE_PROBABILITY = Gauge(
    "drill_adaptive_throttle_reject_probability",
    "Client-side adaptive throttling (SRE book): probability that the next attempt is rejected locally, "
    "max(0, (requests - K*accepts) / (requests + 1)) over the throttle's window.",
    ["service", "config"],
)

# --- connections and drill timeline -------------------------------------------------------
TCP_CONNECTIONS_NAME = "drill_tcp_connections"  # collected by harness.demo.conntrack, labels port, state
FAULT_ACTIVE = Gauge("drill_fault_active", "1 while a drill's fault phase is on.", ["plan"])
PHASE = Gauge("drill_phase", "1 for the drill's current phase.", ["plan", "phase"])
TRIAL_PHASE_START = Gauge(
    "drill_trial_phase_start_seconds",
    "Unix time at which a phase (warmup, fault, recovery, done) of a drill trial starts, set by the load when the "
    "trial starts: a reader finds each trial and its exact fault window without sampling the phase gauges.",
    ["plan", "config", "trial", "phase"],
)
PLAN_INFO = Gauge(
    "drill_plan_info",
    "1 for each configuration of a plan the runner drives; the plan's SLO and what the load offers in the labels: "
    "a reader of the run (drill analyze --prometheus) judges it as the runner did.",
    ["plan", "config", "traffic", "max_error_rate", "max_p99_s", "hold_s", "window_s", "min_calls", "grace_s",
     "organic_rps", "drill_rps", "timeout_s"],
)  # fmt: skip
#: The phases a trial's timeline marks, in order (`done` is the end of the load's schedule).
TRIAL_PHASES = ("warmup", "fault", "recovery", "done")


#: ProcessCollector's gauge (prometheus_client), read by the drills and dashboards.
PROCESS_OPEN_FDS = "process_open_fds"


def sample_name(metric: Any, suffix: str = "") -> str:
    """The name a sample of `metric` carries in the exposition: `sample_name(CLIENT_CALLS, "_total")`."""
    return metric.describe()[0].name + suffix


class ChildCache:
    """Keeps `.labels()` children of one metric keyed by label values. Thread-safe, never evicts.

    Label values here come from bounded sets (methods, modes, statuses), never
    from request ids, so the cache is bounded too.
    """

    __slots__ = ("_metric", "_children", "_lock")

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._children: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            with self._lock:
                child = self._children.get(values)
                if child is None:
                    child = self._metric.labels(*values)
                    self._children[values] = child
        return child


_METHOD_LABELS: dict[str, str] = {}


def method_label(full_method: str) -> str:
    """`/pkg.Service/Method` -> `pkg.Service/Method` (gRFC A66 `grpc.method`), memoised per method."""
    label = _METHOD_LABELS.get(full_method)
    if label is None:
        label = full_method[1:] if full_method.startswith("/") else full_method
        if len(_METHOD_LABELS) < 10_000:  # methods are a bounded set; never let odd input grow this
            _METHOD_LABELS[full_method] = label
    return label


#: Services that answer probes, not users: the standard health check (compose, Kubernetes and `drill run` call it
#: every few seconds) and server reflection. Their calls are not traffic: the server interceptors pass them
#: through untouched (no fault, no series), so a probe every 2 s never moves a drill's call counts.
INFRASTRUCTURE_SERVICES = (
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
)
_INFRASTRUCTURE_PREFIXES = tuple(f"/{s}/" for s in INFRASTRUCTURE_SERVICES)


def is_infrastructure(full_method: str) -> bool:
    """Whether `/pkg.Service/Method` is a health or reflection call (see INFRASTRUCTURE_SERVICES)."""
    return full_method.startswith(_INFRASTRUCTURE_PREFIXES)


#: The `grpc_method` value of methods outside the registered (or first N) set, as gRFC A66.
OTHER_METHOD = "other"


class MethodLabels:
    """Bounded `grpc_method` label values for one server (gRFC A66: unregistered methods are `other`).

    With `registered` given, only those methods keep their name. Without, the first
    `limit` distinct methods do and later ones become `other`, so a catch-all generic
    handler cannot grow the series count with every method name a caller invents.
    """

    __slots__ = ("_registered", "_limit", "_seen", "_lock")

    def __init__(self, registered: frozenset[str] | None = None, limit: int = 100) -> None:
        self._registered = frozenset(m.lstrip("/") for m in registered) if registered is not None else None
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, label: str) -> str:
        if self._registered is not None:
            return label if label in self._registered else OTHER_METHOD
        if label in self._seen:
            return label
        with self._lock:
            if label in self._seen:
                return label
            if len(self._seen) >= self._limit:
                return OTHER_METHOD
            self._seen.add(label)
            return label
