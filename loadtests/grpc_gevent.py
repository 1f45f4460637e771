"""How a grpc call made from a greenlet completes: no thread per call, no hub threadpool to size.

Locust's gRPC recipe makes blocking calls on gevent-patched grpc: every in-flight
call parks one gevent hub threadpool thread in its own completion queue until it
ends. That is a thread hand-off per call and, with fewer threads than calls in
flight, slow calls of one user class stall every other user of the process (the
load generator fakes blast radius).

Here a call is started with grpc's future API on a channel shared by the users of
one traffic class, and the calling greenlet waits on a gevent `Waiter` that the
call's done-callback wakes. Who polls the channel's completion queue is the wait
mode (`DRILL_LOCUST_WAIT`):

* `native` (default): one native (non-gevent) thread per channel, for the life of
  the process. It only takes events off the queue and hands them to the hub
  through one async watcher (many per wake-up when the process is busy); grpc's
  own event handling then runs in the hub, so per-call state is only ever touched
  by the hub thread. The channel-level locks grpc shares between the two threads
  are native locks (the channel is created with them); gevent's locks are not
  safe across threads. This replaces grpc's channel-spin function for our
  channels only (`grpc._channel._run_channel_spin_thread`, private): if grpc no
  longer has it, channels keep grpc's own spin (the next mode) and a warning says so.
* `greenlet`: grpc's own spin loop (`grpc.experimental.gevent`): a greenlet that
  polls the queue through the hub threadpool, one event per hand-off. Same
  semantics, more CPU; for measuring the two against each other.
* `block-hub`: a test control. The calling greenlet waits natively, blocking the
  hub until its call ends, as a synchronous wait would: a drill delay then stalls
  every user of the process, which the no-confounding test must detect.

Whatever the mode, any number of calls can be in flight. Drill and organic users
never share a channel: a proxy or server that caps concurrent streams per
connection could otherwise queue organic calls behind slow drill calls. Channels
are created lazily (after Locust forks its workers) and live as long as the process.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import os
import threading
from typing import Any

import gevent
import grpc
from gevent import monkey
from gevent.hub import Waiter

log = logging.getLogger("drill.loadtests")

#: How a greenlet waits for its call: `native` (default), `greenlet`, `block-hub` (test control).
WAIT_ENV = "DRILL_LOCUST_WAIT"
WAIT_MODES = ("native", "greenlet", "block-hub")

_start_native_thread = monkey.get_original("_thread", "start_new_thread")
_native_lock = monkey.get_original("_thread", "allocate_lock")
_native_rlock = monkey.get_original("_thread", "RLock")


def wait_mode() -> str:
    mode = os.environ.get(WAIT_ENV, "native") or "native"
    if mode not in WAIT_MODES:
        raise ValueError(f"{WAIT_ENV}={mode!r}: expected one of {', '.join(WAIT_MODES)}")
    return mode


_Condition = threading.Condition


def _native_condition(lock=None):
    """`threading.Condition()` on a native reentrant lock (gevent's patched RLock is Python code)."""
    return _Condition(_native_rlock() if lock is None else lock)


def _channel_with_native_locks(target: str) -> grpc.Channel:
    """`grpc.insecure_channel(target)` whose channel-level locks and conditions are native.

    grpc takes them from the `threading` module when the channel is built; gevent has
    patched that module, so they are swapped for the moment of construction (no greenlet
    switch can happen in between).
    """
    patched = (threading.Condition, threading.Lock)
    threading.Condition, threading.Lock = _native_condition, _native_lock
    try:
        return grpc.insecure_channel(target)
    finally:
        threading.Condition, threading.Lock = patched


class _Hub:
    """The hub side: events from the polling threads, handled in the hub, many per wake-up."""

    def __init__(self) -> None:
        self.hub = gevent.get_hub()
        self.events: collections.deque = collections.deque()
        self.watcher = self.hub.loop.async_()
        self.watcher.start(self.drain)

    def drain(self) -> None:
        """Run grpc's handler of every event taken off a queue (done-callbacks wake their greenlets)."""
        events = self.events
        while events:
            event = events.popleft()
            try:
                event.tag(event)
            except Exception:  # noqa: BLE001 - one bad event must not stop the others
                log.exception("grpc event handler failed")


#: Our channels, kept alive to the very end of the process: the reference count is raised once so
#: that interpreter teardown never deallocates (and so never closes) them; see `_NativeSpin`.
_PROCESS_LIFETIME: list = []
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_PROCESS_LIFETIME))


