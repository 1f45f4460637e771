"""The drill scope of the call being served, visible to code that makes downstream calls.

A server interceptor sets it for the duration of a handler (a contextvar, so it
follows the asyncio task or the worker thread); client interceptors read it to
propagate drill keys, the origin deadline and the request id (DESIGN §2).
"""

from __future__ import annotations

import contextvars
import dataclasses
import time


@dataclasses.dataclass(slots=True)
class CallScope:
    """Set by the server interceptor at handler entry; read-only for everyone else."""

    service: str
    method: str
    request_id: str = ""
    tenant: str = ""
    traffic: str = "organic"
    #: Absolute wall-clock deadline of the edge caller (unix seconds), if known.
    origin_deadline: float | None = None
    #: Absolute monotonic deadline of this call, from `time_remaining()` at entry; None = unbounded.
    deadline_monotonic: float | None = None
    #: Drill keys to forward downstream (set when a fault target names a later hop).
    propagate: tuple[tuple[str, str], ...] = ()

    def time_remaining(self) -> float | None:
        """Seconds left before this call's deadline; None when the caller set none."""
        if self.deadline_monotonic is None:
            return None
        return self.deadline_monotonic - time.monotonic()


_current: contextvars.ContextVar[CallScope | None] = contextvars.ContextVar("drill_call_scope", default=None)


def current() -> CallScope | None:
    """The scope of the call being served in this task or thread, if any."""
    return _current.get()


def enter(scope: CallScope) -> contextvars.Token:
    return _current.set(scope)


def leave(token: contextvars.Token) -> None:
    try:
        _current.reset(token)
    except ValueError:  # reset from another context (sync streaming); harmless
        _current.set(None)
