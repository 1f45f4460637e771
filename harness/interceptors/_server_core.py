"""What the aio and sync server interceptors share: planning a call and recording its end.

The grpc plumbing (wrapping handlers, sleeping, aborting) differs between
`grpc.aio` and `grpc`; everything else, the gate decision, the scope, metrics,
the audit line, the deadline gap, lives here once.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time

from opentelemetry.trace import SpanKind

from harness.core import audit, scope
from harness.core import headers as h
from harness.core import metrics as m
from harness.core.faults import Mode
from harness.core.gate import Decision, FaultGate, Outcome
from harness.core.settings import FaultSettings
from harness.core.status import status_name
from harness.core.tracing import ATTR_HIT, ATTR_MODE, ATTR_REQUEST_ID, ATTR_TENANT, extract_context, trace_id_hex

_LABELS: dict[str, str] = {}


def method_label(full_method: str) -> str:
    """`/pkg.Service/Method` -> `pkg.Service/Method` (gRFC A66 `grpc.method`), memoised per method."""
    label = _LABELS.get(full_method)
    if label is None:
        label = full_method[1:] if full_method.startswith("/") else full_method
        if len(_LABELS) < 10_000:  # methods are a bounded set; never let odd input grow this
            _LABELS[full_method] = label
    return label


def _origin_deadline(md: dict[str, str]) -> float | None:
    raw = md.get(h.ORIGIN_DEADLINE)
    if not raw or len(raw) > 32:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


@dataclasses.dataclass(slots=True)
class CallPlan:
    method: str
    decision: Decision
    scope: scope.CallScope
    #: Wall-clock deadline the gap is measured against (origin deadline, else our own).
    deadline_wall: float | None = None
    #: Wall-clock time an injected sleep would have ended (kept when the sleep is cut short).
    planned_end_wall: float | None = None
    span: object = None


class ServerCore:
    """Per-server state: the gate, cached metric children, optional tracer."""

    def __init__(
        self,
        settings: FaultSettings,
        *,
        metrics: bool = True,
        tracer=None,
    ) -> None:
        self.settings = settings
        self.service = settings.service
        self.gate = FaultGate(settings)
        self.metrics = metrics
        self.tracer = tracer
        self._hits = m.cached(m.FAULT_HITS)
        self._skipped = m.cached(m.FAULT_SKIPPED)
        self._rejected = m.cached(m.FAULT_REJECTED)
        self._latency = m.cached(m.SERVER_LATENCY)
        self._calls = m.cached(m.SERVER_CALLS)
        self._gap = m.cached(m.DEADLINE_GAP)
        self._started = m.cached(m.GRPC_SERVER_CALL_STARTED)
        self._duration = m.cached(m.GRPC_SERVER_CALL_DURATION)

    # -- planning -------------------------------------------------------------------------
    def plan(self, full_method: str, metadata) -> CallPlan:
        method = method_label(full_method)
        md = h.metadata_dict(metadata)
        decision = self.gate.decide(md)
        origin = _origin_deadline(md)
        sc = scope.CallScope(
            service=self.service,
            method=method,
            request_id=decision.request_id or md.get(h.REQUEST_ID, "")[: h.MAX_VALUE_LEN],
            tenant=decision.tenant,
            traffic=decision.traffic,
            origin_deadline=origin,
            propagate=decision.propagate,
        )
        plan = CallPlan(method, decision, sc, deadline_wall=origin)
        if decision.outcome is not Outcome.PASS:
            self._count_decision(plan, metadata)
        return plan

    def start(self, plan: CallPlan, time_remaining: float | None, metadata) -> None:
        """Called at handler entry: deadline bookkeeping, span, started counter."""
        if time_remaining is not None:
            now_mono = time.monotonic()
            plan.scope.deadline_monotonic = now_mono + time_remaining
            if plan.deadline_wall is None:
                plan.deadline_wall = time.time() + time_remaining
        if self.metrics:
            self._started(plan.method).inc()
        if self.tracer is not None:
            d = plan.decision
            plan.span = self.tracer.start_span(
                plan.method,
                context=extract_context(metadata),
                kind=SpanKind.SERVER,
                attributes={
                    ATTR_TENANT: d.tenant,
                    ATTR_MODE: d.mode.value,
                    ATTR_HIT: d.outcome is Outcome.HIT,
                    ATTR_REQUEST_ID: d.request_id,
                },
            )

    def begin(self, plan: CallPlan, time_remaining: float | None, metadata) -> tuple[float, object]:
        """Handler entry for both flavours: bookkeeping, audit line of a hit, scope. Returns (t0, token)."""
        t0 = time.perf_counter()
        self.start(plan, time_remaining, metadata)
        if plan.decision.outcome is Outcome.HIT:
            self.audit_hit(plan)
        return t0, scope.enter(plan.scope)

    def end(self, plan: CallPlan, token, code, t0: float) -> None:
        """Handler exit for both flavours: leave the scope, record the call."""
        scope.leave(token)
        self.finish(plan, code, time.perf_counter() - t0)

    def _count_decision(self, plan: CallPlan, metadata) -> None:
        d = plan.decision
        if d.outcome is Outcome.HIT:
            if self.metrics:
                self._hits(self.service, plan.method, d.mode.value).inc()
            # The audit line is written at start() time when a span exists; see audit_hit.
        elif d.outcome is Outcome.SKIPPED:
            if self.metrics:
                self._skipped(self.service, plan.method, d.reason).inc()
        elif d.outcome is Outcome.REJECTED:
            if self.metrics:
                self._rejected(self.service, plan.method, d.reason).inc()
            audit.emit(
                "fault_rejected",
                logging.WARNING,
                reason=d.reason,
                request_id=d.request_id,
                tenant=d.tenant,
                service=self.service,
                method=plan.method,
                directive=d.raw_directive,
                instance=self.settings.instance_id,
            )

    def audit_hit(self, plan: CallPlan) -> None:
        d = plan.decision
        directive = d.directive
        audit.emit(
            "fault_hit",
            logging.INFO,
            request_id=d.request_id,
            tenant=d.tenant,
            service=self.service,
            method=plan.method,
            mode=d.mode.value,
            argument=(str(d.delay_ms) if d.mode is not Mode.ABORT else directive.argument) if directive else "",
            ratio=d.ratio,
            seed=self.settings.seed,
            instance=self.settings.instance_id,
            trace_id=trace_id_hex(plan.span),
        )

    # -- finishing ------------------------------------------------------------------------
    def finish(self, plan: CallPlan, code, elapsed: float) -> None:
        """Record the end of a call. Never raises."""
        try:
            status = status_name(code)
            mode = plan.decision.mode.value
            traffic = plan.decision.traffic
            span = plan.span
            if self.metrics:
                exemplar = None
                if span is not None:
                    tid = trace_id_hex(span)
                    exemplar = {"trace_id": tid} if tid else None
                self._latency(self.service, plan.method, mode, traffic).observe(elapsed, exemplar)
                self._duration(plan.method, status).observe(elapsed, exemplar)
                self._calls(self.service, plan.method, status, traffic, mode).inc()
                if plan.deadline_wall is not None:
                    end = time.time()
                    if plan.planned_end_wall is not None and status in ("CANCELLED", "DEADLINE_EXCEEDED"):
                        end = max(end, plan.planned_end_wall)
                    gap = end - plan.deadline_wall
                    if gap >= 0:
                        self._gap(self.service, plan.method, mode).observe(gap)
            if span is not None:
                span.set_attribute("rpc.grpc.status_code", status)
                span.end()
        except Exception:  # noqa: BLE001 - observability must never fail a call
            pass


def abort_details(decision: Decision) -> tuple[str, str]:
    """(status name, description) for an injected abort or drop."""
    if decision.mode is Mode.DROP:
        return "UNAVAILABLE", "injected drop"
    code = decision.directive.code if decision.directive else "UNAVAILABLE"
    return code, f"injected fault: {code}"
