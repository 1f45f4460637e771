"""The `grpc.aio` flavour of the server pipeline: waits are `asyncio.sleep`, aborts are `context.abort`.

Everything else (the gate, the steps of a fault, metrics, scope, audit) is in
`_server_pipeline`. A caller that leaves during a wait cancels this task inside
the sleep: the call is dropped silently, with no log line. A call whose caller's deadline
passed before its handler began (the loop got to it late) is answered
DEADLINE_EXCEEDED without the handler (`ServerCore.expired`). The in-flight limit
(`_overload.InFlight`) is checked where grpc hands a call over and again at handler
entry, where each handler counts itself in and out.

grpc.aio runs coroutine and async-generator handlers on the event loop and plain
(sync) functions and generators on a thread pool. The wrapper keeps that: only
the handler's own work is moved, so a sync handler still runs on the loop's
default executor (grpc's pool when the server has no `migration_thread_pool`)
with grpc's sync servicer context, and the fault's waits and aborts stay on the
loop. If grpc's sync context adapter is unavailable, sync handlers are left
unwrapped.

Every kind of method is wrapped: a client-streaming one the way a unary one is
(`_wrap_unary`: one response), a bidi one the way a server-streaming one is
(`_wrap_stream`); `_server_aio_contexts` hands the handler its request stream and
context so that a mid-stream fault sees every message.
"""

from __future__ import annotations

import asyncio
import inspect
from time import monotonic, perf_counter

import grpc
from grpc import aio

from harness.core import scope
from harness.core.collecting import collecting
from harness.core.faults import Mode
from harness.core.metrics import is_infrastructure
from harness.core.safety import EmergencyStop
from harness.core.status import status_name
from harness.core.tracing import end_server_span, start_server_span
from harness.interceptors._fault_steps import HeadersContext, Step, release
from harness.interceptors._handlers import unary_unary_handler
from harness.interceptors._server_aio_contexts import (
    FaultContext,
    HeldAbortContext,
    HeldAbortSyncContext,
    Requests,
    SyncRequests,
)
from harness.interceptors._server_pipeline import (
    _KNOWN_METHODS,
    CallPlan,
    ServerInterceptorBase,
    _scan,
    abort_details,
    ended_by_deadline,
    fault_headers,
    mark,
    marker,
)

try:  # grpc's adapter that gives a sync handler the sync context API on an aio server
    from grpc._cython.cygrpc import _SyncServicerContext
except ImportError:  # pragma: no cover - depends on the grpc build
    _SyncServicerContext = None

_OK = grpc.StatusCode.OK
_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
_NONE = Mode.NONE.value
_DONE = object()


def is_async_handler(behavior) -> bool:
    """What grpc.aio runs on the loop (the same test grpc applies); everything else goes to a thread."""
    return (
        inspect.isawaitable(behavior)
        or inspect.iscoroutinefunction(behavior)
        or inspect.isasyncgenfunction(behavior)
    )


class _OnLoop:
    """`is_async_handler` per behaviour, remembered (grpc hands over the same handlers call after call)."""

    LIMIT = 1024  # a generic handler that builds a new behaviour per call must not grow this

    def __init__(self) -> None:
        self._known: dict[object, bool] = {}

    def __call__(self, behavior) -> bool:
        try:
            return self._known[behavior]
        except KeyError:
            pass
        except TypeError:  # unhashable: ask every time
            return is_async_handler(behavior)
        if len(self._known) >= self.LIMIT:
            self._known.clear()
        on_loop = self._known[behavior] = is_async_handler(behavior)
        return on_loop


