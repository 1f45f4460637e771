"""Whether the garbage collector is running in this thread now, for code the collector may run.

The collector runs in whichever thread allocates past its threshold, in the middle of that thread's work, and runs
finalizers there. One of them is the close of a coroutine whose event loop is gone: a grpc.aio call still in a
handler when its server's loop ended is a task nobody will resume, and collecting it throws GeneratorExit into the
interceptor's coroutine, whose `finally` blocks then run on top of the interrupted code. If such a block records
the call, it takes prometheus_client's locks, which are not reentrant (prometheus/client_python #363, #322, #1076):
when the interrupted code was inside the same metric's `labels()` (creating a child allocates, so it can start a
collection), the thread waits for itself forever, and every later call that touches that metric waits behind it.

So the end-of-call recorders ask `collecting()` and record nothing then: the call's loop is gone, its answer never
left, and no series is worth a process that hangs. The flag is set by a `gc.callbacks` hook (a call before and
after each collection, nothing on the hot path) and names the thread that collects (its native id): other threads
run on meanwhile and record as usual. Not a `threading.local`: under gevent (Locust) that is a greenlet's, which
cannot be read while a greenlet is being finalized, and the hook must never fail.
"""

from __future__ import annotations

import gc
from threading import get_native_id

#: The native id of the thread the collector runs in, or None between collections (one runs at a time).
_collector: list[int | None] = [None]


def _note(phase: str, _info: dict) -> None:
    _collector[0] = get_native_id() if phase == "start" else None


if _note not in gc.callbacks:
    gc.callbacks.append(_note)


def collecting() -> bool:
    """True while the garbage collector runs in this thread (in a finalizer it runs)."""
    who = _collector[0]
    return who is not None and who == get_native_id()
