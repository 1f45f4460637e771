"""Retry budget: retries may be at most a share of requests over a sliding window, with a floor.

SRE book: a per-client budget of 10% keeps load growth near 1.1× instead of 3×.
Finagle's RetryBudget adds a floor of retries per second so a quiet client can
still retry. Here: within the last `window_s` seconds,
`retries ≤ max(ratio × requests, min_retries_per_s × window_s)`. Time comes from
an injectable clock so the arithmetic is testable without sleeping.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class _SlidingCounter:
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


class RetryBudget:
    """`retries ≤ max(ratio·requests, min_retries_per_s·window_s)` over a sliding window."""

    def __init__(
        self,
        ratio: float = 0.1,
        min_retries_per_s: float = 1.0,
        window_s: float = 10.0,
        *,
        buckets: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 <= ratio <= 1:
            raise ValueError("retry budget ratio must be within 0..1")
        self.ratio = ratio
        self.floor = min_retries_per_s * window_s
        self._requests = _SlidingCounter(window_s, buckets, clock)
        self._retries = _SlidingCounter(window_s, buckets, clock)
        self._lock = threading.Lock()

    def record_request(self) -> None:
        """Count one logical request (first attempts only)."""
        with self._lock:
            self._requests.add()

    def allowance(self) -> float:
        """Retries the window allows in total right now."""
        return max(self.ratio * self._requests.total(), self.floor)

    def can_acquire(self) -> bool:
        """Whether a retry could be taken now (nothing is taken: ask before sleeping, take when sending)."""
        with self._lock:
            return self._retries.total() + 1 <= self.allowance()

    def try_acquire(self) -> bool:
        """Take one retry from the budget; False (and nothing taken) when it is spent."""
        with self._lock:
            if self._retries.total() + 1 > self.allowance():
                return False
            self._retries.add()
            return True


class Unlimited:
    """No budget: every retry the policy wants is allowed (naive, jitter)."""

    def record_request(self) -> None:
        pass

    def can_acquire(self) -> bool:
        return True

    def try_acquire(self) -> bool:
        return True


class RetryThrottle:
    """gRPC's `retryThrottling` token bucket (gRFC A6), per client.

    Starts full at `max_tokens`; a failed attempt takes 1 token, a success gives back
    `token_ratio`; retries are refused while tokens ≤ `max_tokens / 2`.
    """

    def __init__(self, max_tokens: float = 10.0, token_ratio: float = 0.1) -> None:
        if max_tokens <= 0 or token_ratio <= 0:
            raise ValueError("retry throttling needs maxTokens > 0 and tokenRatio > 0")
        self.max_tokens, self.token_ratio = float(max_tokens), float(token_ratio)
        self.tokens = self.max_tokens
        self._lock = threading.Lock()

    def record(self, failed: bool) -> None:
        """Count one attempt's outcome: failed = a retryable status (A6), else a success."""
        with self._lock:
            if failed:
                self.tokens = max(0.0, self.tokens - 1.0)
            else:
                self.tokens = min(self.max_tokens, self.tokens + self.token_ratio)

    def allows_retry(self) -> bool:
        with self._lock:
            return self.tokens > self.max_tokens / 2
