"""The one per-call pipeline of the server interceptors, for `grpc.aio` and sync `grpc`.

A call goes: `plan` (gate decision, counted) -> `begin` (deadline, span, audit
line of a hit, scope) -> the `steps` of the fault (abort, wait, run the handler)
-> `end` (scope left, call recorded). Before all of it, a call that finds the
server's in-flight limit reached is refused (`refuse`, `_overload`): no plan, no
fault. A call whose caller left before its handler began (deadline passed, or
no longer active) takes none of that: `expired` counts it
(`drill_server_expired_total{where="handler"}`, and the call with its status and
fault_mode none) and the flavour answers it without running the handler, so an
overloaded server does no work, and injects no fault, for callers that are gone. The flavour modules (`server_aio`,
`server_sync`) only say how to wait, how to abort and how to tell the final
status; they walk the same `steps`.

Every kind of method takes that path (unary, server-, client- and bidi-streaming:
`CallPlan.kind`). A fault acts at the start of the call (`steps`), or, for a
directive with `@after=N` / `@read=N`, at a message boundary of the stream: the
flavours report each response message sent and each request message the handler
asks for to the call's `Tripwire`, which answers, once, with the steps to perform
there; or, with `@served`, once the handler has answered (`answered`): the steps
after RUN replace its answer. `CallPlan.acted` says whether the fault acted (a
stream that ends before its point is not faulted, nor is a served call whose
caller left first: no marker, recorded with fault_mode none).

Most calls carry no drill key: for them the request id is read in one pass over
the metadata (no dict, no gate), the method's label and metric children are
looked up once per method (`ServerCore.method`, `_server_metrics`), and
`begin_organic`/`end_organic` do what `begin`/`end` do for a call with nothing to
inject, without a plan: `start_organic` and `record_organic` say what such a call
records. The aio flavour serves such a call from one closure that writes those two
out (it runs for nearly every call; a test holds it to them), looked up per method
after the first call. Deadlines are kept on the monotonic clock,
and with no tracer there is no span.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time

import grpc

from harness.core import audit, safety, scope
from harness.core import headers as h
from harness.core import metrics as m
from harness.core.collecting import collecting
from harness.core.faults import Kind, Mode
from harness.core.gate import Decision, FaultGate, Outcome, SkipReason
from harness.core.metrics import MethodLabels, is_infrastructure, method_label
from harness.core.settings import FaultSettings
from harness.core.status import status_name
from harness.core.tracing import end_server_span, start_server_span, trace_id_hex
from harness.interceptors._fault_steps import PASS_STEPS, SERVED_STEPS, START_STEPS, Step, Tripwire, release
from harness.interceptors._handlers import BUILD, behavior_of, unary_unary_handler
from harness.interceptors._overload import InFlight
from harness.interceptors._server_metrics import MethodMetrics, ServerMetrics

#: Methods whose lookups `ServerCore.method` keeps (a server's methods are a bounded set).
_KNOWN_METHODS = 10_000
#: A trusted origin deadline is clamped to [now - PAST, now + AHEAD] (seconds).
ORIGIN_DEADLINE_MAX_PAST_S = 600.0
ORIGIN_DEADLINE_MAX_AHEAD_S = 3600.0

_log = logging.getLogger("drill.faults")


def _origin_deadline(md: dict[str, str], now: float) -> float | None:
    """The edge caller's deadline, clamped to a sane window around now. Callers trust it only for drill traffic."""
    raw = md.get(h.ORIGIN_DEADLINE)
    if not raw or len(raw) > 32:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    return min(max(value, now - ORIGIN_DEADLINE_MAX_PAST_S), now + ORIGIN_DEADLINE_MAX_AHEAD_S)


#: Keys whose presence sends a call through the gate (without them the gate passes it as organic).
_GATE_KEYS = h.GATE_KEYS
_ORGANIC = Decision(Outcome.PASS, "organic", "", "")
_NONE_MODE = Mode.NONE.value
_OK = grpc.StatusCode.OK


