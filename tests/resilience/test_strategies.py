"""Unit tests with a fake clock and seeded randoms: backoff bounds, budget arithmetic, retry rules."""

from __future__ import annotations

import random

import pytest

from harness.resilience import backoff
from harness.resilience.budget import RetryBudget, Unlimited
from harness.resilience.retry import MAX_ATTEMPTS_CAP, Pushback, RetryPolicy, parse_pushback


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# -- backoff ------------------------------------------------------------------------------------
def test_no_backoff_retries_at_once():
    assert backoff.NoBackoff()(3, 0.5) == 0.0


def test_exponential_doubles_up_to_the_cap():
    b = backoff.Exponential(base=0.1, cap=1.0)
    assert [b(n, 0) for n in range(1, 6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0])
    assert b(10_000, 0) == 1.0  # huge attempt numbers never overflow


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_full_jitter_stays_within_zero_and_the_capped_exponential(seed):
    b = backoff.FullJitter(base=0.025, cap=0.3, rng=random.Random(seed))
    for n in range(1, 8):
        bound = min(0.3, 0.025 * 2 ** (n - 1))
        draws = [b(n, 0) for _ in range(500)]
        assert all(0.0 <= d <= bound for d in draws)
        # spread over the whole interval, not clustered at one end
        assert min(draws) < 0.1 * bound and max(draws) > 0.9 * bound


def test_full_jitter_is_reproducible_with_a_seed():
    a = backoff.FullJitter(0.05, 1.0, rng=random.Random(42))
    b = backoff.FullJitter(0.05, 1.0, rng=random.Random(42))
    assert [a(n, 0) for n in range(1, 6)] == [b(n, 0) for n in range(1, 6)]


def test_decorrelated_jitter_bounds():
    b = backoff.Decorrelated(base=0.01, cap=0.5, rng=random.Random(7))
    prev = 0.0
    for n in range(1, 200):
        sleep = b(n, prev)
        low, high = 0.01, min(0.5, max(0.01, (prev or 0.01) * 3))
        assert low <= sleep <= high
        prev = sleep


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ({"kind": "none"}, backoff.NoBackoff),
        ({"kind": "exponential"}, backoff.Exponential),
        ({"kind": "full_jitter"}, backoff.FullJitter),
        ({"kind": "decorrelated"}, backoff.Decorrelated),
        ({"kind": "fixed", "delay_s": 0.2}, backoff.Fixed),
    ],
)
def test_backoff_built_from_config(spec, kind):
    assert isinstance(backoff.build(spec), kind)


def test_unknown_backoff_is_refused():
    with pytest.raises(ValueError):
        backoff.build({"kind": "equal_jitter"})


# -- retry budget --------------------------------------------------------------------------------
def test_budget_allows_ten_percent_of_requests():
    clock = FakeClock()
    budget = RetryBudget(ratio=0.1, min_retries_per_s=0.0, window_s=10.0, clock=clock)
    for _ in range(200):
        budget.record_request()
    granted = sum(budget.try_acquire() for _ in range(50))
    assert granted == 20


def test_budget_floor_allows_retries_when_quiet():
    clock = FakeClock()
    budget = RetryBudget(ratio=0.1, min_retries_per_s=1.0, window_s=10.0, burst_s=10.0, clock=clock)
    budget.record_request()  # 10% of one request is 0.1 retries: the floor (1/s × 10 s) wins
    assert sum(budget.try_acquire() for _ in range(30)) == 10


def test_budget_floor_is_spread_over_the_burst_window():
    clock = FakeClock()
    budget = RetryBudget(ratio=0.1, min_retries_per_s=1.0, window_s=10.0, burst_s=1.0, clock=clock)
    budget.record_request()
    granted = []
    for _ in range(12):  # one try per second: the floor's 1/s, never its 10 at once
        granted.append(sum(budget.try_acquire() for _ in range(5)))
        clock.advance(1.0)
    assert granted == [1] * 12  # with burst_s = window_s the first second would take all 10


