"""Retry budget: retries may be at most a share of requests, and a quiet period cannot fund a burst.

SRE book: a per-client budget of 10% keeps load growth near 1.1× instead of 3×.
Finagle's RetryBudget adds a floor of retries per second so a quiet client can
still retry. Here the same rule holds over two sliding windows at once:

    retries(last W) ≤ max(ratio × requests(last W), min_retries_per_s × W)

for W = `window_s` (Finagle's ttl, 10 s) and for W = `burst_s` (1 s by default; its
allowance is at least one retry, so a floor below 1/s still lets a quiet client retry).
The long window alone is a bank: a quiet warm-up of 10 s at 50 requests/s and no
failures saves 50 retries, which the first failing second spends at once (three
attempts per failing call where the ratio allows 1.1). The short window caps what
any one second may spend at the ratio of that second's requests, so the retries
right after a fault starts are the steady state's, never the savings'. Set
`burst_s` = `window_s` for Finagle's banked behaviour. Time comes from an
injectable clock so the arithmetic is testable without sleeping.

`RetryThrottle` is gRPC's `retryThrottling` token bucket (gRFC A6), which reacts to
the failure rate instead of counting requests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from harness.resilience.counters import SlidingCounter


class RetryBudget:
    """`retries ≤ max(ratio·requests, min_retries_per_s·W)` over the last W, for W = window and W = burst."""

    def __init__(
        self,
        ratio: float = 0.1,
        min_retries_per_s: float = 1.0,
        window_s: float = 10.0,
        *,
        burst_s: float | None = 1.0,
        buckets: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 <= ratio <= 1:
            raise ValueError("retry budget ratio must be within 0..1")
        burst_s = window_s if burst_s is None else burst_s
        if not 0 < burst_s <= window_s:
            raise ValueError("retry budget burst window must be within (0, window]")
        self.ratio = ratio
        self.min_retries_per_s = min_retries_per_s
        self.window_s, self.burst_s = window_s, burst_s
        #: (window seconds, requests, retries) per horizon; one horizon when burst = window
        self._horizons = [
            (w, SlidingCounter(w, buckets, clock), SlidingCounter(w, buckets, clock))
            for w in sorted({window_s, burst_s})
        ]
        self._lock = threading.Lock()

    @property
    def floor(self) -> float:
        """Retries the long window allows however few requests there were."""
        return self.min_retries_per_s * self.window_s

    def record_request(self) -> None:
        """Count one logical request (first attempts only)."""
        with self._lock:
            for _, requests, _ in self._horizons:
                requests.add()

    def allowance(self) -> float:
        """Retries the long window allows in total right now."""
        with self._lock:
            w, requests, _ = self._horizons[-1]
            return max(self.ratio * requests.total(), self.min_retries_per_s * w)

    def _limit(self, w: float, requests: SlidingCounter) -> float:
        limit = max(self.ratio * requests.total(), self.min_retries_per_s * w)
        # the burst window always allows one retry: one is not a burst, and the long window keeps the average
        return limit if w == self.window_s else max(limit, 1.0)

    def _room(self) -> bool:
        return all(retries.total() + 1 <= self._limit(w, requests) for w, requests, retries in self._horizons)

    def can_acquire(self) -> bool:
        """Whether a retry could be taken now (nothing is taken: ask before sleeping, take when sending)."""
        with self._lock:
            return self._room()

    def try_acquire(self) -> bool:
        """Take one retry from the budget; False (and nothing taken) when it is spent."""
        with self._lock:
            if not self._room():
                return False
            for _, _, retries in self._horizons:
                retries.add()
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