def _scan(metadata) -> tuple[str, bool]:
    """(first `x-request-id`, whether a key the gate reads is present), in one pass and no copy."""
    request_id = None
    for item in metadata or ():
        key = item[0]
        if key in _GATE_KEYS:
            return "", True
        if key == h.REQUEST_ID and request_id is None and isinstance(item[1], str):
            request_id = item[1]
    return request_id or "", False


@dataclasses.dataclass(slots=True)
class CallPlan:
    method: str
    decision: Decision
    scope: scope.CallScope
    #: The method's metric children (None without metrics).
    metrics: MethodMetrics | None = None
    #: Monotonic deadline the gap is measured against (the trusted origin deadline, else our own).
    deadline: float | None = None
    #: Monotonic time an injected wait would have ended (kept when the wait is cut short).
    planned_end: float | None = None
    span: object = None
    #: The called method (`pkg.Service/Method`); `method` is its metric label (may be `other`).
    real_method: str = ""
    #: Holds a DRILL_FAULT_MAX_ACTIVE slot (released in `end`).
    slot: bool = False
    kind: Kind = Kind.UNARY
    #: The fault has acted (at handler entry for a fault at the start; when its tripwire fired for one
    #: mid-stream; once the handler answered for `@served`): the call carries the marker and is recorded with
    #: its fault_mode.
    acted: bool = False
    #: A mid-stream fault (`@after=N` / `@read=N`) still to act, set at handler entry.
    trip: Tripwire | None = None
    #: The fault sent the response headers (`@headers=sent`): the handler's own can no longer go out.
    headers_out: bool = False
    #: An `@served` fault on a single response may still act: the handler's own response headers are held
    #: (`held`) until it does (`release`): a fault that ends the call drops them, so it goes out trailers-only
    #: (as a plain abort: a retry policy may retry it, gRFC A6) unless `@headers=sent` sends them first.
    hold_headers: bool = False
    held: tuple | None = None


#: A caller whose deadline is this close (or past) when its call ends left because of the
#: deadline: the outcome is DEADLINE_EXCEEDED, not CANCELLED.
DEADLINE_SLACK_S = 0.002


def ended_by_deadline(time_remaining: float | None) -> bool:
    return time_remaining is not None and time_remaining <= DEADLINE_SLACK_S