class _NativeSpin:
    """Polls each registered channel's completion queue on a native thread for the life of the process.

    grpc's own loop exits whenever no call is in flight and the next call starts a
    thread again; a native thread with the gevent hub grpc's polling creates costs
    more than the calls it would serve (~220 µs), so the thread stays. A channel
    must then never be closed: grpc's close waits for the poller to drain the calls
    it cancels (through a gevent lock the native thread must not touch) and then
    destroys the queue under it. So the channels live as long as the process, which
    ends with the thread still polling (it holds no lock while it waits).
    """

    def __init__(self, hub: _Hub) -> None:
        self._hub = hub
        self._states: dict[int, Any] = {}  # id(state) -> state, for the channels polled here
        self._queue_timeout = None
        self.installed = False
        #: Released per event handed to the hub, for the block-hub control only.
        self.arrived: _NativeSemaphore | None = None

    def install(self) -> bool:
        """Route the spin of registered channels here; False if grpc has no such hook."""
        if self.installed:
            return True
        try:
            from grpc import _channel
            from grpc._cython import cygrpc

            original = _channel._run_channel_spin_thread
            self._queue_timeout = cygrpc.CompletionType.queue_timeout
        except (ImportError, AttributeError):
            log.warning("grpc has no channel-spin hook: calls complete through grpc's own spin greenlet")
            return False

        def run_channel_spin_thread(state) -> None:
            # grpc calls this when the channel's first call starts: its count of calls in flight
            # never drops back to 0 for our channels (nothing here decrements it), so only once.
            if self._states.get(id(state)) is state:
                _start_native_thread(self._spin, (state,))
            else:
                original(state)

        _channel._run_channel_spin_thread = run_channel_spin_thread
        self.installed = True
        return True

    def channel(self, target: str) -> grpc.Channel | None:
        """A channel polled here, or None if this grpc build does not allow it."""
        if not self.install():
            return None
        channel = _channel_with_native_locks(target)
        state = getattr(channel, "_call_state", None)
        if state is None or not hasattr(state, "managed_calls"):
            channel.close()
            return None
        self._states[id(state)] = state
        _PROCESS_LIFETIME.append(channel)
        return channel

    def _spin(self, state) -> None:
        events, send, arrived = self._hub.events, self._hub.watcher.send, self.arrived
        queue_timeout = self._queue_timeout
        while True:
            try:
                event = state.channel.next_call_event()
            except Exception:  # noqa: BLE001 - cannot happen on a channel that is never closed
                log.exception("polling a shared channel failed: its calls will not complete")
                return
            if event.completion_type == queue_timeout:
                continue
            events.append(event)
            send()
            if arrived is not None:
                arrived.release()


class _NativeSemaphore:
    """A counting semaphore on native locks (gevent's are not safe across threads)."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = _native_lock()
        self._nonzero = _native_lock()
        self._nonzero.acquire()

    def release(self) -> None:
        with self._lock:
            self._count += 1
            if self._count == 1:
                self._nonzero.release()

    def acquire(self) -> None:
        self._nonzero.acquire()
        with self._lock:
            self._count -= 1
            if self._count > 0:
                self._nonzero.release()


class Completions:
    """Shared channels per (target, traffic class) and the wait for one call's completion."""

    def __init__(self, mode: str | None = None) -> None:
        self.mode = mode or wait_mode()
        self._hub = _Hub()
        self._spin = _NativeSpin(self._hub)
        if self.mode == "block-hub":
            self._spin.arrived = _NativeSemaphore()
        self._channels: dict[tuple[str, str], grpc.Channel] = {}
        #: True when the channels are polled natively (False: grpc's own spin greenlet).
        self.native = False

    def channel(self, target: str, traffic: str) -> grpc.Channel:
        """The channel the users of `traffic` share towards `target` (created at first use)."""
        key = (target, traffic)
        ch = self._channels.get(key)
        if ch is None:
            ch = self._spin.channel(target) if self.mode != "greenlet" else None
            self.native = ch is not None
            if ch is None:
                ch = grpc.insecure_channel(target)
            self._channels[key] = ch
        return ch

    def start(self, multicallable, request, timeout: float | None, metadata) -> grpc.Future:
        """`multicallable.future(...)`; on a natively polled channel, the call's own condition is native too.

        grpc guards each call's state with a `threading.Condition` built when the call
        starts; under gevent that is a Python-level RLock over a gevent lock, taken some
        seven times per call (start, event, done-callback, status, trailers, reply). Here
        only the hub thread ever touches a call's state (the polling thread only queues
        events), so a native lock guards it as well at a fraction of the cost: no
        greenlet switch happens while grpc holds it, and a wait on it (a blocking
        `result()` before the end) still yields, since `Condition.wait` parks on a lock
        from the patched module. Swapped for the moment the call is built, as
        `_channel_with_native_locks` does (no greenlet switch in between).
        """
        if not self.native:
            return multicallable.future(request, timeout=timeout, metadata=metadata)
        threading.Condition = _native_condition
        try:
            return multicallable.future(request, timeout=timeout, metadata=metadata)
        finally:
            threading.Condition = _Condition

    def start_stream(self, multicallable, request, timeout: float | None, metadata):
        """`multicallable(...)` of a response stream (unary-stream, stream-stream): the call, to iterate.

        Its condition is native as in `start`: the iterating greenlet and a client stream's sender (a
        greenlet under gevent) wait on it through `Condition.wait`, which yields; only the hub touches it.
        """
        if not self.native:
            return multicallable(request, timeout=timeout, metadata=metadata)
        threading.Condition = _native_condition
        try:
            return multicallable(request, timeout=timeout, metadata=metadata)
        finally:
            threading.Condition = _Condition

    def wait(self, future: grpc.Future) -> None:
        """Return once `future` is done; only this greenlet waits (the hub keeps running)."""
        if self.mode == "block-hub" and self.native:
            self._block_hub_until_done(future)
            return
        waiter = Waiter(self._hub.hub)
        run_callback = self._hub.hub.loop.run_callback
        future.add_done_callback(lambda _f: run_callback(waiter.switch, None))
        waiter.get()

    def _block_hub_until_done(self, future: grpc.Future) -> None:
        """The control: handle events right here, without yielding, until this call is done."""
        done = []
        future.add_done_callback(done.append)
        while not done:
            self._spin.arrived.acquire()  # a native wait: the whole hub stops here
            self._hub.drain()

    def cancel_after(self, future: grpc.Future, seconds: float):
        """Cancel `future` after `seconds` (a hub timer); returns the timer to stop once the call ends."""
        timer = self._hub.hub.loop.timer(seconds)
        timer.start(future.cancel)
        return timer


_COMPLETIONS: list[Completions] = []


def completions() -> Completions:
    """The process's Completions, created on first use (the wait mode is read then)."""
    if not _COMPLETIONS:
        _COMPLETIONS.append(Completions())
    return _COMPLETIONS[0]
