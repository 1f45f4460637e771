"""The sync `grpc.server` flavour of the server pipeline: waits end when the call does, aborts raise.

Sync handlers cannot be cancelled, so an injected wait returns early when the
call terminates (`context.add_callback`), freeing the worker thread; the deadline
gap still counts the time the fault would have held. Everything else is in
`_server_pipeline`.

Every kind of method is wrapped: a client-streaming one the way a unary one is
(`_wrap_unary`: one response), a bidi one the way a server-streaming one is
(`_wrap_stream`). A mid-stream fault sees the request messages through
`_requests` (on the thread of the handler that reads them) and the response
messages as grpc takes them from the wrapped generator (which it does once the
previous one is sent).
"""

from __future__ import annotations

import threading

import grpc

from harness.core.gate import Outcome
from harness.core.safety import EmergencyStop
from harness.core.settings import SettingsError
from harness.interceptors._fault_steps import HeadersContext, Step, release
from harness.interceptors._server_pipeline import (
    CallPlan,
    ServerInterceptorBase,
    abort_details,
    ended_by_deadline,
    fault_headers,
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
    """Gated delay/abort/drop plus server metrics, for `grpc.server(..., interceptors=[...])`.

    The in-flight limit (`max_in_flight`, DRILL_MAX_IN_FLIGHT) is the aio flavour's: a sync server's own
    `grpc.server(..., maximum_concurrent_rpcs=N)` refuses past N with RESOURCE_EXHAUSTED, so a limit given
    here is refused at start rather than ignored."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.settings.max_in_flight:
            raise SettingsError(
                "DRILL_MAX_IN_FLIGHT applies to grpc.aio servers; give a sync grpc.server "
                f"maximum_concurrent_rpcs={self.settings.max_in_flight} instead (it refuses past it too)"
            )

    def intercept_service(self, continuation, handler_call_details):
        return self._wrapped(continuation(handler_call_details), handler_call_details)

    def _perform(self, step: Step, plan: CallPlan, context) -> bool:
        """Do a WAIT, HEADERS or ABORT step; False when the caller left during a wait."""
        if step is Step.WAIT:
            return _wait(context, self.core.wait_s(plan), self.core.stop)
        if step is Step.HEADERS:
            plan.headers_out = True
            try:
                context.send_initial_metadata(fault_headers(plan))
            except Exception:  # noqa: BLE001 - already sent (what the step asks for), or the call is gone
                pass
            return True
        code, details = abort_details(plan.decision)
        context.abort(grpc.StatusCode[code], details)  # raises; on a dead call grpc drops it quietly
        return False  # pragma: no cover - abort raised

    def _act(self, steps: tuple[Step, ...], plan: CallPlan, context) -> bool:
        """Perform steps after the handler began (a tripwire fired, or a delay's after the handler); False when
        the caller left during a wait. A drop whose caller left still aborts (grpc drops it)."""
        mark(context, plan)
        going = True
        for step in steps:
            if step is Step.ABORT or going:
                going = self._perform(step, plan, context) and going
        return going

    def _answered(self, after: tuple[Step, ...], plan: CallPlan, context) -> bool:
        """The handler answered: perform the steps after it (a delay's, an `@served` fault's) unless the fault may
        no longer act, or the caller left while the handler worked (a sync handler runs on: an `@served` fault
        then never acts, as on grpc.aio, whose handler is cancelled); False when the caller left during a wait."""
        acts = context.is_active() and self.core.answered(plan)
        going = self._act(after, plan, context) if acts else True
        held = release(plan)  # the handler's headers an `@served` fault held: with its answer (an abort raised)
        if held and not plan.headers_out:
            try:
                context.send_initial_metadata(held)
            except Exception:  # noqa: BLE001 - already sent, or the call is gone
                pass
        return going

    def _requests(self, source, plan: CallPlan, context):
        """The request stream as the handler reads it, counted for the call's `@read` tripwire."""
        trip = plan.trip
        it = iter(source)
        while True:
            steps = trip.before_read()
            if steps:
                self._act(steps, plan, context)  # a caller that left: the next read raises grpc's error
            try:
                message = next(it)
            except StopIteration:
                return
            trip.read()
            yield message

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

    def _handler_args(self, request, plan: CallPlan, context):
        """(request or request stream, context) as the handler gets them on a call with a fault."""
        if plan.trip is not None and plan.trip.reads:
            request = self._requests(request, plan, context)
        if plan.trip is not None or plan.headers_out or plan.hold_headers:
            context = HeadersContext(context, plan)
        return request, context

    def _wrap_unary(self, behavior, plan: CallPlan, metadata):
        """A call with one response: a unary method, or a client-streaming one (`request` is then its stream)."""
        core = self.core
        if plan.decision.outcome is not Outcome.HIT:  # nothing to inject (begin never adds one): steps (RUN,)
            return self._pass_unary(behavior, plan, metadata)

        def unary(request, context):
            t0, token = core.begin(plan, context.time_remaining(), metadata)
            steps = core.steps(plan)  # after begin: the cap and the stop may have turned a hit into a pass
            after = core.after_run(steps)  # a delay's, an `@served` fault's: they act on handler errors too
            mark(context, plan)
            failed = False
            response = None
            try:
                for step in steps:
                    if step is Step.RUN:
                        try:
                            response = behavior(*self._handler_args(request, plan, context))
                            mark(context, plan)  # the handler may have set trailers of its own
                        except Exception:
                            if after:
                                self._answered(after, plan, context)
                            raise
                        if after:
                            self._answered(after, plan, context)  # a caller that left: grpc drops the send
                        return response
                    # a drop whose caller left still aborts (grpc drops it)
                    self._perform(step, plan, context)
                return response
            except BaseException:
                failed = True
                raise
            finally:
                core.end(plan, token, self._end_code(context, failed), t0)

        return unary

    def _wrap_stream(self, behavior, plan: CallPlan, metadata):
        """A call with a response stream: a server-streaming method, or a bidi one (`request` is its stream)."""
        core = self.core

        def stream(request, context):
            t0, token = core.begin(plan, context.time_remaining(), metadata)
            steps = core.steps(plan)
            after = core.after_run(steps)  # an `@served` fault's: after the last message, before the status
            mark(context, plan)
            failed = False
            try:
                for step in steps[: len(steps) - len(after)]:
                    if step is not Step.RUN:
                        if not self._perform(step, plan, context):
                            return  # the caller left during the wait
                        continue
                    trip = plan.trip
                    try:
                        if trip is None or trip.reads:
                            yield from behavior(*self._handler_args(request, plan, context))
                        else:
                            responses = iter(behavior(*self._handler_args(request, plan, context)))
                            try:
                                for item in responses:
                                    yield item  # resumed once grpc has sent it
                                    fired = trip.sent()
                                    if fired and not self._act(fired, plan, context):
                                        return  # the caller left during the wait
                            finally:
                                close = getattr(responses, "close", None)
                                if close is not None:
                                    close()  # a fault ended the stream: the handler's cleanup runs now
                    except Exception:
                        if after:  # the handler's error is its answer: an `@served` fault replaces it
                            self._answered(after, plan, context)
                        raise
                    mark(context, plan)
                if after:  # the handler's last message is out: the fault acts before the status
                    self._answered(after, plan, context)
            except BaseException:
                failed = True
                raise
            finally:
                core.end(plan, token, self._end_code(context, failed), t0)

        return stream
