"""The drill scope of the call being served, visible to code that makes downstream calls.

A server interceptor sets it for the duration of a handler (a contextvar); client
interceptors read it to propagate drill keys, the origin deadline and the request
id (contracts §2).

Only the task (or thread) that serves the call sees its scope, and only until the
call ends (`end()` marks the scope over, so a copy of the contextvar that
outlives the call sees nothing). An `asyncio` task spawned during a call copies
the contextvar, but it is not the owner, so `current()` answers None there:
background work started by a drill call (a cache refresher, a fire-and-forget
notification) is organic. Code that fans a drill call out to child tasks and
wants them to carry the drill passes the scope on explicitly with `within()`.

One exception: grpc.aio runs client interceptors in a task of its own per call
(`InterceptedUnaryUnaryCall._invoke`), which no API links to the task that made
the call. Such a task sees the scope while the call is live (never after), so a
background task's call made while the drill call is still being served can
carry it; once the served call ends, nothing does.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


@dataclasses.dataclass(slots=True)
class CallScope:
    """Set by the server interceptor at handler entry; read-only for everyone else."""

    service: str
    method: str
    request_id: str = ""
    tenant: str = ""
    traffic: str = "organic"
    #: Absolute wall-clock deadline of the edge caller (unix seconds), if known and trusted.
    origin_deadline: float | None = None
    #: Absolute monotonic deadline of this call, from `time_remaining()` at entry; None = unbounded.
    deadline_monotonic: float | None = None
    #: Drill keys to forward downstream (set when a fault target names a later hop).
    propagate: tuple[tuple[str, str], ...] = ()
    #: Set when the call ends: a copy of the contextvar that outlives the call sees nothing.
    ended: bool = False

    def time_remaining(self) -> float | None:
        """Seconds left before this call's deadline; None when the caller set none."""
        if self.deadline_monotonic is None:
            return None
        return self.deadline_monotonic - time.monotonic()


#: (scope, owner): the owner is the asyncio task, or the thread id outside a running loop.
_current: contextvars.ContextVar[tuple[CallScope, object] | None] = contextvars.ContextVar(
    "drill_call_scope", default=None
)


def _owner() -> object:
    loop = asyncio._get_running_loop()
    task = asyncio.current_task(loop) if loop is not None else None
    return task if task is not None else threading.get_ident()


#: Tests for tasks that act for the call being served although they are not its owner (grpc.aio runs
#: each client interceptor in a task of its own). The interceptor layer registers one; the contracts
#: stay grpc-free.
_DELEGATE_TESTS: list[Callable[[object], bool]] = []


def trust_delegates(test: Callable[[object], bool]) -> None:
    """Let tasks for which `test(task)` is true read the scope of the call that started them."""
    if test not in _DELEGATE_TESTS:
        _DELEGATE_TESTS.append(test)


def _is_delegate(who: object) -> bool:
    return any(test(who) for test in _DELEGATE_TESTS)


def current() -> CallScope | None:
    """The scope of the call served by this very task or thread, if the call is still going on."""
    entry = _current.get()
    if entry is None:
        return None
    sc, owner = entry
    if sc.ended:
        return None
    me = _owner()
    if owner != me and not _is_delegate(me):
        return None
    return sc


def enter(scope: CallScope) -> contextvars.Token:
    """Make `scope` current for this task or thread (its owner) until `leave`."""
    return _current.set((scope, _owner()))


def leave(token: contextvars.Token) -> None:
    try:
        _current.reset(token)
    except ValueError:  # reset from another context (sync streaming); harmless
        _current.set(None)


def end(scope: CallScope) -> None:
    """Mark the call over: no copy of the contextvar, anywhere, sees this scope again."""
    scope.ended = True


async def within(scope: CallScope | None, awaitable: Awaitable[T]) -> T:
    """Await `awaitable` in this task with `scope` current (explicit fan-out of a drill call).

    `asyncio.gather(within(scope.current(), a()), within(scope.current(), b()))` carries
    the drill into both children while the call lasts; `None` runs it organic.
    """
    if scope is None or scope.ended:
        _current.set(None)
        return await awaitable
    token = enter(scope)
    try:
        return await awaitable
    finally:
        leave(token)


def run_bound(scope: CallScope, fn, *args):
    """Call `fn(*args)` with `scope` current in this thread (a sync handler on an executor)."""
    token = enter(scope)
    try:
        return fn(*args)
    finally:
        leave(token)