async def releasable_sleep(seconds: float, stop: EmergencyStop) -> None:
    """`asyncio.sleep(seconds)` that the emergency stop ends at once (from any thread)."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)

    timer = loop.call_later(seconds, wake)
    key = stop.add_releaser(lambda: loop.call_soon_threadsafe(wake))
    try:
        await fut
    finally:
        timer.cancel()
        stop.remove_releaser(key)


class FaultServerInterceptor(ServerInterceptorBase, aio.ServerInterceptor):
    """Gated delay/abort/drop plus server metrics, for `grpc.aio.server(interceptors=[...])`."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._on_loop = _OnLoop()
        #: full method -> (its handler, what serves its organic calls: `_organic_server`), for unary methods
        #: this interceptor has wrapped: an organic call of one of them skips `_wrapped`'s per-call questions.
        self._unary: dict[str, tuple] = {}

    async def intercept_service(self, continuation, handler_call_details):
        flight = self.core.flight
        flight.arrived += 1
        if flight.calls >= flight.bound and not is_infrastructure(handler_call_details.method):
            self.core.refuse(handler_call_details.method, handler_call_details.invocation_metadata)
            return flight.handler  # aborts RESOURCE_EXHAUSTED without reading the request
        handler = await continuation(handler_call_details)
        entry = self._unary.get(handler_call_details.method)
        if entry is not None and entry[0] is handler:  # a unary method wrapped before, by the same handler
            md = handler_call_details.invocation_metadata
            scanned = _scan(md)
            if not scanned[1]:  # no drill key: organic
                return entry[1](scanned[0], md)
            return self._wrapped(handler, handler_call_details, scanned)
        return self._wrapped(handler, handler_call_details)

    def _can_wrap(self, behavior) -> bool:
        return _SyncServicerContext is not None or self._on_loop(behavior)

    async def _perform(self, step: Step, plan: CallPlan, context) -> None:
        if step is Step.WAIT:
            await releasable_sleep(self.core.wait_s(plan), self.core.stop)
        elif step is Step.HEADERS:
            plan.headers_out = True
            try:
                await context.send_initial_metadata(fault_headers(plan))
            except aio.UsageError:
                pass  # already sent (by the handler, or with a message): what the step asks for
        else:  # Step.ABORT
            code, details = abort_details(plan.decision)
            await context.abort(grpc.StatusCode[code], details)

    async def _act(self, steps: tuple[Step, ...], plan: CallPlan, context) -> None:
        """A mid-stream fault fired (or a held error): mark the call, perform the steps."""
        mark(context, plan)
        for step in steps:
            await self._perform(step, plan, context)

    async def _answered(self, after: tuple[Step, ...], plan: CallPlan, context) -> None:
        """The handler answered: perform the steps after it, unless the fault may no longer act or the caller left
        while the handler worked (an `@served` fault then never acts); then the handler's headers an `@served` fault
        held go out with its answer (a fault that ended the call raised)."""
        if not context.done() and self.core.answered(plan):
            await self._act(after, plan, context)
        held = release(plan)
        if held and not plan.headers_out:
            try:
                await context.send_initial_metadata(held)
            except aio.UsageError:
                pass  # already sent: what the handler asked for

    def _held(self, plan: CallPlan, handler_context, context, after: tuple[Step, ...], held: list[bool]):
        """A coroutine handler's context whose `abort` performs the steps after the handler first."""

        async def hold() -> None:
            held.append(True)
            await self._answered(after, plan, context)

        return HeldAbortContext(handler_context, hold, lambda: marker(plan))

    def _held_sync(self, plan: CallPlan, sync_context, context, after: tuple[Step, ...], held: list[bool], loop):
        """The same for a sync handler: its `abort`, on the handler's thread, has the steps run on the loop."""

        def hold() -> None:
            held.append(True)
            asyncio.run_coroutine_threadsafe(self._answered(after, plan, context), loop).result()

        return HeldAbortSyncContext(sync_context, hold, lambda: marker(plan))

    @staticmethod
    def _sync_context(plan: CallPlan, context):
        """grpc's sync context adapter for a sync handler (skipping its own headers once a fault sent them)."""
        sync_context = _SyncServicerContext(context)
        if plan.trip is not None or plan.headers_out or plan.hold_headers:
            sync_context = HeadersContext(sync_context, plan)
        return sync_context

    @staticmethod
    def _end_code(sc: scope.CallScope, context, exc: BaseException | None):
        if exc is None:
            return context.code() or _OK
        if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):  # GeneratorExit: grpc stopped pulling a
            # response stream, whose caller left while a message was being written
            return grpc.StatusCode.DEADLINE_EXCEEDED if ended_by_deadline(sc.time_remaining()) else (
                grpc.StatusCode.CANCELLED
            )
        if isinstance(exc, aio.AbortError):
            return context.code() or grpc.StatusCode.UNKNOWN
        return grpc.StatusCode.UNKNOWN

    def _wrap_unary(self, behavior, plan: CallPlan, metadata):
        """A call with one response: a unary method, or a client-streaming one (`request` is then its stream)."""
        core = self.core
        flight = core.flight
        on_loop = self._on_loop(behavior)
        streams_in = plan.kind.request_streaming

        async def run(request, context, after: tuple[Step, ...], held: list[bool]):
            """The handler where grpc would run it; `after`: the steps after it (a delay's, an `@served` fault's),
            which act on its aborts too."""
            trip = plan.trip
            act = None if trip is None else (lambda steps: self._act(steps, plan, context))
            if streams_in and trip is not None and trip.reads:
                request = Requests(request, trip, act)
            if on_loop:
                handler_context = context
                if trip is not None or plan.headers_out or plan.hold_headers:
                    handler_context = FaultContext(context, plan, act)
                if after:
                    handler_context = self._held(plan, handler_context, context, after, held)
                return await behavior(request, handler_context)
            loop = asyncio.get_running_loop()
            sync_context = self._sync_context(plan, context)
            if after:
                sync_context = self._held_sync(plan, sync_context, context, after, held, loop)
            bridge = SyncRequests(request, loop) if streams_in else None
            try:
                return await loop.run_in_executor(
                    None, scope.run_bound, plan.scope, behavior, bridge or request, sync_context
                )
            finally:
                if bridge is not None:
                    bridge.cancel()

        async def unary(request, context):
            remaining = context.time_remaining()
            left = core.expired(plan, remaining)
            if left is not None:  # the caller is gone: no work, no fault for it
                await context.abort(left, "deadline passed before the handler began")
            if flight.calls >= flight.bound:  # let in when grpc handed it over; full since
                core.refuse_planned(plan)
                await context.abort(_EXHAUSTED, flight.details)
            t0, token = core.begin(plan, remaining, metadata)
            steps = core.steps(plan)  # after begin: the cap and the stop may have turned a hit into a pass
            after = core.after_run(steps)  # a delay's, an `@served` fault's: they act on handler errors too
            mark(context, plan)
            exc: BaseException | None = None
            response = None
            held: list[bool] = []
            flight.calls += 1
            try:
                for step in steps[: len(steps) - len(after)]:
                    if step is not Step.RUN:
                        await self._perform(step, plan, context)
                        continue
                    try:
                        response = await run(request, context, after, held)
                        mark(context, plan)  # the handler may have set trailers of its own
                    except Exception:
                        if after and not held:
                            await self._answered(after, plan, context)
                        raise
                if after and not held:
                    await self._answered(after, plan, context)
                return response
            except BaseException as e:
                exc = e
                raise
            finally:
                flight.calls -= 1
                core.end(plan, token, self._end_code(plan.scope, context, exc), t0)

        return unary

    def _organic_unary(self, handler, known, request_id: str, metadata, full_method: str = ""):
        """An organic unary call; remembers what serves its method's next organic calls (bounded, like
        `ServerCore.method`)."""
        entry = (handler, self._organic_server(handler, known))
        if full_method and len(self._unary) < _KNOWN_METHODS:
            self._unary[full_method] = entry
        return entry[1](request_id, metadata)

    def _organic_server(self, handler, known):
        """Once per method: `serve(request_id, metadata)`, the handler of one organic call (most calls).

        That handler runs the servicer's behaviour where grpc would run it, without a plan, between what
        `ServerCore.start_organic` and `record_organic` record, written out in one closure because it runs
        for nearly every call a server serves (a test holds it to those two). What is the same for every
        call of the method is bound here once; a call adds only its scope and metadata. A drill call with
        nothing to inject takes `_wrap_unary`'s path: its steps are just RUN."""
        behavior = handler.unary_unary
        on_loop = self._on_loop(behavior)
        core = self.core
        organic_scope = core.organic_scope
        _, method, metrics = known
        tracer = core.tracer
        started = metrics.call_started if metrics is not None else None
        finished = metrics.finished_organic if metrics is not None else None
        end_code = self._end_code
        flight = core.flight
        bound = flight.bound

        def serve(request_id: str, metadata):
            sc = organic_scope(known, request_id)

            async def unary(request, context):
                if flight.calls >= bound:  # let in when grpc handed it over; full since
                    flight.refused(known[0], method, metrics, "organic", request_id)
                    await context.abort(_EXHAUSTED, flight.details)
                remaining = context.time_remaining()  # start_organic
                if remaining is not None:
                    sc.deadline_monotonic = monotonic() + remaining
                if started is not None:
                    started()
                span = None if tracer is None else start_server_span(tracer, method, metadata, "", _NONE, False, "")
                token = scope.enter(sc)
                t0 = perf_counter()
                exc: BaseException | None = None
                flight.calls += 1
                try:
                    if on_loop:
                        return await behavior(request, context)
                    return await asyncio.get_running_loop().run_in_executor(
                        None, scope.run_bound, sc, behavior, request, _SyncServicerContext(context)
                    )
                except BaseException as e:
                    exc = e
                    raise
                finally:
                    flight.calls -= 1
                    elapsed = perf_counter() - t0
                    sc.ended = True
                    # in a finalizer the collector runs (the loop gone), neither the interrupted task's scope nor
                    # a metric lock it may hold is touched (`ServerCore.end`, harness.core.collecting)
                    collected = exc is not None and collecting()
                    if not collected:
                        scope.leave(token)  # also frees the task: the scope's entry names it as its owner
                    try:  # record_organic
                        if not collected:
                            status = status_name((context.code() or _OK) if exc is None else end_code(sc, context, exc))
                            if finished is not None:
                                deadline, gap = sc.deadline_monotonic, None
                                if deadline is not None:
                                    now = monotonic()
                                    if now >= deadline:
                                        gap = now - deadline
                                finished(status, elapsed, span, gap)
                            if span is not None:
                                end_server_span(span, status)
                    except Exception:  # noqa: BLE001 - observability must never fail a call
                        pass

            return unary_unary_handler(unary, handler)

        return serve

    def _wrap_stream(self, behavior, plan: CallPlan, metadata):
        """A call with a response stream: a server-streaming method, or a bidi one (`request` is its stream)."""
        core = self.core
        flight = core.flight
        on_loop = self._on_loop(behavior)
        streams_in = plan.kind.request_streaming

        async def stream(request, context):
            remaining = context.time_remaining()
            left = core.expired(plan, remaining)
            if left is not None:  # the caller is gone: no work, no fault for it
                await context.abort(left, "deadline passed before the handler began")
            if flight.calls >= flight.bound:  # let in when grpc handed it over; full since
                core.refuse_planned(plan)
                await context.abort(_EXHAUSTED, flight.details)
            t0, token = core.begin(plan, remaining, metadata)
            steps = core.steps(plan)
            after = core.after_run(steps)  # an `@served` fault's: after the last message, before the status
            mark(context, plan)
            exc: BaseException | None = None
            bridge = responses = None
            held: list[bool] = []
            flight.calls += 1
            try:
                for step in steps[: len(steps) - len(after)]:
                    if step is not Step.RUN:
                        await self._perform(step, plan, context)
                        continue
                    trip = plan.trip
                    act = None if trip is None else (lambda steps: self._act(steps, plan, context))
                    counts_sent = trip is not None and not trip.reads
                    if streams_in and trip is not None and trip.reads:
                        request = Requests(request, trip, act)
                    try:
                        if not on_loop:  # a plain generator: each step of it on the executor, as grpc does
                            loop = asyncio.get_running_loop()
                            if streams_in:
                                request = bridge = SyncRequests(request, loop)
                            sync_context = self._sync_context(plan, context)
                            if after:
                                sync_context = self._held_sync(plan, sync_context, context, after, held, loop)
                            gen = await loop.run_in_executor(
                                None, scope.run_bound, plan.scope, behavior, request, sync_context
                            )
                            responses = iter(gen)
                            while True:
                                item = await loop.run_in_executor(
                                    None, scope.run_bound, plan.scope, next, responses, _DONE
                                )
                                if item is _DONE:
                                    break
                                yield item  # resumed once grpc has sent it
                                if counts_sent:
                                    fired = trip.sent()
                                    if fired:
                                        await act(fired)
                        else:
                            handler_context = context
                            if trip is not None or plan.headers_out:
                                handler_context = FaultContext(context, plan, act)
                            if after:
                                handler_context = self._held(plan, handler_context, context, after, held)
                            result = behavior(request, handler_context)
                            if inspect.isasyncgen(result):
                                responses = result
                                async for item in result:
                                    yield item  # resumed once grpc has sent it
                                    if counts_sent:
                                        fired = trip.sent()
                                        if fired:
                                            await act(fired)
                            else:
                                await result
                    except Exception:
                        if after and not held:  # the handler's error is its answer: an `@served` fault replaces it
                            await self._answered(after, plan, context)
                        raise
                    mark(context, plan)
                if after and not held:  # the handler's last message is out: the fault acts before the status
                    await self._answered(after, plan, context)
            except BaseException as e:
                exc = e
                raise
            finally:
                flight.calls -= 1
                if bridge is not None:
                    bridge.cancel()
                if responses is not None and exc is not None:
                    await _close(responses)  # a fault ended the stream: the handler's cleanup runs now
                core.end(plan, token, self._end_code(plan.scope, context, exc), t0)

        return stream


async def _close(responses) -> None:
    """Close a handler's response generator that the call left (its `finally` runs now, off the loop for a
    sync one); one still running in a worker thread is left to finish there. Never raises."""
    try:
        if inspect.isasyncgen(responses):
            await responses.aclose()
            return
        close = getattr(responses, "close", None)
        if close is not None and not getattr(responses, "gi_running", False):
            await asyncio.get_running_loop().run_in_executor(None, close)
    except BaseException:  # noqa: BLE001 - the call is over; its handler's cleanup must not change that
        pass
