"""Safety valves of injection (contracts §5): the one-way emergency stop and the cap on active faults.

`EmergencyStop` turns injection off for the life of the process, never on. It is
tripped by SIGUSR1 (`install_stop_signal`, which `drill serve` calls and a
service may call), by the appearance of the file named by `DRILL_FAULT_STOP_FILE`
(looked at once a second by a small daemon thread, so waits in flight are released
even when no new call arrives; the hot path reads one flag), or by `trip()`. Tripping releases every registered wait
at once (a delayed call answers now, a drop closes now), sets `drill_fault_switch`
to 0 and writes one audit line.

`ActiveFaults` counts injected faults in flight and refuses a slot beyond the
cap (`DRILL_FAULT_MAX_ACTIVE`; 0 = no injection).

Pure Python (threading, signal, os): no grpc.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable

from harness.core import audit
from harness.core.errors import BadInput

#: Seconds between two looks at the stop file.
STOP_FILE_INTERVAL_S = 1.0

_log = logging.getLogger("drill.faults")


class EmergencyStop:
    """A one-way switch: once tripped, injection stays off until the process ends."""

    def __init__(self) -> None:
        self._tripped = False
        self._finished = False
        self.reason = ""
        self._files: tuple[str, ...] = ()
        self._watcher: threading.Thread | None = None
        self._lock = threading.Lock()
        self._releasers: dict[int, Callable[[], None]] = {}
        self._listeners: list[Callable[[], None]] = []
        self._keys = itertools.count()

    @property
    def tripped(self) -> bool:
        return self._tripped

    def watch_file(self, path: str | None) -> None:
        """Also trip when `path` exists: looked at now, then once a second by a daemon thread."""
        if not path or path in self._files:
            return
        with self._lock:
            self._files = (*self._files, path)
            start = self._watcher is None
            if start:
                self._watcher = threading.Thread(target=self._watch, name="drill-stop-file", daemon=True)
        self._look()
        if start and not self._tripped:
            self._watcher.start()

    def _look(self) -> None:
        for path in self._files:
            if os.path.exists(path):
                self.trip(f"file:{path}")
                return

    def _watch(self) -> None:
        while not self._tripped:
            time.sleep(STOP_FILE_INTERVAL_S)
            try:
                self._look()
            except Exception:  # noqa: BLE001 - a watcher error must not end the watch
                pass

    def check(self) -> bool:
        """Hot path: True once injection is stopped (one attribute read)."""
        return self._tripped

    def on_trip(self, listener: Callable[[], None]) -> None:
        """Call `listener()` once when the stop trips (at once if it already has)."""
        with self._lock:
            if not self._finished:
                self._listeners.append(listener)
                return
        listener()

    def add_releaser(self, release: Callable[[], None]) -> int | None:
        """Register a wait's `release()`; called at once if already stopped. Returns a key for `remove_releaser`."""
        with self._lock:
            if not self._tripped:
                key = next(self._keys)
                self._releasers[key] = release
                return key
        _safe(release)
        return None

    def remove_releaser(self, key: int | None) -> None:
        if key is not None:
            with self._lock:
                self._releasers.pop(key, None)

    def trip(self, reason: str) -> bool:
        """Stop injection for good; release waits in flight. True if this call did it (one way: never undone)."""
        self._tripped = True
        return self._finish(reason)

    def trip_from_signal(self, signum: int, _frame=None) -> None:
        """A signal handler: takes effect for new calls at once; releasing runs on a thread (no locks here)."""
        self._tripped = True
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = str(signum)
        threading.Thread(target=self._finish, args=(f"signal:{name}",), name="drill-stop", daemon=True).start()

    def _finish(self, reason: str) -> bool:
        with self._lock:
            if self._finished:
                return False
            self._finished = True
            self.reason = reason
            releasers = list(self._releasers.values())
            self._releasers.clear()
            listeners = list(self._listeners)
            self._listeners.clear()
        for release in releasers:
            _safe(release)
        for listener in listeners:
            _safe(listener)
        audit.emit("emergency_stop", logging.WARNING, reason=reason, pid=os.getpid(), released=len(releasers))
        _log.warning("drill fault injection STOPPED for the life of this process (%s)", reason)
        return True


def _safe(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 - a release that fails (closed loop, gone call) must not stop the others
        pass


#: The process's stop: what SIGUSR1 and `drill stop` trip. Interceptors use it unless given their own.
PROCESS_STOP = EmergencyStop()


class StopHandlerConflict(BadInput):
    """SIGUSR1 already has a handler that is not ours; we refuse to replace it silently."""


def install_stop_signal(
    stop: EmergencyStop | None = None, *, signum: int = signal.SIGUSR1, chain: bool = False
) -> EmergencyStop:
    """Make `signum` (SIGUSR1) trip the emergency stop. Call it from the main thread at start.

    A handler someone else installed is never replaced silently: with `chain=False`
    this raises `StopHandlerConflict`; with `chain=True` ours runs first, then theirs.
    Installing twice is harmless. Returns the stop it trips (the process's by default).
    """
    stop = PROCESS_STOP if stop is None else stop
    previous = signal.getsignal(signum)
    if getattr(previous, "__self__", None) is stop or getattr(previous, "_drill_stop", None) is stop:
        return stop  # already ours
    foreign = callable(previous) and previous is not signal.default_int_handler
    if foreign and not chain:
        raise StopHandlerConflict(
            f"{signal.Signals(signum).name} already has a handler ({previous!r}); "
            "pass chain=True to run it after the emergency stop, or call stop.trip() from it"
        )

    def handler(sig: int, frame) -> None:
        stop.trip_from_signal(sig, frame)
        if foreign:
            previous(sig, frame)

    handler._drill_stop = stop  # type: ignore[attr-defined]
    signal.signal(signum, handler)
    return stop


class ActiveFaults:
    """Injected faults in flight, capped at `limit` (0 = none). `acquire()` False means: pass untouched."""

    __slots__ = ("limit", "_active", "_lock", "_gauge")

    def __init__(self, limit: int, gauge=None) -> None:
        self.limit = limit
        self._active = 0
        self._lock = threading.Lock()
        self._gauge = gauge

    @property
    def active(self) -> int:
        return self._active

    def acquire(self) -> bool:
        with self._lock:
            if self._active >= self.limit:
                return False
            self._active += 1
        if self._gauge is not None:
            self._gauge.inc()
        return True

    def release(self) -> None:
        with self._lock:
            self._active -= 1
        if self._gauge is not None:
            self._gauge.dec()
