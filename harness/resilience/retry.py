"""Retry policy: which failures may be retried, how many times, and what the server said.

The policy only answers questions; the caller's loop asks them (tenacity's
`retry_if_*` / `stop_*` split). gRFC A6 rules: at most 5 attempts in total,
retryable codes default to UNAVAILABLE, server pushback `grpc-retry-pushback-ms`
replaces the backoff when it is a non-negative integer and forbids retrying
when it is anything else. Methods declared non-idempotent are never retried.
An attempt cut off by its own per-try timeout is retryable whatever the codes
(Envoy retries per-try timeouts: a per-try timeout only makes sense when a retry
can follow it). A pushback longer than `max_pushback_s` is not waited for: the
call gives up (gRPC bounds it only by the deadline; without one it is unbounded).
"""

from __future__ import annotations

import dataclasses

from harness.core import headers as h
from harness.core.status import status_name

#: gRFC A6: maxAttempts above 5 is treated as 5.
MAX_ATTEMPTS_CAP = 5


@dataclasses.dataclass(frozen=True)
class Pushback:
    """What the server asked for: `stop` (do not retry) or a sleep in seconds."""

    stop: bool = False
    sleep_s: float | None = None


NO_PUSHBACK = Pushback()


def parse_pushback(trailing_metadata) -> Pushback:
    """Read `grpc-retry-pushback-ms` from trailers: an integer ≥ 0 is a sleep, anything else means stop."""
    for item in trailing_metadata or ():
        key, value = item[0], item[1]
        if key != h.RETRY_PUSHBACK_MS:
            continue
        text = value.decode() if isinstance(value, bytes) else str(value)
        text = text.strip()
        if text.isdigit() and len(text) <= 9:
            return Pushback(sleep_s=int(text) / 1000.0)
        return Pushback(stop=True)
    return NO_PUSHBACK


def short_method(method: str) -> str:
    """`/pkg.Service/Call` or `pkg.Service/Call` -> `Call`."""
    return method.rsplit("/", 1)[-1]


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 1
    codes: frozenset[str] = frozenset({"UNAVAILABLE"})
    #: Named by the user (short `Write` or full `pkg.Service/Write`); no default guess.
    non_idempotent: frozenset[str] = frozenset()
    honour_pushback: bool = True
    #: When this hop gives up, tell its caller not to retry (pushback -1): retry at one layer only.
    pushback_on_give_up: bool = False
    #: A server pushback longer than this is not slept: the call gives up instead.
    max_pushback_s: float = 30.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_attempts", max(1, min(MAX_ATTEMPTS_CAP, int(self.max_attempts))))

    def idempotent(self, method: str) -> bool:
        full = method.lstrip("/")
        return short_method(full) not in self.non_idempotent and full not in self.non_idempotent

    def retryable(
        self, method: str, code, attempts_made: int, pushback: Pushback = NO_PUSHBACK, *, per_try_timeout: bool = False
    ) -> bool:
        """Whether another attempt is allowed after `attempts_made` attempts ended with `code`.

        `per_try_timeout`: the attempt was cut off by its own per-try timeout (not the call's deadline).
        """
        if attempts_made >= self.max_attempts or not self.idempotent(method):
            return False
        if not per_try_timeout and status_name(code) not in self.codes:
            return False
        return not (self.honour_pushback and pushback.stop)
