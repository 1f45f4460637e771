"""The attempt loop's vocabulary: a logical call as its strategies see it, one attempt's outcome, three questions.

`ResilientCaller` owns the loop and only asks; each strategy answers the questions
that are its job (tenacity's `stop`/`wait`/`retry` split):

- `allow(call)` — may the next attempt go out now? (deadline, adaptive throttle, budget)
- `on_outcome(call, backend, outcome)` — learn from an attempt that went out
  (breaker, balancer, timeouts, throttles, expected latency)
- `delay(call, outcome, sleep_s)` — after a failure: how long until the next attempt,
  or None for no next attempt. The retry schedule proposes a sleep (pushback or
  backoff); the deadline, the token bucket and the budget may only refuse it.

A strategy that refuses names why (`refusal`): that is the `reason` label of
`drill_fail_fast_total`, or `budget`/`throttling` for `drill_retry_budget_exhausted_total`.
Pure: nothing here imports grpc; codes are status names.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from harness.core.status import status_name
from harness.resilience.budget import RetryBudget, RetryThrottle, Unlimited
from harness.resilience.deadline import DeadlinePolicy
from harness.resilience.outcome import Verdict
from harness.resilience.retry import NO_PUSHBACK, Pushback, RetryPolicy
from harness.resilience.throttle import AdaptiveThrottle
from harness.resilience.timeouts import LatencyWindow

#: refusal labels counted as `drill_retry_budget_exhausted_total` (the others are fail-fast reasons)
BUDGET_REFUSALS = frozenset({"budget", "throttling"})


@dataclasses.dataclass
class CallState:
    """One logical call as its strategies see it. `attempts` = attempts sent so far (0 before the first)."""

    method: str
    #: monotonic time by which the logical call must end (None = no deadline)
    deadline: float | None = None
    attempts: int = 0
    tried: set[str] = dataclasses.field(default_factory=set)
    #: retries since the call began or since the last pushback (A6 resets the backoff there)
    backoff_n: int = 0
    previous_sleep: float = 0.0

    @property
    def retry(self) -> bool:
        """Whether the attempt being asked about is a retry."""
        return self.attempts > 0


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one attempt that went out came back with."""

    code: str
    verdict: Verdict
    rtt: float = 0.0
    pushback: Pushback = NO_PUSHBACK
    #: cut off by its own per-try timeout (not by the call's deadline)
    per_try_timeout: bool = False

    @property
    def ok(self) -> bool:
        return self.code == "OK"


class Strategy:
    """Every question with its permissive answer; a strategy overrides the ones that are its job."""

    refusal = ""

    def allow(self, call: CallState) -> bool:
        return True

    def on_outcome(self, call: CallState, backend: str, outcome: Outcome) -> None:
        pass

    def delay(self, call: CallState, outcome: Outcome, sleep_s: float) -> float | None:
        return sleep_s


class RetrySchedule(Strategy):
    """Whether the policy retries this failure, and after how long: the server's pushback, else the backoff."""

    def __init__(self, policy: RetryPolicy, backoff: Callable[[int, float], float]) -> None:
        self.policy, self.backoff = policy, backoff

    def delay(self, call: CallState, outcome: Outcome, sleep_s: float) -> float | None:
        p = self.policy
        if not p.retryable(call.method, outcome.code, call.attempts, outcome.pushback,
                           per_try_timeout=outcome.per_try_timeout):  # fmt: skip
            return None
        if p.honour_pushback and outcome.pushback.sleep_s is not None:
            if outcome.pushback.sleep_s > p.max_pushback_s:
                return None  # the server asks for longer than we will wait
            call.backoff_n, call.previous_sleep = 0, 0.0  # A6 (grpc core): the backoff starts again
            return outcome.pushback.sleep_s
        call.backoff_n += 1
        call.previous_sleep = self.backoff(call.backoff_n, call.previous_sleep)
        return call.previous_sleep


class DeadlineGate(Strategy):
    """No attempt without the time to finish it: the floor for a first attempt, the method's p50 for a retry."""

    refusal = "deadline"

    def __init__(self, policy: DeadlinePolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.min_remaining_s = max(policy.min_remaining_s, 0.001)
        #: recent successful latencies of the method: what a retry must still have time for
        self.latency = LatencyWindow()
        self.clock = clock

    def expected_s(self) -> float:
        return max(self.min_remaining_s, self.latency.quantile(0.5) or 0.0)

    def allow(self, call: CallState) -> bool:
        if call.deadline is None:
            return True
        need = self.expected_s() if call.retry else self.min_remaining_s
        return call.deadline - self.clock() >= need

    def on_outcome(self, call: CallState, backend: str, outcome: Outcome) -> None:
        if outcome.ok:
            self.latency.observe(outcome.rtt)

    def delay(self, call: CallState, outcome: Outcome, sleep_s: float) -> float | None:
        if call.deadline is not None and self.clock() + sleep_s + self.expected_s() > call.deadline:
            return None  # the next attempt could not finish before the deadline
        return sleep_s


class ThrottleGate(Strategy):
    """Client-side adaptive throttling asked before every attempt; accepts are what the classifier does not fail."""

    refusal = "throttle"

    def __init__(self, throttle: AdaptiveThrottle) -> None:
        self.throttle = throttle

    def allow(self, call: CallState) -> bool:
        return self.throttle.allow()

    def on_outcome(self, call: CallState, backend: str, outcome: Outcome) -> None:
        self.throttle.record(accepted=outcome.verdict is not Verdict.FAILURE)


class TokenGate(Strategy):
    """gRPC's `retryThrottling` bucket (A6): failures with a retryable code take a token, successes give back."""

    refusal = "throttling"

    def __init__(self, bucket: RetryThrottle, codes: frozenset[str]) -> None:
        self.bucket, self.codes = bucket, codes

    def on_outcome(self, call: CallState, backend: str, outcome: Outcome) -> None:
        if outcome.ok:
            self.bucket.record(failed=False)
        elif outcome.verdict is Verdict.FAILURE and (outcome.per_try_timeout or outcome.code in self.codes):
            self.bucket.record(failed=True)

    def delay(self, call: CallState, outcome: Outcome, sleep_s: float) -> float | None:
        return sleep_s if self.bucket.allows_retry() else None


class BudgetGate(Strategy):
    """The retry budget: first attempts are its requests; a retry takes a token when it is sent, not decided."""

    refusal = "budget"

    def __init__(self, budget: RetryBudget | Unlimited) -> None:
        self.budget = budget

    def allow(self, call: CallState) -> bool:
        if not call.retry:
            self.budget.record_request()
            return True
        return self.budget.try_acquire()

    def delay(self, call: CallState, outcome: Outcome, sleep_s: float) -> float | None:
        return sleep_s if self.budget.can_acquire() else None


def outcome_code(code) -> str:
    """A status as the strategies see it (`OK`, `UNAVAILABLE`, ...)."""
    return status_name(code)
