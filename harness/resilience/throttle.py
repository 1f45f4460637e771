"""Client-side adaptive throttling (Google SRE book, "Handling Overload"): reject locally before the backend must.

Each client keeps, over a sliding window, `requests` (every attempt the application
made, those this throttle rejected included) and `accepts` (attempts the backend
answered with anything but a failure of its own). While the backend accepts most of
what it gets, `requests ≤ K·accepts` and nothing is rejected; once it fails more
than `1 − 1/K` of it, a new attempt is rejected here with probability

    p = max(0, (requests − K·accepts) / (requests + 1))

so the load that reaches an overloaded backend shrinks towards what it still
accepts, while a trickle keeps probing it. K = 2 is the book's default (a backend
failing half its requests is not throttled yet). Unlike a breaker it has no state
to flip: as accepts return, `p` falls smoothly back to 0 within one window. What
counts as an accept is the caller's `OutcomeClassifier`'s business (a relayed
give-up is not a failure of the hop that relays it).

Time comes from an injectable clock and the draw from an injectable `random.Random`,
so the formula is testable on scripted sequences.
"""

from __future__ import annotations

import random as _random
import threading
import time
from collections.abc import Callable

from harness.resilience.counters import SlidingCounter


class AdaptiveThrottle:
    """`allow()` before each attempt (counts a request), `record(accepted)` after an attempt that went out."""

    def __init__(
        self,
        k: float = 2.0,
        window_s: float = 10.0,
        *,
        buckets: int = 10,
        clock: Callable[[], float] = time.monotonic,
        rng: _random.Random | None = None,
    ) -> None:
        if k < 1:
            raise ValueError("adaptive throttling needs K >= 1 (K < 1 rejects requests the backend accepts)")
        if window_s <= 0:
            raise ValueError("adaptive throttling needs a window > 0")
        self.k = float(k)
        self.window_s = window_s
        self._requests = SlidingCounter(window_s, buckets, clock)
        self._accepts = SlidingCounter(window_s, buckets, clock)
        self._rng = rng or _random.Random()
        self._lock = threading.Lock()

    def counts(self) -> tuple[int, int]:
        """(requests, accepts) in the window now."""
        with self._lock:
            return self._requests.total(), self._accepts.total()

    def reject_probability(self) -> float:
        """`max(0, (requests − K·accepts) / (requests + 1))` over the window now."""
        requests, accepts = self.counts()
        return max(0.0, (requests - self.k * accepts) / (requests + 1))

    def allow(self) -> bool:
        """Count one request and draw: False = reject it locally (p from the counts before this request)."""
        p = self.reject_probability()
        with self._lock:
            self._requests.add()
            return not (p > 0 and self._rng.random() < p)

    def record(self, accepted: bool) -> None:
        """The backend's answer to an attempt that went out: accepted unless it failed."""
        if accepted:
            with self._lock:
                self._accepts.add()
