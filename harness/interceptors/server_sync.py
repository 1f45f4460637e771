"""Fault injection and metrics for sync `grpc.server` (thread pool) servers.

Same behaviour as the aio interceptor. Sync handlers cannot be cancelled, so
injected waits end early when the call terminates (`add_callback`), freeing the
worker thread; the deadline gap still counts the time the fault would have held.
"""

from __future__ import annotations

import threading
import time

import grpc

from harness.core.faults import Mode
from harness.core.gate import Outcome
from harness.core.settings import FaultSettings
from harness.interceptors._server_core import CallPlan, ServerCore, abort_details


def _wait(context, seconds: float) -> bool:
    """Sleep up to `seconds`; return False early if the call terminated meanwhile."""
    done = threading.Event()
    if not context.add_callback(done.set):
        return False
    return not done.wait(seconds)


class SyncFaultServerInterceptor(grpc.ServerInterceptor):
    """Gated delay/abort/drop plus server metrics, for `grpc.server(..., interceptors=[...])`."""

    def __init__(self, settings: FaultSettings | None = None, *, metrics: bool | None = None, tracer=None) -> None:
        self.settings = settings or FaultSettings.from_env()
        # Metrics follow the switch unless asked for: with the switch off and nothing
        # requested, intercept_service hands back the original handler (no wrap, no cost).
        metrics = self.settings.enabled if metrics is None else metrics
        self.core = ServerCore(self.settings, metrics=metrics, tracer=tracer)
        self._active = self.settings.enabled or metrics or tracer is not None

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if not self._active or handler is None or handler.request_streaming:
            return handler
        plan = self.core.plan(handler_call_details.method, handler_call_details.invocation_metadata)
        md = handler_call_details.invocation_metadata
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(handler.unary_stream, plan, md),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return grpc.unary_unary_rpc_method_handler(
            self._wrap_unary(handler.unary_unary, plan, md),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _inject_before(self, plan: CallPlan, context) -> None:
        d = plan.decision
        if d.mode is Mode.ABORT:
            code, details = abort_details(d)
            context.abort(grpc.StatusCode[code], details)
        if d.mode is Mode.DROP:
            plan.planned_end_wall = time.time() + d.delay_ms / 1000.0
            _wait(context, d.delay_ms / 1000.0)  # returns early if the caller is gone
            code, details = abort_details(d)
            context.abort(grpc.StatusCode[code], details)  # on a dead call grpc drops this quietly

    def _delay(self, plan: CallPlan, context) -> bool:
        d = plan.decision
        plan.planned_end_wall = time.time() + d.delay_ms / 1000.0
        return _wait(context, d.delay_ms / 1000.0)

    @staticmethod
    def _end_code(context, failed: bool):
        if not context.is_active():  # the caller is gone: that is the outcome, whatever we set after
            remaining = context.time_remaining()
            if remaining is not None and remaining <= 0.002:
                return grpc.StatusCode.DEADLINE_EXCEEDED
            return grpc.StatusCode.CANCELLED
        code = context.code()
        if code is not None:
            return code
        return grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK

    def _wrap_unary(self, behavior, plan: CallPlan, metadata):
        core = self.core
        hit = plan.decision.outcome is Outcome.HIT

        def unary(request, context):
            t0, token = core.begin(plan, context.time_remaining(), metadata)
            failed = False
            try:
                if hit:
                    self._inject_before(plan, context)
                response = behavior(request, context)
                if hit and plan.decision.mode is Mode.DELAY:
                    self._delay(plan, context)  # ends early if the caller is gone; grpc then drops the send
                return response
            except BaseException:
                failed = True
                raise
            finally:
                core.end(plan, token, self._end_code(context, failed), t0)

        return unary

    def _wrap_stream(self, behavior, plan: CallPlan, metadata):
        core = self.core
        hit = plan.decision.outcome is Outcome.HIT

        def stream(request, context):
            t0, token = core.begin(plan, context.time_remaining(), metadata)
            failed = False
            try:
                if hit:
                    self._inject_before(plan, context)
                    if plan.decision.mode is Mode.DELAY and not self._delay(plan, context):
                        return
                yield from behavior(request, context)
            except BaseException:
                failed = True
                raise
            finally:
                core.end(plan, token, self._end_code(context, failed), t0)

        return stream
