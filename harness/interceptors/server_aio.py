"""Fault injection and metrics for `grpc.aio` servers.

`FaultServerInterceptor` wraps unary-unary and unary-stream handlers once per
call; request-streaming methods pass through untouched. With the process switch
off and metrics off it returns the original handler: no wrap, no cost.
"""

from __future__ import annotations

import asyncio
import inspect
import time

import grpc
from grpc import aio

from harness.core.faults import Mode
from harness.core.gate import Outcome
from harness.core.settings import FaultSettings
from harness.interceptors._server_core import CallPlan, ServerCore, abort_details

_OK = grpc.StatusCode.OK


def _deadline_passed(plan: CallPlan) -> bool:
    remaining = plan.scope.time_remaining()
    return remaining is not None and remaining <= 0.002


class FaultServerInterceptor(aio.ServerInterceptor):
    """Gated delay/abort/drop plus server metrics, for `grpc.aio.server(interceptors=[...])`."""

    def __init__(self, settings: FaultSettings | None = None, *, metrics: bool | None = None, tracer=None) -> None:
        self.settings = settings or FaultSettings.from_env()
        # Metrics follow the switch unless asked for: with the switch off and nothing
        # requested, intercept_service hands back the original handler (no wrap, no cost).
        metrics = self.settings.enabled if metrics is None else metrics
        self.core = ServerCore(self.settings, metrics=metrics, tracer=tracer)
        self._active = self.settings.enabled or metrics or tracer is not None

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if not self._active or handler is None or handler.request_streaming:
            return handler
        plan = self.core.plan(handler_call_details.method, handler_call_details.invocation_metadata)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(handler.unary_stream, plan, handler_call_details.invocation_metadata),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return grpc.unary_unary_rpc_method_handler(
            self._wrap_unary(handler.unary_unary, plan, handler_call_details.invocation_metadata),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    async def _inject_before(self, plan: CallPlan, context) -> None:
        """Abort or drop before the handler runs (raises AbortError); no-op otherwise."""
        d = plan.decision
        if d.mode is Mode.ABORT:
            code, details = abort_details(d)
            await context.abort(grpc.StatusCode[code], details)
        if d.mode is Mode.DROP:
            plan.planned_end_wall = time.time() + d.delay_ms / 1000.0
            await asyncio.sleep(d.delay_ms / 1000.0)
            code, details = abort_details(d)
            await context.abort(grpc.StatusCode[code], details)

    async def _delay(self, plan: CallPlan) -> None:
        d = plan.decision
        plan.planned_end_wall = time.time() + d.delay_ms / 1000.0
        await asyncio.sleep(d.delay_ms / 1000.0)

    def _end_code(self, plan: CallPlan, context, exc: BaseException | None):
        if exc is None:
            return context.code() or _OK
        if isinstance(exc, asyncio.CancelledError):
            return grpc.StatusCode.DEADLINE_EXCEEDED if _deadline_passed(plan) else grpc.StatusCode.CANCELLED
        if isinstance(exc, aio.AbortError):
            return context.code() or grpc.StatusCode.UNKNOWN
        return grpc.StatusCode.UNKNOWN

    def _wrap_unary(self, behavior, plan: CallPlan, metadata):
        core = self.core
        hit = plan.decision.outcome is Outcome.HIT

        async def unary(request, context):
            t0, token = core.begin(plan, context.time_remaining(), metadata)
            exc: BaseException | None = None
            try:
                if hit:
                    await self._inject_before(plan, context)
                response = behavior(request, context)
                if inspect.isawaitable(response):  # grpc.aio also accepts plain functions as handlers
                    response = await response
                if hit and plan.decision.mode is Mode.DELAY:
                    await self._delay(plan)
                    # A caller that left meanwhile has cancelled this task inside the sleep (dropped
                    # silently); should only the call be marked cancelled, grpc drops the send.
                return response
            except BaseException as e:
                exc = e
                raise
            finally:
                core.end(plan, token, self._end_code(plan, context, exc), t0)

        return unary

    def _wrap_stream(self, behavior, plan: CallPlan, metadata):
        core = self.core
        hit = plan.decision.outcome is Outcome.HIT

        async def stream(request, context):
            t0, token = core.begin(plan, context.time_remaining(), metadata)
            exc: BaseException | None = None
            try:
                if hit:
                    await self._inject_before(plan, context)
                    if plan.decision.mode is Mode.DELAY:
                        await self._delay(plan)  # streams: the first message is late
                result = behavior(request, context)
                if inspect.isasyncgen(result):
                    async for item in result:
                        yield item
                else:
                    await result
            except BaseException as e:
                exc = e
                raise
            finally:
                core.end(plan, token, self._end_code(plan, context, exc), t0)

        return stream
