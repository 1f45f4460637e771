"""The `grpc.aio` flavour of the server pipeline: waits are `asyncio.sleep`, aborts are `context.abort`.

Everything else (the gate, the steps of a fault, metrics, scope, audit) is in
`_server_pipeline`. A caller that leaves during a wait cancels this task inside
the sleep: the call is dropped silently, with no log line.
"""

from __future__ import annotations

import asyncio
import inspect

import grpc
from grpc import aio

from harness.interceptors._server_pipeline import (
    CallPlan,
    ServerInterceptorBase,
    Step,
    abort_details,
    ended_by_deadline,
)

_OK = grpc.StatusCode.OK


class FaultServerInterceptor(ServerInterceptorBase, aio.ServerInterceptor):
    """Gated delay/abort/drop plus server metrics, for `grpc.aio.server(interceptors=[...])`."""

    async def intercept_service(self, continuation, handler_call_details):
        return self._wrapped(await continuation(handler_call_details), handler_call_details)

    async def _perform(self, step: Step, plan: CallPlan, context) -> None:
        if step is Step.WAIT:
            await asyncio.sleep(self.core.wait_s(plan))
        else:  # Step.ABORT
            code, details = abort_details(plan.decision)
            await context.abort(grpc.StatusCode[code], details)

    @staticmethod
    def _end_code(plan: CallPlan, context, exc: BaseException | None):
        if exc is None:
            return context.code() or _OK
        if isinstance(exc, asyncio.CancelledError):
            return grpc.StatusCode.DEADLINE_EXCEEDED if ended_by_deadline(plan.scope.time_remaining()) else (
                grpc.StatusCode.CANCELLED
            )
        if isinstance(exc, aio.AbortError):
            return context.code() or grpc.StatusCode.UNKNOWN
        return grpc.StatusCode.UNKNOWN

    def _wrap_unary(self, behavior, plan: CallPlan, metadata):
        core = self.core
        steps = core.steps(plan)

        async def unary(request, context):
            t0, token = core.begin(plan, context.time_remaining(), metadata)
            exc: BaseException | None = None
            response = None
            try:
                for step in steps:
                    if step is Step.RUN:
                        response = behavior(request, context)
                        if inspect.isawaitable(response):  # grpc.aio also accepts plain functions
                            response = await response
                    else:
                        await self._perform(step, plan, context)
                return response
            except BaseException as e:
                exc = e
                raise
            finally:
                core.end(plan, token, self._end_code(plan, context, exc), t0)

        return unary

    def _wrap_stream(self, behavior, plan: CallPlan, metadata):
        core = self.core
        steps = core.steps(plan, streaming=True)

        async def stream(request, context):
            t0, token = core.begin(plan, context.time_remaining(), metadata)
            exc: BaseException | None = None
            try:
                for step in steps:
                    if step is not Step.RUN:
                        await self._perform(step, plan, context)
                        continue
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
