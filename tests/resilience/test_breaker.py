"""Every circuit breaker transition, with a fake clock (resilience4j's semantics, issue 22)."""

from __future__ import annotations

import random

import pytest

from harness.resilience import config as rconfig
from harness.resilience.breaker import BreakerSet, CircuitBreaker, CountWindow, State, TimeWindow
from harness.resilience.outcome import Verdict

from .test_strategies import FakeClock


def make(clock, **kw):
    transitions: list[tuple[State, State]] = []
    defaults = dict(failure_rate=0.5, min_calls=4, window=CountWindow(10), open_s=5.0, half_open_probes=2)
    defaults.update(kw)
    breaker = CircuitBreaker(clock=clock, on_transition=lambda a, b: transitions.append((a, b)), **defaults)
    return breaker, transitions


def test_stays_closed_below_the_minimum_number_of_calls():
    b, t = make(FakeClock())
    for _ in range(3):
        assert b.allow()
        b.record("UNAVAILABLE")
    assert b.state is State.CLOSED and t == []


def test_closed_to_open_at_the_failure_rate():
    b, t = make(FakeClock())
    for code in ("OK", "OK", "UNAVAILABLE"):
        b.record(code)
    assert b.state is State.CLOSED  # 1/3, and below min calls
    b.record("INTERNAL")  # 2/4 = 50%
    assert b.state is State.OPEN
    assert t == [(State.CLOSED, State.OPEN)]


def test_stays_closed_below_the_failure_rate():
    b, _ = make(FakeClock())
    for code in ("OK", "OK", "OK", "UNAVAILABLE", "OK", "UNAVAILABLE"):
        b.record(code)
    assert b.state is State.CLOSED


def test_open_rejects_until_the_wait_is_over_then_half_opens():
    clock = FakeClock()
    b, t = make(clock)
    for _ in range(4):
        b.record("UNAVAILABLE")
    assert not b.allow()
    clock.advance(4.9)
    assert not b.allow()
    clock.advance(0.2)
    assert b.allow()
    assert b.state is State.HALF_OPEN
    assert t[-1] == (State.OPEN, State.HALF_OPEN)


def _half_open(clock, **kw):
    b, t = make(clock, **kw)
    for _ in range(4):
        b.record("UNAVAILABLE")
    clock.advance(5.0)
    return b, t


def test_half_open_admits_a_limited_number_of_probes():
    clock = FakeClock()
    b, _ = _half_open(clock)
    assert b.allow() and b.allow()
    assert not b.allow()


def test_half_open_to_closed_after_successful_probes():
    clock = FakeClock()
    b, t = _half_open(clock)
    assert b.allow() and b.allow()
    b.record("OK")
    assert b.state is State.HALF_OPEN
    b.record("OK")
    assert b.state is State.CLOSED
    assert t[-1] == (State.HALF_OPEN, State.CLOSED)
    # the window starts afresh: old failures do not reopen it
    b.record("UNAVAILABLE")
    assert b.state is State.CLOSED


def test_half_open_to_open_on_a_failed_probe():
    clock = FakeClock()
    b, t = _half_open(clock)
    assert b.allow()
    b.record("UNAVAILABLE")
    assert b.state is State.OPEN
    assert t[-1] == (State.HALF_OPEN, State.OPEN)
    assert not b.allow()  # the wait starts again
    clock.advance(5.0)
    assert b.allow()


@pytest.mark.parametrize("code", ["CANCELLED", "INVALID_ARGUMENT", "NOT_FOUND", "PERMISSION_DENIED", "ABORTED"])
def test_cancelled_and_client_faults_are_not_failures(code):
    b, t = make(FakeClock())
    for _ in range(20):
        b.record(code)
    assert b.state is State.CLOSED and t == []
    assert b.window.counts() == (0, 0)


def test_ignored_outcome_gives_back_a_half_open_probe():
    clock = FakeClock()
    b, _ = _half_open(clock, half_open_probes=1)
    assert b.allow()
    assert not b.allow()
    b.record("CANCELLED")
    assert b.state is State.HALF_OPEN
    assert b.allow()


def test_count_window_forgets_old_outcomes():
    b, _ = make(FakeClock(), window=CountWindow(4), min_calls=4)
    for code in ("UNAVAILABLE", "OK", "OK", "OK", "OK", "UNAVAILABLE"):
        b.record(code)
    assert b.window.counts() == (4, 1)
    assert b.state is State.CLOSED


def test_time_window_forgets_old_outcomes():
    clock = FakeClock()
    b, _ = make(clock, window=TimeWindow(10, clock=clock), min_calls=4)
    for _ in range(3):
        b.record("UNAVAILABLE")
    clock.advance(11)
    b.record("UNAVAILABLE")
    assert b.window.counts() == (1, 1)
    assert b.state is State.CLOSED
    for _ in range(3):
        b.record("UNAVAILABLE")
    assert b.state is State.OPEN