class ServerCore:
    """Per-server state (gate, cached metric children, optional tracer) and the call pipeline."""

    def __init__(
        self, settings: FaultSettings, *, metrics: bool = True, tracer=None, stop: safety.EmergencyStop | None = None
    ) -> None:
        self.settings = settings
        self.service = settings.service
        self.gate = FaultGate(settings)
        self.metrics = metrics
        self.tracer = tracer
        self._hits = m.ChildCache(m.FAULT_HITS)
        self._skipped = m.ChildCache(m.FAULT_SKIPPED)
        self._rejected = m.ChildCache(m.FAULT_REJECTED)
        self._metrics = ServerMetrics(self.service)
        self._methods = MethodLabels(settings.methods, settings.max_methods)
        #: full method -> `method()`'s answer (a method's label never changes once given).
        self._known: dict[str, tuple[str, str, MethodMetrics | None]] = {}
        self._refusals = audit.RefusalLimiter()
        #: The one-way emergency stop (the process's unless a private one is given, e.g. in tests).
        self.stop = safety.PROCESS_STOP if stop is None else stop
        self.stop.watch_file(settings.stop_file)
        self.active = safety.ActiveFaults(
            settings.max_active, m.FAULT_ACTIVE_CALLS.labels(self.service) if metrics else None
        )
        #: Calls whose handler runs, and the limit past which a new one is refused (`refuse`, `_overload`).
        self.flight = InFlight(settings.max_in_flight, self.service, settings.instance_id, self._refusals)
        if metrics:
            switch = m.FAULT_SWITCH.labels(self.service)
            switch.set(1 if settings.enabled and not self.stop.tripped else 0)
            self.stop.on_trip(lambda: switch.set(0))
        if settings.enabled and not settings.tenants:
            _log.warning(
                "drill faults are ON for %s but the tenant allowlist (DRILL_FAULT_TENANTS) is empty: no fault can fire",
                self.service,
            )

    # -- 1. plan: once per call, when grpc hands us the handler ------------------------------
    def method(self, full_method: str) -> tuple[str, str, MethodMetrics | None]:
        """(called method, its metric label, its metric children or None): looked up once per method."""
        known = self._known.get(full_method)
        if known is None:
            real = method_label(full_method)
            method = self._methods(real)
            known = (real, method, self._metrics(method) if self.metrics else None)
            if len(self._known) < _KNOWN_METHODS:  # grpc asks only for methods it has a handler for
                self._known[full_method] = known
        return known

    def plan(
        self, full_method: str, metadata, scanned: tuple[str, bool] | None = None, kind: Kind = Kind.UNARY
    ) -> CallPlan:
        """The call's plan; `scanned`: `_scan(metadata)` when the caller has read it already."""
        request_id, gated = _scan(metadata) if scanned is None else scanned
        if not gated:  # no drill key: organic, untouched (what the gate decides, without a dict copy)
            plan = self.organic_plan(self.method(full_method), request_id)
            plan.kind = kind
            return plan
        real, method, metrics = self.method(full_method)
        md = h.metadata_dict(metadata)
        decision = self.gate.decide(md, real, kind)
        # Only (authenticated) drill traffic may say when the edge caller gives up; organic
        # calls neither use nor forward the key.
        origin = _origin_deadline(md, time.time()) if decision.traffic == "drill" else None
        sc = scope.CallScope(
            service=self.service,
            method=real,
            request_id=decision.request_id or md.get(h.REQUEST_ID, "")[: h.MAX_VALUE_LEN],
            tenant=decision.tenant,
            traffic=decision.traffic,
            origin_deadline=origin,
            propagate=decision.propagate,
        )
        deadline = None if origin is None else time.monotonic() + (origin - time.time())
        plan = CallPlan(method, decision, sc, metrics, deadline=deadline, real_method=real, kind=kind)
        if decision.outcome is not Outcome.PASS:
            self._count_decision(plan)
        return plan

    def organic_scope(self, known: tuple[str, str, MethodMetrics | None], request_id: str) -> scope.CallScope:
        """The scope of an organic call (`known`: `method()`'s answer)."""
        return scope.CallScope(self.service, known[0], request_id[: h.MAX_VALUE_LEN])

    def organic_plan(self, known: tuple[str, str, MethodMetrics | None], request_id: str) -> CallPlan:
        """The plan of an organic call: nothing to inject."""
        real, method, metrics = known
        return CallPlan(method, _ORGANIC, self.organic_scope(known, request_id), metrics, real_method=real)

    @staticmethod
    def steps(plan: CallPlan) -> tuple[Step, ...]:
        """The fault at the start of the call as steps around RUN; the flavour performs them in order.
        A mid-stream fault (`plan.trip`) adds nothing here: it acts where its tripwire fires."""
        d = plan.decision
        if d.outcome is not Outcome.HIT or plan.trip is not None:
            return PASS_STEPS
        if d.directive.served:
            return SERVED_STEPS[(d.mode, d.directive.headers_sent)]
        return START_STEPS[(d.mode, d.directive.headers_sent, plan.kind.response_streaming)]

    @staticmethod
    def after_run(steps: tuple[Step, ...]) -> tuple[Step, ...]:
        """The steps after RUN (a delay's on a unary response, an `@served` fault's): they act on the handler's
        errors too (a delay holds them; an `@served` fault replaces them: an error is an answer)."""
        return steps[steps.index(Step.RUN) + 1 :] if Step.RUN in steps else ()

    def answered(self, plan: CallPlan) -> bool:
        """The handler has answered (returned, raised or aborted): whether the steps after RUN act now.

        An `@served` fault acts here, not at handler entry: it is marked `acted` (and the call carries the marker)
        only now, and not at all when the emergency stop tripped while the service worked (its answer then passes
        untouched, as a mid-stream fault's that has not fired). It has held its DRILL_FAULT_MAX_ACTIVE slot since
        handler entry (`_admit`): the cap bounds the calls whose answer a drill will take, and every hit counted
        and audited there must be able to act, so the slot cannot be asked for once the work is done. A fault
        acting at the start (a delay's late answer) acted at entry: True."""
        if plan.acted:
            return True
        if self.stop.check():
            return False
        plan.acted = True
        return True

    @staticmethod
    def wait_s(plan: CallPlan) -> float:
        """Seconds to wait for a WAIT step; remembers when the wait would end (for the deadline gap)."""
        seconds = plan.decision.delay_ms / 1000.0
        plan.planned_end = time.monotonic() + seconds
        return seconds

    # -- 2. begin: at handler entry ----------------------------------------------------------
    def expired(self, plan: CallPlan, time_remaining: float | None, active: bool = True) -> grpc.StatusCode | None:
        """At handler entry: the status to answer without running the handler when the caller has left
        (DEADLINE_EXCEEDED once its deadline passed, CANCELLED when the call is no longer active), else None.
        The aio flavour asks (its loop may start a handler late); grpc's sync server already drops a call
        cancelled before a worker thread reads its request.

        Such a call is counted here (`drill_server_expired_total{where="handler"}`, and in
        `drill_server_calls_total` / `grpc_server_call_started_total` / the duration, fault_mode none:
        nothing was injected), and takes no fault slot, span, audit line or scope.
        """
        if time_remaining is not None and time_remaining <= 0:
            code = grpc.StatusCode.DEADLINE_EXCEEDED
        elif not active:
            code = grpc.StatusCode.CANCELLED
        else:
            return None
        if plan.metrics is not None:
            try:
                plan.metrics.expired(status_name(code), plan.decision.traffic)
            except Exception:  # noqa: BLE001 - observability must never fail a call
                pass
        return code

    def begin(self, plan: CallPlan, time_remaining: float | None, metadata) -> tuple[float, object]:
        """Deadline bookkeeping, span, started counter, audit line of a hit, scope. Returns (t0, token)."""
        if plan.decision is _ORGANIC:
            t0, token, plan.span = self.begin_organic(plan.scope, plan.method, plan.metrics, time_remaining, metadata)
            return t0, token
        t0 = time.perf_counter()
        if time_remaining is not None:
            deadline = plan.scope.deadline_monotonic = time.monotonic() + time_remaining
            if plan.deadline is None:
                plan.deadline = deadline
        if plan.metrics is not None:
            plan.metrics.call_started()
        d = plan.decision
        if d.outcome is Outcome.HIT:
            d = self._admit(plan)
            if d.outcome is Outcome.HIT:
                if d.directive.after or d.directive.read:
                    plan.trip = Tripwire(plan, self.stop)
                elif not d.directive.served:  # an `@served` fault acts once the handler answered (`answered`)
                    plan.acted = True
                else:
                    plan.hold_headers = not plan.kind.response_streaming  # a stream's go with its first message
        if self.tracer is not None:
            hit = d.outcome is Outcome.HIT
            plan.span = start_server_span(
                self.tracer, plan.method, metadata, d.tenant, d.mode.value, hit, d.request_id
            )
        if d.outcome is Outcome.HIT:
            self._audit_hit(plan)  # here, not in plan(): the line carries the span's trace id
        return t0, scope.enter(plan.scope)

    def begin_organic(
        self, sc: scope.CallScope, method: str, metrics: MethodMetrics | None, time_remaining: float | None, metadata
    ) -> tuple[float, object, object]:
        """`begin` of an organic call, without a plan: (t0, scope token, span or None)."""
        span = self.start_organic(sc, method, metrics, time_remaining, metadata)
        return time.perf_counter(), scope.enter(sc), span

    def start_organic(
        self, sc: scope.CallScope, method: str, metrics: MethodMetrics | None, time_remaining: float | None, metadata
    ):
        """What the start of an organic call records: its deadline, A66 started, its span (returned, or None).
        The caller enters the scope. (The aio flavour's closure for organic calls writes this out.)"""
        if time_remaining is not None:
            sc.deadline_monotonic = time.monotonic() + time_remaining
        if metrics is not None:
            metrics.call_started()
        if self.tracer is None:
            return None
        return start_server_span(self.tracer, method, metadata, "", _NONE_MODE, False, "")

    def end_organic(self, sc: scope.CallScope, metrics: MethodMetrics | None, span, token, code, t0: float) -> None:
        """`end` of an organic call: its scope over and left, the call recorded. Never raises."""
        sc.ended = True
        scope.leave(token)
        self.record_organic(sc, metrics, span, code, time.perf_counter() - t0)

    @staticmethod
    def record_organic(sc: scope.CallScope, metrics: MethodMetrics | None, span, code, elapsed: float) -> None:
        """What the end of an organic call records (its scope already over); the gap is measured against the
        call's own deadline. Never raises. (The aio flavour's closure for organic calls writes this out.)"""
        try:
            status = status_name(code)
            if metrics is not None:
                gap = None
                deadline = sc.deadline_monotonic
                if deadline is not None:
                    end = time.monotonic()
                    if end >= deadline:
                        gap = end - deadline
                metrics.finished_organic(status, elapsed, span, gap)
            if span is not None:
                end_server_span(span, status)
        except Exception:  # noqa: BLE001 - observability must never fail a call
            pass

    def _admit(self, plan: CallPlan) -> Decision:
        """A hit is injected only while the stop has not tripped and a DRILL_FAULT_MAX_ACTIVE slot is free.

        Decided here, at handler entry, so every counted hit has its audit line and its
        slot is released by `end` (a call cancelled before its handler ran never takes one).
        An `@served` hit holds its slot through the handler's work too (`answered` says why).
        """
        d = plan.decision
        reason = None
        if self.stop.check():
            reason = SkipReason.SWITCH.value
        elif not self.active.acquire():
            reason = SkipReason.MAX_ACTIVE.value
        if reason is not None:
            d = plan.decision = dataclasses.replace(d, outcome=Outcome.SKIPPED, reason=reason)
            if self.metrics:
                self._skipped(self.service, plan.method, reason).inc()
            return d
        plan.slot = True
        if self.metrics:
            self._hits(self.service, plan.method, d.mode.value).inc()
        return d

    # -- 3. end: at handler exit, whatever happened --------------------------------------------
    def end(self, plan: CallPlan, token, code, t0: float) -> None:
        """End and leave the scope, record the call. Never raises.

        In a finalizer the garbage collector runs (a call closed with its loop gone, which never ends OK:
        harness.core.collecting) it only ends the scope and frees the fault slot: recording would take metric
        locks the interrupted code may hold, and leaving the scope would reset the interrupted task's."""
        if code is not _OK and collecting():
            scope.end(plan.scope)
            if plan.slot:
                plan.slot = False
                self.active.release()
            return
        if plan.decision is _ORGANIC:
            self.end_organic(plan.scope, plan.metrics, plan.span, token, code, t0)
            return
        if plan.slot:
            plan.slot = False
            self.active.release()
        scope.end(plan.scope)
        scope.leave(token)
        elapsed = time.perf_counter() - t0
        try:
            status = status_name(code)
            span = plan.span
            if plan.metrics is not None:
                gap = None
                if plan.deadline is not None:
                    end = time.monotonic()
                    if plan.planned_end is not None and status in ("CANCELLED", "DEADLINE_EXCEEDED"):
                        end = max(end, plan.planned_end)
                    if end >= plan.deadline:
                        gap = end - plan.deadline
                d = plan.decision
                plan.metrics.finished(status, d.traffic, d.mode.value if plan.acted else _NONE_MODE, elapsed, span, gap)
            if span is not None:
                end_server_span(span, status)
        except Exception:  # noqa: BLE001 - observability must never fail a call
            pass

    # -- 0. the in-flight limit: a call refused before any of the above (`_overload`) ---------------
    def refuse(self, full_method: str, metadata, scanned: tuple[str, bool] | None = None,
               kind: Kind = Kind.UNARY) -> None:  # fmt: skip
        """Count and audit a call the in-flight limit refuses when grpc hands it over (no plan: never faulted);
        its traffic class is the gate's (`decide`, pure) when it carries drill keys. Never raises."""
        try:
            real, method, metrics = self.method(full_method)
            request_id, gated = _scan(metadata) if scanned is None else scanned
            traffic = "organic"
            if gated:
                md = h.metadata_dict(metadata)
                request_id = md.get(h.REQUEST_ID, "")
                traffic = self.gate.decide(md, real, kind).traffic
            self.flight.refused(real, method, metrics, traffic, request_id)
        except Exception:  # noqa: BLE001 - counting must never fail the refusal
            pass

    def refuse_planned(self, plan: CallPlan) -> None:
        """`refuse` for a call let in when grpc handed it over and refused at handler entry. Never raises."""
        self.flight.refused(plan.real_method, plan.method, plan.metrics, plan.decision.traffic, plan.scope.request_id)

    # -- counting and audit ------------------------------------------------------------------
    def _count_decision(self, plan: CallPlan) -> None:
        d = plan.decision
        if d.outcome is Outcome.HIT:
            pass  # counted at handler entry (`_admit`), where the cap and the stop are applied
        elif d.outcome is Outcome.SKIPPED:
            if self.metrics:
                self._skipped(self.service, plan.method, d.reason).inc()
            if d.reason == SkipReason.TOKEN.value:
                self._audit_refusal(plan, "token_refused")
        elif d.outcome is Outcome.REJECTED:
            if self.metrics:
                self._rejected(self.service, plan.method, d.reason).inc()
            self._audit_refusal(plan, "fault_rejected")

    def _audit_refusal(self, plan: CallPlan, event: str) -> None:
        """One WARNING line per refusal; unauthenticated ones rate-limited per (event, reason, method)."""
        d = plan.decision
        suppressed = 0
        if not d.authenticated:
            admitted = self._refusals.admit((event, d.reason, plan.method))
            if admitted is None:
                return
            suppressed = admitted
        fields = dict(
            reason=d.reason,
            request_id=d.request_id,
            tenant=d.tenant,
            service=self.service,
            method=plan.real_method,
            directive=d.raw_directive,
            instance=self.settings.instance_id,
        )
        if d.detail:
            fields["detail"] = d.detail
        if suppressed:
            fields["suppressed"] = suppressed
        audit.emit(event, logging.WARNING, **fields)

    def _audit_hit(self, plan: CallPlan) -> None:
        d = plan.decision
        directive = d.directive
        audit.emit(
            "fault_hit",
            logging.INFO,
            request_id=d.request_id,
            tenant=d.tenant,
            service=self.service,
            method=plan.real_method,
            mode=d.mode.value,
            argument=(str(d.delay_ms) if d.mode is not Mode.ABORT else directive.argument) if directive else "",
            **({"options": directive.options} if directive and directive.options else {}),
            ratio=d.ratio,
            scope=d.scope,
            attempt=d.attempt,
            seed=self.settings.seed,
            instance=self.settings.instance_id,
            trace_id=trace_id_hex(plan.span),
        )