def test_budget_floor_is_a_floor_not_an_addition():
    clock = FakeClock()
    budget = RetryBudget(ratio=0.1, min_retries_per_s=1.0, window_s=10.0, clock=clock)
    for _ in range(1000):
        budget.record_request()
    assert sum(budget.try_acquire() for _ in range(500)) == 100  # max(100, 10), not 110


def test_budget_refusal_takes_nothing():
    clock = FakeClock()
    budget = RetryBudget(ratio=0.1, min_retries_per_s=0.0, window_s=10.0, clock=clock)
    for _ in range(10):
        budget.record_request()
    assert budget.try_acquire() is True
    assert budget.try_acquire() is False
    for _ in range(10):
        budget.record_request()
    assert budget.try_acquire() is True  # 20 requests → 2 retries, one was taken


def test_budget_window_slides():
    clock = FakeClock()
    budget = RetryBudget(ratio=0.1, min_retries_per_s=0.0, window_s=10.0, clock=clock)
    for _ in range(100):
        budget.record_request()
    assert sum(budget.try_acquire() for _ in range(20)) == 10
    clock.advance(5.0)
    assert budget.try_acquire() is False  # still in the window
    clock.advance(5.5)
    # both the requests and the retries have left the window
    assert budget.try_acquire() is False
    for _ in range(30):
        budget.record_request()
    assert sum(budget.try_acquire() for _ in range(20)) == 3


def test_budget_ratio_must_be_a_share():
    with pytest.raises(ValueError):
        RetryBudget(ratio=1.5)


def test_unlimited_budget_never_refuses():
    budget = Unlimited()
    assert all(budget.try_acquire() for _ in range(1000))


# -- retry policy and pushback -------------------------------------------------------------------
def test_max_attempts_is_capped_at_five():
    assert RetryPolicy(max_attempts=9).max_attempts == MAX_ATTEMPTS_CAP


def test_non_idempotent_methods_are_never_retried():
    p = RetryPolicy(max_attempts=5, non_idempotent=frozenset({"Write", "other.v1.Echo/Shout"}))
    assert not p.retryable("drill.v1.Demo/Write", "UNAVAILABLE", 1)
    assert not p.retryable("/other.v1.Echo/Shout", "UNAVAILABLE", 1)
    assert p.retryable("drill.v1.Demo/Call", "UNAVAILABLE", 1)
    assert p.retryable("other.v1.Echo/Say", "UNAVAILABLE", 1)


def test_no_method_is_guessed_non_idempotent():
    assert RetryPolicy(max_attempts=5).retryable("drill.v1.Demo/Write", "UNAVAILABLE", 1)


def test_only_configured_codes_are_retried():
    p = RetryPolicy(max_attempts=5)
    assert not p.retryable("Call", "DEADLINE_EXCEEDED", 1)
    assert not p.retryable("Call", "INTERNAL", 1)
    assert RetryPolicy(max_attempts=5, codes=frozenset({"INTERNAL"})).retryable("Call", "INTERNAL", 1)


def test_attempts_stop_at_the_maximum():
    p = RetryPolicy(max_attempts=3)
    assert p.retryable("Call", "UNAVAILABLE", 2)
    assert not p.retryable("Call", "UNAVAILABLE", 3)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("250", Pushback(sleep_s=0.25)),
        ("0", Pushback(sleep_s=0.0)),
        ("-1", Pushback(stop=True)),
        ("x", Pushback(stop=True)),
    ],
)
def test_pushback_parsing(value, expected):
    assert parse_pushback((("grpc-retry-pushback-ms", value),)) == expected


def test_pushback_stop_forbids_a_retry_unless_ignored():
    stop = Pushback(stop=True)
    assert not RetryPolicy(max_attempts=3).retryable("Call", "UNAVAILABLE", 1, stop)
    assert RetryPolicy(max_attempts=3, honour_pushback=False).retryable("Call", "UNAVAILABLE", 1, stop)
    assert parse_pushback(()) == Pushback()
