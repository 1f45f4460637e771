"""What one attempt's answer says about the backend that gave it: success, failure, or nothing.

A breaker, the adaptive throttle and gRPC's `retryThrottling` bucket all judge a
backend by its answers; `OutcomeClassifier` is the one place that decides what an
answer counts as (resilience4j's `recordExceptions`/`ignoreExceptions`, Finagle's
response classifiers):

- OK is a success; CANCELLED and client-fault codes say nothing about the backend's
  health (`harness.core.status`).
- A server-fault code is a failure of the backend, **except a relayed give-up**: an
  answer carrying `grpc-retry-pushback-ms` with a negative (non-integer) value. The
  hops of this harness send that when their own downstream call gave up (their
  breaker was open, their budget or deadline refused a retry, their attempts ran out:
  `pushback: {onGiveUp: true}`), telling the caller "do not retry, I already did".
  Such an answer is the hop relaying its dependency's state, not the hop failing;
  counting it would let one dependency's outage open every breaker up the chain.
  `relayedGiveUps: count` restores the plain rule (every server fault counts).

Pure: no grpc import; codes are anything `harness.core.status` understands.
"""

from __future__ import annotations

import enum

from harness.core.status import StatusClass, classify
from harness.resilience.retry import NO_PUSHBACK, Pushback


class Verdict(enum.Enum):
    """What an answer counts as for the strategies that judge a backend."""

    SUCCESS = "success"
    FAILURE = "failure"
    #: says nothing about the backend (cancelled, client fault, a relayed give-up by default)
    IGNORED = "ignored"


#: `breaker.relayedGiveUps` values (the classifier's one switch).
RELAYED_GIVE_UPS = ("ignore", "count")


class OutcomeClassifier:
    """`classify(code, pushback)` -> Verdict; `relayed_give_ups` is `ignore` (default) or `count`."""

    def __init__(self, relayed_give_ups: str = "ignore") -> None:
        if relayed_give_ups not in RELAYED_GIVE_UPS:
            raise ValueError(f"relayed give-ups must be one of {RELAYED_GIVE_UPS}, not {relayed_give_ups!r}")
        self.relayed_give_ups = relayed_give_ups

    def classify(self, code, pushback: Pushback = NO_PUSHBACK) -> Verdict:
        cls = classify(code)
        if cls is StatusClass.OK:
            return Verdict.SUCCESS
        if cls is not StatusClass.SERVER_FAULT:
            return Verdict.IGNORED
        if pushback.stop and self.relayed_give_ups == "ignore":
            return Verdict.IGNORED
        return Verdict.FAILURE

    def __repr__(self) -> str:
        return f"OutcomeClassifier(relayed_give_ups={self.relayed_give_ups!r})"


#: The default: server faults are failures, relayed give-ups are not.
DEFAULT_CLASSIFIER = OutcomeClassifier()