#: The trailing metadata pair of an injected call (contracts §2), per mode.
_MARKERS = {mode: (h.FAULT_MARKER, mode.value) for mode in (Mode.DELAY, Mode.ABORT, Mode.DROP)}


def marker(plan: CallPlan) -> tuple[str, str] | None:
    """`(x-drill-fault, MODE)` for a call whose fault has acted, else None."""
    return _MARKERS.get(plan.decision.mode) if plan.acted else None


def mark(context, plan: CallPlan) -> None:
    """Add the injected-fault marker to the call's trailing metadata, keeping what the handler set."""
    pair = marker(plan)
    if pair is None:
        return
    try:
        existing = tuple(context.trailing_metadata() or ())
    except Exception:  # noqa: BLE001 - an odd context: set the marker alone
        existing = ()
    if not any(item[0] == h.FAULT_MARKER for item in existing):
        context.set_trailing_metadata((*existing, pair))


def fault_headers(plan: CallPlan) -> tuple[tuple[str, str], ...]:
    """The response headers a fault sends (`@headers=sent`): the handler's own if an `@served` fault held them
    (`release`), and the marker. Not empty on purpose: gRPC's HTTP/2 transport turns empty headers that have not
    gone out before the status into a trailers-only response, which a client may retry (gRFC A6), the very thing
    `@headers=sent` must rule out."""
    pair = _MARKERS.get(plan.decision.mode)
    return (*release(plan), *((pair,) if pair is not None else ()))


