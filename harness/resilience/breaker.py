"""Circuit breaker: closed → open on a failure rate, open → half-open after a wait, probes decide.

Follows resilience4j's CircuitBreaker. An outcome is a `Verdict` from the caller's
`OutcomeClassifier` (a bare status code is classified by `harness.core.status`:
server faults fail, OK succeeds, CANCELLED and client faults are ignored). Closed:
the failure rate over a count-based window (last N calls) or a time-based window
(last N seconds) opens the breaker once at least `min_calls` outcomes are in it.
Open: after `open_s` the next `allow()` moves to half-open. Half-open: at most
`half_open_probes` calls are let through, and their **failure rate against the same
threshold** decides (resilience4j's `permittedNumberOfCallsInHalfOpenState`): at or
above it → open again, below → closed with a fresh window. The decision is taken as
soon as the remaining probes can no longer change it, so a dead backend reopens on
its first failures; one unlucky probe among several healthy ones does not. Breakers
are kept per backend or per service by `BreakerSet`, which also answers the
attempt loop's questions for them (`allow` at the pick, `on_outcome`).
"""

from __future__ import annotations

import enum
import math
import threading
import time
from collections import deque
from collections.abc import Callable

from harness.resilience.outcome import DEFAULT_CLASSIFIER, Verdict


class State(enum.IntEnum):
    """Values are the `drill_breaker_state` gauge values."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


class CountWindow:
    """The last `size` outcomes."""

    def __init__(self, size: int = 100) -> None:
        self._items: deque[bool] = deque(maxlen=max(1, size))
        self._failures = 0

    def add(self, failed: bool) -> None:
        if len(self._items) == self._items.maxlen and self._items[0]:
            self._failures -= 1
        self._items.append(failed)
        self._failures += failed

    def counts(self) -> tuple[int, int]:
        return len(self._items), self._failures

    def clear(self) -> None:
        self._items.clear()
        self._failures = 0


class TimeWindow:
    """Outcomes of the last `seconds`, in one-second buckets."""

    def __init__(self, seconds: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = max(1, math.ceil(seconds))
        self.clock = clock
        self._buckets: dict[int, list[int]] = {}

    def _trim(self, now_s: int) -> None:
        for key in [k for k in self._buckets if k <= now_s - self.size]:
            del self._buckets[key]

    def add(self, failed: bool) -> None:
        now_s = math.floor(self.clock())
        self._trim(now_s)
        bucket = self._buckets.setdefault(now_s, [0, 0])
        bucket[0] += 1
        bucket[1] += failed

    def counts(self) -> tuple[int, int]:
        self._trim(math.floor(self.clock()))
        return sum(b[0] for b in self._buckets.values()), sum(b[1] for b in self._buckets.values())

    def clear(self) -> None:
        self._buckets.clear()


Transition = Callable[[State, State], None]


class CircuitBreaker:
    """One breaker. Ask `allow()` before a call, tell `record(outcome)` after it."""

    def __init__(
        self,
        *,
        failure_rate: float = 0.5,
        min_calls: int = 20,
        window: CountWindow | TimeWindow | None = None,
        open_s: float = 5.0,
        half_open_probes: int = 3,
        clock: Callable[[], float] = time.monotonic,
        on_transition: Transition | None = None,
    ) -> None:
        self.failure_rate = failure_rate
        self.min_calls = max(1, min_calls)
        self.window = window if window is not None else CountWindow(100)
        self.open_s = open_s
        self.half_open_probes = max(1, half_open_probes)
        self.clock = clock
        self.on_transition = on_transition
        self.state = State.CLOSED
        self._opened_at = 0.0
        self._probes_out = 0
        self._probe_successes = 0
        self._probe_failures = 0
        self._lock = threading.Lock()

    def _move(self, to: State) -> None:
        frm, self.state = self.state, to
        if to is State.OPEN:
            self._opened_at = self.clock()
        if to is State.HALF_OPEN:
            self._probes_out = self._probe_successes = self._probe_failures = 0
        if to is State.CLOSED:
            self.window.clear()
        if self.on_transition is not None and frm is not to:
            self.on_transition(frm, to)

    def allow(self) -> bool:
        """Whether a call may go out now (takes a probe permit in half-open)."""
        with self._lock:
            if self.state is State.OPEN:
                if self.clock() - self._opened_at < self.open_s:
                    return False
                self._move(State.HALF_OPEN)
            if self.state is State.HALF_OPEN:
                if self._probes_out >= self.half_open_probes:
                    return False
                self._probes_out += 1
            return True

    def record(self, outcome: Verdict | object) -> None:
        """Record the outcome of an allowed call: a `Verdict`, or a status code (grpc.StatusCode, name, None = OK)."""
        verdict = outcome if isinstance(outcome, Verdict) else DEFAULT_CLASSIFIER.classify(outcome)
        if verdict is Verdict.IGNORED:
            self.release()
            return
        failed = verdict is Verdict.FAILURE
        with self._lock:
            if self.state is State.HALF_OPEN:
                self._probe(failed)
                return
            if self.state is State.OPEN:
                return  # a straggler from before the breaker opened
            self.window.add(failed)
            calls, failures = self.window.counts()
            if calls >= self.min_calls and failures / calls >= self.failure_rate:
                self._move(State.OPEN)

    def _probe(self, failed: bool) -> None:
        """Count one probe; decide once the rest of the probes could not change the answer."""
        if failed:
            self._probe_failures += 1
        else:
            self._probe_successes += 1
        n = self.half_open_probes
        if self._probe_failures / n >= self.failure_rate:
            self._move(State.OPEN)  # even if every other probe succeeded
        elif (n - self._probe_successes) / n < self.failure_rate:
            self._move(State.CLOSED)  # even if every other probe failed

    def release(self) -> None:
        """Give back a half-open probe permit whose outcome says nothing (ignored, cancelled, never sent)."""
        with self._lock:
            if self.state is State.HALF_OPEN and self._probes_out > 0:
                self._probes_out -= 1


class BreakerSet:
    """Breakers keyed per backend or one per service (`per`), built by `factory(key)`."""

    def __init__(self, factory: Callable[[str], CircuitBreaker], per: str = "backend") -> None:
        if per not in ("backend", "service"):
            raise ValueError("breaker `per` must be backend or service")
        self.factory = factory
        self.per = per
        self._breakers: dict[str, CircuitBreaker] = {}

    def key(self, backend: str) -> str:
        return backend if self.per == "backend" else "all"

    def for_backend(self, backend: str) -> CircuitBreaker:
        key = self.key(backend)
        breaker = self._breakers.get(key)
        if breaker is None:
            breaker = self._breakers[key] = self.factory(key)
        return breaker
