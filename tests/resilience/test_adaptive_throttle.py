"""Client-side adaptive throttling (SRE book, "Handling Overload") against its formula, then in the caller.

p = max(0, (requests − K·accepts) / (requests + 1)), K = 2, over a sliding window. The window is
the same `SlidingCounter` the budget uses: 10 slices of window/10 seconds, an event counts while
its slice is one of the last 10 (the current one included). The test keeps its own event list
and counts it by that rule, so every expected value below is the formula on the test's counts.
"""

from __future__ import annotations

import math
import random

import pytest

from harness.resilience import from_dict
from harness.resilience.throttle import AdaptiveThrottle
from tests.conftest import sample, sample_sum

from .test_references import Fleet, caller, config, outcome, run, unavailable
from .test_strategies import FakeClock

GIVE_UP = (("grpc-retry-pushback-ms", "-1"),)


class ScriptedRandom(random.Random):
    """`random()` answers from a list (cycled): the throttle's draws are given, not drawn."""

    def __init__(self, values: list[float]) -> None:
        super().__init__(0)
        self.values, self.i = values, 0

    def peek(self) -> float:
        """The value the next `random()` will answer."""
        return self.values[self.i % len(self.values)]

    def random(self) -> float:
        value = self.peek()
        self.i += 1
        return value


def expected(events: list[tuple[float, str]], now: float, k: float = 2.0, window: float = 10.0) -> float:
    slice_s = window / 10
    low = math.floor(now / slice_s) - 9
    live = [kind for t, kind in events if math.floor(t / slice_s) >= low]
    requests, accepts = live.count("request"), live.count("accept")
    return max(0.0, (requests - k * accepts) / (requests + 1))


def test_reject_probability_follows_the_formula_over_a_scripted_sequence():
    clock = FakeClock(now=100.0)
    draws = [0.05, 0.5, 0.95, 0.3, 0.7]
    drawn = ScriptedRandom(draws)
    throttle = AdaptiveThrottle(k=2.0, window_s=10.0, clock=clock, rng=drawn)
    events: list[tuple[float, str]] = []
    # a healthy backend (every request accepted), then one failing 3 in 4, then one that recovers
    script = [("healthy", 0.0)] * 200 + [("failing", 0.75)] * 400 + [("healthy", 0.0)] * 800
    rng = random.Random(22)
    checked = rejected = positive = 0
    for i, (_, fail_share) in enumerate(script):
        clock.now = 100.0 + i * 0.025  # 40 requests/s
        p = expected(events, clock.now)
        assert throttle.reject_probability() == pytest.approx(p, abs=1e-12)
        draw = drawn.peek()  # the draw allow() is about to use
        allowed = throttle.allow()
        events.append((clock.now, "request"))
        assert allowed is not (p > 0 and draw < p)  # reject exactly when the draw falls below p
        checked += 1
        positive += p > 0
        if not allowed:
            rejected += 1
            continue
        if rng.random() >= fail_share:
            throttle.record(accepted=True)
            events.append((clock.now, "accept"))
        else:
            throttle.record(accepted=False)
    assert checked == 1400
    assert positive > 100 and rejected > 50  # the failing stretch did throttle
    assert expected(events, clock.now) == 0.0  # and the recovery brought p back to 0 within a window


def test_nothing_is_rejected_while_the_backend_accepts_half():
    clock = FakeClock()
    throttle = AdaptiveThrottle(k=2.0, clock=clock, rng=ScriptedRandom([0.0]))  # any p > 0 would reject
    for i in range(1000):
        clock.advance(0.01)
        assert throttle.allow()
        throttle.record(accepted=i % 2 == 0)
    assert throttle.reject_probability() == 0.0


@pytest.mark.parametrize("k", [0.5, 0])
def test_k_below_one_is_refused(k):
    with pytest.raises(Exception, match=r"adaptiveThrottling\.k"):
        from_dict({"name": "x", "adaptiveThrottling": {"k": k}})


def _throttled(name: str):
    return config(name, adaptiveThrottling={"k": 2, "window": "10s"}, retry={"maxAttempts": 2})


def test_the_caller_rejects_locally_once_its_backend_fails_and_counts_the_rejections():
    cfg = _throttled("t22-adaptive")
    fleet = Fleet({"ledger": [unavailable()]})
    c = caller(["ledger"], cfg, fleet, service="t22-adaptive")
    before = sample_sum("drill_fail_fast_total", service="t22-adaptive", reason="throttle")
    codes = [run(outcome(c)) for _ in range(200)]
    rejected = sample_sum("drill_fail_fast_total", service="t22-adaptive", reason="throttle") - before
    assert codes == ["UNAVAILABLE"] * 200
    # every attempt fails, so p = R/(R+1) → 1: almost nothing reaches the backend after the first few
    assert rejected >= 150
    assert len(fleet.calls) + rejected >= 200  # each call either went out or was rejected before it could
    p = sample("drill_adaptive_throttle_reject_probability", service="t22-adaptive", config="t22-adaptive")
    assert p == pytest.approx(c.adaptive.reject_probability()) and p > 0.9


def test_relayed_give_ups_are_accepts_for_the_throttle():
    """A backend relaying its dependency's give-up did its job: the throttle in front of it stays open."""
    cfg = _throttled("t22-adaptive-relay")
    fleet = Fleet({"account": [unavailable(GIVE_UP)]})
    c = caller(["account"], cfg, fleet, service="t22-adaptive-relay")
    for _ in range(200):
        run(outcome(c))
    assert len(fleet.calls) == 200 and c.adaptive.reject_probability() == 0.0
