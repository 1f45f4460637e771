"""The sync `grpc.server` flavour of the server pipeline: waits end when the call does, aborts raise.

Sync handlers cannot be cancelled, so an injected wait returns early when the
call terminates (`context.add_callback`), freeing the worker thread; the deadline
gap still counts the time the fault would have held. Everything else is in
`_server_pipeline`.
"""

from __future__ import annotations

import threading

import grpc

from harness.interceptors._server_pipeline import (
    CallPlan,
    ServerInterceptorBase,
    Step,
    abort_details,
    ended_by_deadline,
)


def _wait(context, seconds: float) -> bool:
    """Sleep up to `seconds`; return False early if the call terminated meanwhile."""
    done = threading.Event()
    if not context.add_callback(done.set):
        return False
    return not done.wait(seconds)


class SyncFaultServerInterceptor(ServerInterceptorBase, grpc.ServerInterceptor):
    """Gated delay/abort/drop plus server metrics, for `grpc.server(..., interceptors=[...])`."""

    def intercept_service(self, continuation, handler_call_details):
        return self._wrapped(continuation(handler_call_details), handler_call_details)

    def _perform(self, step: Step, plan: CallPlan, context) -> bool:
        """Do a WAIT or ABORT step; False when the caller left during a wait."""
        if step is Step.WAIT:
            return _wait(context, self.core.wait_s(plan))
        code, details = abort_details(plan.decision)
        context.abort(grpc.StatusCode[code], details)  # raises; on a dead call grpc drops it quietly
        return False  # pragma: no cover - abort raised

    @staticmethod
    def _end_code(context, failed: bool):
        if not context.is_active():  # the caller is gone: that is the outcome, whatever we set after
            if ended_by_deadline(context.time_remaining()):
                return grpc.StatusCode.DEADLINE_EXCEEDED
            return grpc.StatusCode.CANCELLED
        code = context.code()
        if code is not None:
            return code
        return grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK

    def _wrap_unary(self, behavior, plan: CallPlan, metadata):
        core = self.core
        steps = core.steps(plan)

        def unary(request, context):
            t0, token = core.begin(plan, context.time_remaining(), metadata)
            failed = False
            response = None
            try:
                for i, step in enumerate(steps):
                    if step is Step.RUN:
                        try:
                            response = behavior(request, context)
                        except Exception:
                            if Step.WAIT in steps[i + 1 :]:  # a delay holds errors and aborts too (DESIGN §3)
                                self._perform(Step.WAIT, plan, context)
                            raise
                    else:
                        # a drop whose caller left still aborts (grpc drops it); a delay whose
                        # caller left returns now and grpc drops the send
                        self._perform(step, plan, context)
                return response
            except BaseException:
                failed = True
                raise
            finally:
                core.end(plan, token, self._end_code(context, failed), t0)

        return unary

    def _wrap_stream(self, behavior, plan: CallPlan, metadata):
        core = self.core
        steps = core.steps(plan, streaming=True)

        def stream(request, context):
            t0, token = core.begin(plan, context.time_remaining(), metadata)
            failed = False
            try:
                for step in steps:
                    if step is Step.RUN:
                        yield from behavior(request, context)
                    elif not self._perform(step, plan, context):
                        return  # the caller left during the wait
            except BaseException:
                failed = True
                raise
            finally:
                core.end(plan, token, self._end_code(context, failed), t0)

        return stream
