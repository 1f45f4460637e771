"""Every circuit breaker transition, with a fake clock."""

from __future__ import annotations

import pytest

from harness.resilience.breaker import BreakerSet, CircuitBreaker, CountWindow, State, TimeWindow

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
