"""Balancing over N backend addresses: round robin or power of two choices on peak EWMA.

P2C (Mitzenmacher) draws two distinct backends and keeps the cheaper by Finagle's
peak-EWMA cost `ewma_latency × (inflight + 1)`: the EWMA jumps up to any higher
latency at once and decays with time constant `decay_s` — on every read too, as
Finagle's `PeakEwma.get` does, so a backend that was slow once and is no longer
picked still drifts back to cheap and gets picked again. A backend never measured
but with calls in flight costs a large penalty, so a silent slow backend is not
mistaken for a free one. Optional ejection takes a backend out for
`min(base_s × ejections, max_s)` (Envoy's `max_ejection_time`) after
`consecutive_failures` server faults or when its EWMA exceeds `latency_factor` ×
the median of the others (slow is the new down), never more than `max_percent`
of the backends at once; each `base_s` spent healthy takes one off `ejections`
(Envoy decrements its multiplier per healthy interval).
"""

from __future__ import annotations

import dataclasses
import math
import random as _random
import statistics
import time
from collections.abc import Callable, Sequence

from harness.core.status import StatusClass, classify

#: Cost of a backend with calls in flight and no latency measured yet (Finagle's penalty idea).
PENALTY_S = 1e3


class PeakEwma:
    """Peak-sensitive EWMA of latency, decaying with time constant `decay_s` (Finagle's `PeakEwma`).

    `observe(rtt)` jumps up to a higher rtt at once, else blends by `w = e^(−Δt/decay_s)`;
    reading `value` decays towards 0 with the time since the last update (Finagle: `get`
    is `observe(0)`), so the cost falls even when no new sample arrives.
    """

    def __init__(self, decay_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        if decay_s <= 0:
            raise ValueError("peak EWMA decay must be positive")
        self.decay_s = decay_s
        self.clock = clock
        self._cost = 0.0
        self._stamp: float | None = None

    def _update(self, rtt: float) -> None:
        now = self.clock()
        if self._stamp is None or rtt > self._cost:
            self._cost = rtt  # peak: jump up at once
        else:
            w = math.exp(-max(0.0, now - self._stamp) / self.decay_s)
            self._cost = self._cost * w + rtt * (1.0 - w)
        self._stamp = now

    def observe(self, rtt: float) -> None:
        self._update(rtt)

    @property
    def value(self) -> float:
        """The current cost, decayed to now."""
        if self._stamp is not None:
            self._update(0.0)
        return self._cost


@dataclasses.dataclass(eq=False)
class Backend:
    address: str
    ewma: PeakEwma
    inflight: int = 0
    consecutive_failures: int = 0
    ejections: int = 0
    ejected_until: float = 0.0

    def cost(self) -> float:
        ewma = self.ewma.value
        if ewma <= 0.0 and self.inflight > 0:
            return PENALTY_S * self.inflight
        return ewma * (self.inflight + 1)


class RoundRobin:
    """Each backend in turn."""

    def __init__(self) -> None:
        self._next = 0

    def __call__(self, candidates: Sequence[Backend]) -> Backend:
        pick = candidates[self._next % len(candidates)]
        self._next += 1
        return pick


class PowerOfTwoChoices:
    """Two distinct random candidates; the lower `ewma × (inflight + 1)` wins (ties: the first drawn)."""

    def __init__(self, rng: _random.Random | None = None) -> None:
        self.rng = rng or _random.Random()

    def __call__(self, candidates: Sequence[Backend]) -> Backend:
        if len(candidates) == 1:
            return candidates[0]
        a, b = self.rng.sample(list(candidates), 2)
        return b if b.cost() < a.cost() else a


@dataclasses.dataclass(frozen=True)
class Ejection:
    """When to take a backend out of rotation, and for how long."""

    consecutive_failures: int = 5
    base_s: float = 10.0
    #: Envoy's `max_ejection_time` (default 300 s; never below `base_s`).
    max_s: float = 300.0
    max_percent: int = 50
    #: Eject when EWMA > factor × median EWMA of the other backends (None = latency never ejects).
    latency_factor: float | None = None
    #: ... and only when that EWMA is above this floor (sub-millisecond noise never ejects).
    min_latency_s: float = 0.05


class Balancer:
    """Picks a backend among the non-ejected ones; told when each call starts and ends."""

    def __init__(
        self,
        addresses: Sequence[str],
        picker: Callable[[Sequence[Backend]], Backend],
        *,
        decay_s: float = 10.0,
        ejection: Ejection | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_pick: Callable[[str], None] | None = None,
    ) -> None:
        if not addresses:
            raise ValueError("a balancer needs at least one backend address")
        self.backends = [Backend(a, PeakEwma(decay_s, clock)) for a in addresses]
        self.picker = picker
        self.ejection = ejection
        self.clock = clock
        self.on_pick = on_pick

    def available(self, exclude: frozenset[str] = frozenset()) -> list[Backend]:
        now = self.clock()
        return [b for b in self.backends if b.ejected_until <= now and b.address not in exclude]

    def pick(self, exclude: frozenset[str] = frozenset()) -> Backend | None:
        """A backend for the next attempt, or None when every one is ejected or excluded."""
        candidates = self.available(exclude)
        if not candidates:
            return None
        backend = self.picker(candidates)
        if self.on_pick is not None:
            self.on_pick(backend.address)
        return backend

    def started(self, backend: Backend) -> None:
        backend.inflight += 1

    def abandoned(self, backend: Backend) -> None:
        """An attempt that ended without an outcome about the backend (a local error): inflight only."""
        backend.inflight = max(0, backend.inflight - 1)

    def finished(self, backend: Backend, rtt: float, code) -> None:
        """Record one attempt's outcome: latency into the EWMA, failures towards ejection."""
        backend.inflight = max(0, backend.inflight - 1)
        cls = classify(code)
        if cls is StatusClass.CANCELLED:
            return  # the caller gave up: says nothing about the backend
        backend.ewma.observe(rtt)
        if cls is StatusClass.SERVER_FAULT:
            backend.consecutive_failures += 1
        elif cls is StatusClass.OK:
            backend.consecutive_failures = 0
        ej = self.ejection
        if ej is None:
            return
        if ej.consecutive_failures and backend.consecutive_failures >= ej.consecutive_failures:
            self._eject(backend)
        elif ej.latency_factor is not None and (mine := backend.ewma.value) >= ej.min_latency_s:
            others = [v for b in self.available() if b is not backend and (v := b.ewma.value) > 0]
            if others and mine > ej.latency_factor * statistics.median(others):
                self._eject(backend)

    def _eject(self, backend: Backend) -> None:
        ej = self.ejection
        assert ej is not None
        now = self.clock()
        if backend.ejected_until > now:
            return
        ejected = sum(1 for b in self.backends if b.ejected_until > now)
        if (ejected + 1) * 100 > ej.max_percent * len(self.backends):
            return
        if backend.ejections and backend.ejected_until > 0:
            healthy = now - backend.ejected_until  # time back in rotation since the last ejection ended
            backend.ejections = max(0, backend.ejections - int(healthy // ej.base_s))
        backend.ejections += 1
        backend.consecutive_failures = 0
        backend.ejected_until = now + min(ej.base_s * backend.ejections, max(ej.max_s, ej.base_s))
