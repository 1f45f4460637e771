"""What the `grpc.aio` flavour hands a handler: a context that holds its aborts under a delay, counted
messages on a stream, a bridge for sync handlers.

grpc.aio's `context.abort` sends the status at once, before the handler's exception
reaches the interceptor, so a delay that holds a handler's errors too (contracts §3),
and an `@served` fault that replaces them, act inside `abort` itself (`HeldAbortContext`).
A mid-stream fault (`Tripwire`) needs to see every message the handler reads and every
one it sends, whichever way the handler does it: `async for` over its request iterator (`Requests`),
`await context.read()` / `context.write()` (`FaultContext`), or yielding (the flavour
counts those itself). grpc.aio gives a wrapped handler the async request iterator of a
coroutine handler, so a sync handler (run on the executor, as grpc would) reads
through `SyncRequests`, which fetches each message on the loop: the tripwire's waits
and aborts always run on the loop, with the call's own context, and end when the call
does. Once a fault has sent the response headers (`@headers=sent`), a handler's own
`send_initial_metadata` is skipped: its headers cannot follow the ones already sent,
and the call must not fail for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from grpc import aio

from harness.interceptors._fault_steps import Step, hold


def _trailers(args: tuple, kwargs: dict) -> tuple:
    """The trailing metadata an `abort(code, details, trailing_metadata)` call passes (empty: none)."""
    return tuple((args[2] if len(args) >= 3 else kwargs.get("trailing_metadata")) or ())


def _with_marker(args: tuple, kwargs: dict, pair: tuple[str, str] | None) -> tuple[tuple, dict]:
    """`abort(code, details, trailing_metadata)` arguments with the injected-fault marker added."""
    if pair is None:
        return args, kwargs
    if len(args) >= 3:
        args = (*args[:2], (*tuple(args[2] or ()), pair), *args[3:])
    elif "trailing_metadata" in kwargs:
        kwargs = {**kwargs, "trailing_metadata": (*tuple(kwargs["trailing_metadata"] or ()), pair)}
    return args, kwargs


class HeldAbortContext:
    """The handler's context under a fault that acts after the handler (a delay's late answer, `@served`):
    `abort` performs the fault's steps first.

    grpc.aio's `context.abort` sends the status at once, before the handler's exception
    reaches the interceptor, so the hold has to happen inside `abort` itself: a delay
    waits, then the handler's abort goes out; an `@served` abort or drop ends the call
    with its own status there, so the handler's never does, but the trailing metadata it
    passes is set first and goes out, as what a handler sets with `set_trailing_metadata`
    does: the fault replaces the status, never the service's trailers. `pair()` is the
    marker once the hold is over (None when the fault did not act): the call stays marked
    as injected whatever trailing metadata the handler passes.
    """

    def __init__(self, context, hold, pair: Callable[[], tuple[str, str] | None] = lambda: None) -> None:
        self._context = context
        self._hold = hold
        self._pair = pair

    def __getattr__(self, name):
        return getattr(self._context, name)

    async def abort(self, *args, **kwargs):
        trailers = _trailers(args, kwargs)
        if trailers:
            self._context.set_trailing_metadata(trailers)
        await self._hold()
        args, kwargs = _with_marker(args, kwargs, self._pair())
        return await self._context.abort(*args, **kwargs)


class HeldAbortSyncContext(HeldAbortContext):
    """The same for a sync handler on its executor thread (grpc's sync context adapter)."""

    def abort(self, *args, **kwargs):
        trailers = _trailers(args, kwargs)
        if trailers:
            self._context.set_trailing_metadata(trailers)
        self._hold()
        args, kwargs = _with_marker(args, kwargs, self._pair())
        return self._context.abort(*args, **kwargs)


#: Performs a tripwire's steps on the call (marks it first).
Act = Callable[[tuple[Step, ...]], Awaitable[None]]
_END = object()


class Requests:
    """The request stream as a coroutine handler iterates it, each message counted for the call's tripwire."""

    __slots__ = ("_source", "_it", "_trip", "_act")

    def __init__(self, source, trip, act: Act) -> None:
        self._source = source
        self._it = None
        self._trip = trip
        self._act = act

    def __aiter__(self):
        return self

    async def __anext__(self):
        steps = self._trip.before_read()
        if steps:
            await self._act(steps)
        if self._it is None:
            self._it = self._source.__aiter__()
        message = await self._it.__anext__()  # StopAsyncIteration at the end of the stream passes through
        self._trip.read()
        return message


class FaultContext:
    """The handler's context on a call with a fault inside the stream, headers sent by a fault, or headers held
    while an `@served` fault may act."""

    def __init__(self, context, plan, act: Act | None) -> None:
        self._context = context
        self._plan = plan
        self._act = act

    def __getattr__(self, name):
        return getattr(self._context, name)

    async def read(self):
        trip = self._plan.trip
        if trip is not None:
            steps = trip.before_read()
            if steps:
                await self._act(steps)
        message = await self._context.read()
        if trip is not None and message is not aio.EOF:
            trip.read()
        return message

    async def write(self, message) -> None:
        await self._context.write(message)
        trip = self._plan.trip
        if trip is not None:
            steps = trip.sent()
            if steps:
                await self._act(steps)

    async def send_initial_metadata(self, metadata) -> None:
        if not self._plan.headers_out and not hold(self._plan, metadata):
            await self._context.send_initial_metadata(metadata)


class SyncRequests:
    """A sync iterator over an async request stream, for a sync handler on an executor thread.

    Each message is fetched by a coroutine on the loop (where a tripwire's wait or abort runs);
    `cancel()` ends a fetch in progress, so a handler thread blocked on a call that ended is freed.
    """

    __slots__ = ("_it", "_loop", "_pending", "_done")

    def __init__(self, source, loop: asyncio.AbstractEventLoop) -> None:
        self._it = source.__aiter__()
        self._loop = loop
        self._pending = None
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        fut = self._pending = asyncio.run_coroutine_threadsafe(self._next(), self._loop)
        try:
            message = fut.result()
        finally:
            self._pending = None
        if message is _END:
            self._done = True
            raise StopIteration
        return message

    async def _next(self):
        try:
            return await self._it.__anext__()
        except StopAsyncIteration:
            return _END

    def cancel(self) -> None:
        self._done = True
        fut = self._pending
        if fut is not None:
            fut.cancel()
