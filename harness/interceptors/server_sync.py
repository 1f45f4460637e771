"""The sync `grpc.server` flavour of the server pipeline: waits end when the call does, aborts raise.

Sync handlers cannot be cancelled, so an injected wait returns early when the
call terminates (`context.add_callback`), freeing the worker thread; the deadline
gap still counts the time the fault would have held. Everything else is in
`_server_pipeline`.
"""

from __future__ import annotations

import threading

import grpc

from harness.core.gate import Outcome
from harness.core.safety import EmergencyStop
from harness.interceptors._server_pipeline import (
    CallPlan,
    ServerInterceptorBase,
    Step,
    abort_details,
    ended_by_deadline,
    mark,
)


def _wait(context, seconds: float, stop: EmergencyStop) -> bool:
    """Sleep up to `seconds`; True to go on (time is up, or the emergency stop released the wait),
    False when the call terminated meanwhile (the caller left)."""
    done = threading.Event()
    if not context.add_callback(done.set):
        return False
    key = stop.add_releaser(done.set)
    try:
        done.wait(seconds)
    finally:
        stop.remove_releaser(key)
    return context.is_active()


class SyncFaultServerInterceptor(ServerInterceptorBase, grpc.ServerInterceptor):
    """Gated delay/abort/drop plus server metrics, for `grpc.server(..., interceptors=[...])`."""

    def intercept_service(self, continuation, handler_call_details):
        return self._wrapped(continuation(handler_call_details), handler_call_details)

    def _perform(self, step: Step, plan: CallPlan, context) -> bool:
        """Do a WAIT or ABORT step; False when the caller left during a wait."""
        if step is Step.WAIT:
            return _wait(context, self.core.wait_s(plan), self.core.stop)
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

    def _pass_unary(self, behavior, plan: CallPlan, metadata):
        """A call with nothing to inject: begin, the handler, end."""
        core = self.core
        end_code = self._end_code

        def unary(request, context):
            t0, token = core.begin(plan, context.time_remaining(), metadata)
            failed = False
            try:
                return behavior(request, context)
            except BaseException:
                failed = True
                raise
            finally:
                core.end(plan, token, end_code(context, failed), t0)

        return unary

    def _wrap_unary(self, behavior, plan: CallPlan, metadata):
        core = self.core
        if plan.decision.outcome is not Outcome.HIT:  # nothing to inject (begin never adds one): steps (RUN,)
            return self._pass_unary(behavior, plan, metadata)

        def unary(request, context):
            t0, token = core.begin(plan, context.time_remaining(), metadata)
            steps = core.steps(plan)  # after begin: the cap and the stop may have turned a hit into a pass
            mark(context, plan.decision)
            failed = False
            response = None
            try:
                for i, step in enumerate(steps):
                    if step is Step.RUN:
                        try:
                            response = behavior(request, context)
                            mark(context, plan.decision)  # the handler may have set trailers of its own
                        except Exception:
                            if Step.WAIT in steps[i + 1 :]:  # a delay holds errors and aborts too (contracts §3)
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

        def stream(request, context):
            t0, token = core.begin(plan, context.time_remaining(), metadata)
            steps = core.steps(plan, streaming=True)
            mark(context, plan.decision)
            failed = False
            try:
                for step in steps:
                    if step is Step.RUN:
                        yield from behavior(request, context)
                        mark(context, plan.decision)
                    elif not self._perform(step, plan, context):
                        return  # the caller left during the wait
            except BaseException:
                failed = True
                raise
            finally:
                core.end(plan, token, self._end_code(context, failed), t0)

        return stream
