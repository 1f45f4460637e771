"""Counting events over a sliding time window, in equal slices (the budget's and the throttle's memory)."""

from __future__ import annotations

import math
from collections.abc import Callable


class SlidingCounter:
    """Counts events over the last `window_s` seconds in `buckets` equal slices."""

    def __init__(self, window_s: float, buckets: int, clock: Callable[[], float]) -> None:
        self.slice_s = window_s / buckets
        self.buckets = buckets
        self.clock = clock
        self._counts = [0] * buckets
        self._epochs = [-1] * buckets

    def _slot(self) -> int:
        epoch = math.floor(self.clock() / self.slice_s)
        i = epoch % self.buckets
        if self._epochs[i] != epoch:
            self._epochs[i] = epoch
            self._counts[i] = 0
        return i

    def add(self, n: int = 1) -> None:
        self._counts[self._slot()] += n

    def total(self) -> int:
        epoch = math.floor(self.clock() / self.slice_s)
        low = epoch - self.buckets + 1
        return sum(c for c, e in zip(self._counts, self._epochs, strict=True) if e >= low)
