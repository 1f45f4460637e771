"""Unit tests: peak EWMA, round robin, P2C, ejection, timeouts, deadline helpers."""

from __future__ import annotations

import random

import pytest

from harness.resilience.balancer import Balancer, Ejection, PeakEwma, PowerOfTwoChoices, RoundRobin
from harness.resilience.deadline import DeadlinePolicy, EarlyGiveUp, outgoing_timeout
from harness.resilience.timeouts import FixedTimeout, MethodTimeouts, NoTimeout, P99Timeout

from .test_strategies import FakeClock


# -- balancing -----------------------------------------------------------------------------------
def test_peak_ewma_jumps_up_and_decays_down():
    clock = FakeClock()
    e = PeakEwma(decay_s=10.0, clock=clock)
    e.observe(0.01)
    e.observe(0.3)
    assert e.value == 0.3  # peak: at once
    clock.advance(10.0)
    e.observe(0.01)
    assert 0.1 < e.value < 0.12  # 0.3·e^-1 + 0.01·(1 − e^-1) ≈ 0.117


def test_round_robin_takes_turns():
    b = Balancer(["a", "b", "c"], RoundRobin())
    assert [b.pick().address for _ in range(6)] == ["a", "b", "c", "a", "b", "c"]


def test_p2c_prefers_the_cheaper_of_two():
    clock = FakeClock()
    b = Balancer(["fast", "slow"], PowerOfTwoChoices(random.Random(1)), clock=clock)
    fast, slow = b.backends
    fast.ewma.observe(0.002)
    slow.ewma.observe(0.3)
    assert all(b.pick().address == "fast" for _ in range(50))


def test_p2c_cost_counts_inflight_calls():
    b = Balancer(["a", "b"], PowerOfTwoChoices(random.Random(1)))
    a, other = b.backends
    a.ewma.observe(0.01)
    other.ewma.observe(0.015)
    for _ in range(3):
        b.started(a)  # 0.01 × 4 > 0.015 × 1
    assert b.pick().address == "b"


def test_unmeasured_backend_with_calls_in_flight_is_not_free():
    b = Balancer(["silent", "known"], PowerOfTwoChoices(random.Random(1)))
    silent, known = b.backends
    known.ewma.observe(0.05)
    b.started(silent)
    assert silent.cost() > known.cost()


def test_p2c_with_four_backends_picks_the_slow_two_only_when_both_are_drawn():
    rng = random.Random(3)
    b = Balancer(["f1", "f2", "s1", "s2"], PowerOfTwoChoices(rng))
    for backend in b.backends:
        backend.ewma.observe(0.3 if backend.address.startswith("s") else 0.002)
    picks = [b.pick().address for _ in range(6000)]
    share = sum(p.startswith("s") for p in picks) / len(picks)
    assert 0.13 < share < 0.20  # 1/6 of the pairs are both slow


def test_consecutive_failures_eject_for_a_while():
    clock = FakeClock()
    b = Balancer(["a", "b"], RoundRobin(), clock=clock, ejection=Ejection(consecutive_failures=3, base_s=10))
    a = b.backends[0]
    for _ in range(3):
        b.started(a)
        b.finished(a, 0.001, "UNAVAILABLE")
    assert [x.address for x in b.available()] == ["b"]
    clock.advance(10.0)
    assert len(b.available()) == 2


def test_client_faults_and_cancellations_do_not_eject():
    clock = FakeClock()
    b = Balancer(["a", "b"], RoundRobin(), clock=clock, ejection=Ejection(consecutive_failures=2))
    a = b.backends[0]
    for code in ("CANCELLED", "NOT_FOUND", "CANCELLED", "INVALID_ARGUMENT"):
        b.finished(a, 0.001, code)
    assert len(b.available()) == 2


def test_latency_outlier_is_ejected_but_never_more_than_max_percent():
    clock = FakeClock()
    ej = Ejection(consecutive_failures=0, latency_factor=5.0, min_latency_s=0.05, max_percent=50)
    b = Balancer(["f1", "f2", "s1", "s2", "s3"], RoundRobin(), clock=clock, ejection=ej)
    for backend in b.backends[:2]:
        b.finished(backend, 0.005, "OK")
    for backend in b.backends[2:]:
        b.finished(backend, 0.3, "OK")
    assert sum(1 for x in b.available()) == 3  # 2 of 5 ejected (40%); a third would pass 50%


def test_ejected_backends_are_not_picked_and_none_left_means_none():
    clock = FakeClock()
    b = Balancer(["a"], RoundRobin(), clock=clock)
    b.backends[0].ejected_until = clock() + 5
    assert b.pick() is None


# -- timeouts ------------------------------------------------------------------------------------
def test_p99_timeout_is_clamped_and_cold_starts_at_the_cap():
    t = P99Timeout(factor=1.5, floor_s=0.05, cap_s=1.0, window=100, min_samples=10)
    assert t.timeout() == 1.0
    for _ in range(99):
        t.observe(0.1)
    t.observe(0.4)
    assert t.timeout() == pytest.approx(0.15)  # p99 of 100 samples is the 99th: 0.1 × 1.5
    for _ in range(5):
        t.observe(0.4)
    assert t.timeout() == pytest.approx(0.6)
    for _ in range(100):
        t.observe(0.001)
    assert t.timeout() == 0.05  # the floor
    for _ in range(100):
        t.observe(5.0)
    assert t.timeout() == 1.0  # the cap


def test_timeouts_are_per_method():
    mt = MethodTimeouts({"kind": "fixed", "seconds": 1.0}, {"Call": {"kind": "p99", "cap_s": 2.0}})
    assert isinstance(mt.for_method("drill.v1.Demo/Call"), P99Timeout)
    assert isinstance(mt.for_method("drill.v1.Demo/Write"), FixedTimeout)
    assert isinstance(MethodTimeouts().for_method("Call"), NoTimeout)
    assert mt.for_method("drill.v1.Demo/Call") is mt.for_method("drill.v1.Demo/Call")


# -- deadlines -----------------------------------------------------------------------------------
def test_unbounded_remaining_is_never_passed_on():
    assert outgoing_timeout(None, 0.01) is None
    assert outgoing_timeout(1e12, 0.01) is None
    assert outgoing_timeout(float("nan"), 0.01) is None
    assert outgoing_timeout(None, 0.01, cap_s=2.0) == 2.0


def test_outgoing_timeout_shaves_the_hop_margin():
    assert outgoing_timeout(0.5, 0.01) == pytest.approx(0.49)
    assert outgoing_timeout(0.5, 0.01, cap_s=0.2) == 0.2


def test_early_give_up_below_the_minimum():
    with pytest.raises(EarlyGiveUp):
        outgoing_timeout(0.012, 0.01, min_remaining_s=0.005)
    with pytest.raises(EarlyGiveUp):
        outgoing_timeout(-0.1, 0.0)


def test_policy_takes_the_tightest_budget():
    p = DeadlinePolicy(propagate=True, hop_margin_s=0.01, total_s=2.0)
    assert p.call_budget(None) == 2.0
    assert p.call_budget(0.5) == pytest.approx(0.49)
    assert p.call_budget(0.5, explicit_s=0.1) == 0.1
    assert DeadlinePolicy(propagate=False, total_s=None).call_budget(0.5) is None