def test_breakers_per_backend_or_per_service():
    per_backend = BreakerSet(lambda key: CircuitBreaker(), "backend")
    assert per_backend.for_backend("a") is not per_backend.for_backend("b")
    per_service = BreakerSet(lambda key: CircuitBreaker(), "service")
    assert per_service.for_backend("a") is per_service.for_backend("b")
    with pytest.raises(ValueError):
        BreakerSet(lambda key: CircuitBreaker(), "region")


# -- issue 22: a failure mix below the threshold never opens it; half-open judges a rate --------------
def _mix(order: str, seconds: int = 30, rate: int = 50) -> list[bool]:
    """`seconds` of `rate` outcomes/s, one in five a failure (True), in a given arrival order per second."""
    failures = rate // 5
    out: list[bool] = []
    for sec in range(seconds):
        second = [True] * failures + [False] * (rate - failures)  # "bursts": a second's failures arrive together
        if order == "interleaved":
            second = [i % 5 == 4 for i in range(rate)]
        elif order.startswith("shuffled"):
            random.Random(f"{order}-{sec}").shuffle(second)
        out += second
    return out


@pytest.mark.parametrize("order", ["bursts", "interleaved", *(f"shuffled-{seed}" for seed in range(5))])
def test_a_closed_breaker_stays_closed_for_30_s_under_a_20_percent_failure_mix(order):
    """The shipped `resilient` breaker (50 %): 30 s of calls at 50/s, 20 % failing (a drill's share of traffic).

    The old breaker (window 50, judged from its 20th call) opened on the `bursts` order at its
    20th call: 10 failures then 10 successes is 50 % of the first 20, a verdict on which calls came
    first. The shipped one judges the last 10 s once at least 100 calls are in it (resilience4j's
    minimumNumberOfCalls): any 100 calls here span two seconds, 20 failures among them.
    """
    clock = FakeClock()
    transitions: list = []
    breakers = rconfig.load("resilient").build_breakers(lambda key: lambda a, b: transitions.append((a, b)), clock)
    b = breakers.for_backend("ledger")
    for failed in _mix(order):
        clock.advance(1 / 50)
        assert b.allow()
        b.record(Verdict.FAILURE if failed else Verdict.SUCCESS)
    assert b.state is State.CLOSED and transitions == []


@pytest.mark.parametrize("phase", range(5))
def test_half_open_closes_on_a_healthy_backend_whichever_calls_come_first(phase):
    """After an outage the backend serves everyone but a tenant (1 call in 5 fails): the probes must close it.

    Half-open lets 10 calls through and compares their failure rate with the same 50 % threshold
    (resilience4j's permittedNumberOfCallsInHalfOpenState). The old rule (3 probes, any failure
    reopens) reopened in the 3 of 5 phases where a failing call was among the first three.
    """
    clock = FakeClock()
    b = rconfig.load("resilient").build_breakers(clock=clock).for_backend("ledger")
    for _ in range(100):
        b.record(Verdict.FAILURE)  # the outage
    assert b.state is State.OPEN
    clock.advance(b.open_s)
    mix = [(i + phase) % 5 == 4 for i in range(200)]
    for failed in mix:
        if b.allow():
            b.record(Verdict.FAILURE if failed else Verdict.SUCCESS)
        clock.advance(1 / 50)
    assert b.state is State.CLOSED


def test_half_open_reopens_as_soon_as_the_probes_cannot_close_it():
    clock = FakeClock()
    b, t = make(clock, half_open_probes=10, min_calls=4)
    for _ in range(4):
        b.record("UNAVAILABLE")
    clock.advance(5.0)
    assert all(b.allow() for _ in range(10)) and not b.allow()
    for code in ("OK", "UNAVAILABLE", "OK", "UNAVAILABLE", "UNAVAILABLE", "UNAVAILABLE"):
        b.record(code)
    assert b.state is State.HALF_OPEN  # 4 of 10 failed so far: the last 4 probes could still close it
    b.record("UNAVAILABLE")
    assert b.state is State.OPEN  # 5 of 10 failed: 50 % whatever the last 3 do
    assert t[-1] == (State.HALF_OPEN, State.OPEN)


def test_half_open_closes_as_soon_as_the_probes_cannot_reopen_it():
    clock = FakeClock()
    b, _ = make(clock, half_open_probes=10, min_calls=4)
    for _ in range(4):
        b.record("UNAVAILABLE")
    clock.advance(5.0)
    for _ in range(10):
        b.allow()
    for _ in range(5):
        b.record("OK")
    assert b.state is State.HALF_OPEN  # 5 more failures would still make 50 %
    b.record("OK")
    assert b.state is State.CLOSED  # at most 4 of 10 can fail now