def abort_details(decision: Decision) -> tuple[str, str]:
    """(status name, description) for an injected abort or drop."""
    if decision.mode is Mode.DROP:
        return "UNAVAILABLE", "injected drop"
    code = decision.directive.code if decision.directive else "UNAVAILABLE"
    return code, f"injected fault: {code}"


class ServerInterceptorBase:
    """What both flavours do when grpc hands over a handler: decide whether to wrap it, plan the call.

    Subclasses provide `_wrap_unary(behavior, plan, metadata)` (a single response: unary and
    client-streaming methods) and `_wrap_stream(...)` (a response stream: server-streaming and
    bidi methods) for their flavour. With the switch off, no metrics and no tracer, the original
    handler is returned: no wrap, no cost.
    """

    def __init__(
        self,
        settings: FaultSettings | None = None,
        *,
        metrics: bool | None = None,
        tracer=None,
        stop: safety.EmergencyStop | None = None,
    ) -> None:
        self.settings = settings or FaultSettings.from_env()
        metrics = self.settings.enabled if metrics is None else metrics  # metrics follow the switch by default
        self.core = ServerCore(self.settings, metrics=metrics, tracer=tracer, stop=stop)
        self._active = self.settings.enabled or metrics or tracer is not None or self.settings.max_in_flight > 0

    def _wrapped(self, handler, handler_call_details, scanned: tuple[str, bool] | None = None):
        """`scanned`: `_scan` of the call's metadata, when the flavour has read it already."""
        if not self._active or handler is None:
            return handler
        if is_infrastructure(handler_call_details.method):
            return handler  # health checks and reflection are probes, not traffic: no fault, no series
        request_streaming, response_streaming = handler.request_streaming, handler.response_streaming
        if request_streaming or response_streaming:
            return self._wrapped_stream(handler, handler_call_details, Kind.of(request_streaming, response_streaming))
        if not self._can_wrap(handler.unary_unary):
            return handler
        md = handler_call_details.invocation_metadata
        if scanned is None:
            scanned = _scan(md)
        request_id, gated = scanned
        if not gated:  # most calls: organic, nothing to inject
            full = handler_call_details.method
            return self._organic_unary(handler, self.core.method(full), request_id, md, full)
        plan = self.core.plan(handler_call_details.method, md, scanned)
        return unary_unary_handler(self._wrap_unary(handler.unary_unary, plan, md), handler)

    def _wrapped_stream(self, handler, handler_call_details, kind: Kind):
        """A streaming method's handler, wrapped: a single response (client-streaming) the way a unary one is,
        a response stream (server-streaming, bidi) by `_wrap_stream`."""
        behavior = behavior_of(handler, kind)
        if not self._can_wrap(behavior):
            return handler
        md = handler_call_details.invocation_metadata
        plan = self.core.plan(handler_call_details.method, md, None, kind)
        wrap = self._wrap_stream if kind.response_streaming else self._wrap_unary
        return BUILD[kind](wrap(behavior, plan, md), handler)

    def _can_wrap(self, behavior) -> bool:
        """Whether this flavour can wrap the handler without changing where it runs."""
        return True

    def _organic_unary(
        self, handler, known: tuple[str, str, MethodMetrics | None], request_id: str, metadata, full_method: str = ""
    ):
        """The handler of an organic unary call (`known`: `ServerCore.method(full_method)`); a flavour may build
        it without a plan."""
        plan = self.core.organic_plan(known, request_id)
        return unary_unary_handler(self._wrap_unary(handler.unary_unary, plan, metadata), handler)

    def _wrap_unary(self, behavior, plan: CallPlan, metadata):  # pragma: no cover - abstract
        raise NotImplementedError

    def _wrap_stream(self, behavior, plan: CallPlan, metadata):  # pragma: no cover - abstract
        raise NotImplementedError
