"""No burst from saved retries: the first 2 s after fault-on cost what the steady state allows, no more.

Issue 22's arithmetic, at account→ledger in the retry-storm plan as the issue measured it (the
plan now sends 20 drill calls/s; the rule is the same at any mix): 40 organic + 10 drill first
attempts/s; once the fault is on the 10 drill calls fail on every attempt. A 10 % budget allows
5 retries/s, so a drill call costs at most (10 + 5) / 10 = 1.5 attempts. On the old budget a quiet
10-s warm-up banked 50 retries and the first failing second spent them: 3 attempts per drill call.

Deterministic: a fake clock, a scripted schedule (every 5th first attempt is a drill call, 20 ms
apart), nothing sleeps.
"""

from __future__ import annotations

import random

import pytest

from harness.resilience import ResilientCaller
from harness.resilience import config as rconfig

from .test_references import METHOD, run, unavailable
from .test_strategies import FakeClock

RATE = 50  # first attempts per second at account→ledger: 40 organic + 10 drill (the mix)
WARMUP_S, FAULT_ON = 10.0, 1010.0  # the fake clock starts at 1000
#: steady state a 10 % budget allows: (drill calls + 10 % of all first attempts) ÷ drill calls
STEADY = (10 + 0.1 * RATE) / 10


def schedule(until_s: float):
    """(time, is_drill) of every first attempt from the clock's start, 20 ms apart, every 5th a drill call."""
    n = int((WARMUP_S + until_s) * RATE)
    return [(1000.0 + i / RATE, i % 5 == 4) for i in range(n)]


@pytest.mark.parametrize("name", ["budget", "resilient"])
def test_the_budget_does_not_fund_a_burst_after_a_quiet_warm_up(name):
    """The shipped budget alone: retries a failing drill call would want, granted in the first 2 s."""
    cfg = rconfig.load(name)
    clock = FakeClock()
    budget = cfg.build_budget(clock=clock)
    retries_wanted = cfg.retry.max_attempts - 1
    attempts = drill_calls = 0
    for t, drill in schedule(2.0):
        clock.now = t
        budget.record_request()
        if t < FAULT_ON or not drill:
            continue  # organic calls and the warm-up succeed: no retry wanted
        drill_calls += 1
        attempts += 1 + sum(budget.try_acquire() for _ in range(retries_wanted))  # each retry fails too
    assert drill_calls == 20
    assert attempts / drill_calls <= STEADY  # old budget: 3.0 (resilient), 3.5 (budget): the bank's burst


@pytest.mark.parametrize("name", ["budget", "resilient"])
def test_the_caller_sends_no_burst_to_a_failing_dependency_after_fault_on(name):
    """The same schedule through `ResilientCaller` (fake invoke): ledger attempts per drill call, first 2 s."""
    clock = FakeClock()
    sent: list[tuple[float, bytes]] = []

    async def ledger(target, request, timeout, metadata):
        sent.append((clock.now, request))
        if request == b"drill" and clock.now >= FAULT_ON:
            raise unavailable()
        return b"ok"

    async def no_sleep(seconds: float) -> None:
        pass  # time stands still within a call: the test is about counts, not spacing

    c = ResilientCaller(
        ["ledger"], rconfig.load(name), {METHOD: ledger}, service=f"t22-burst-{name}",
        rng=random.Random(5), sleep=no_sleep, clock=clock,
    )  # fmt: skip

    async def go():
        for t, drill in schedule(2.0):
            clock.now = t
            try:
                await c.call(METHOD, b"drill" if drill else b"organic")
            except Exception:  # noqa: BLE001 - the drill's failures are the point
                pass

    run(go())
    in_window = [r for t, r in sent if FAULT_ON <= t < FAULT_ON + 2.0]
    drill_attempts = sum(r == b"drill" for r in in_window)
    assert sum(r == b"organic" for r in in_window) == 80  # every organic call went out once
    assert drill_attempts / 20 <= STEADY


def test_the_burst_window_can_be_opened_to_the_banked_behaviour():
    """`burstWindow: 10s` (= window) is Finagle's bank: the test above then sees the burst."""
    raw = {
        "name": "banked",
        "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.1s", "backoffMultiplier": 2,
                        "retryableStatusCodes": ["UNAVAILABLE"]},
        "retryBudget": {"ratio": 0.1, "window": "10s", "burstWindow": "10s"},
    }  # fmt: skip
    clock = FakeClock()
    budget = rconfig.from_dict(raw).build_budget(clock=clock)
    attempts = 0
    for t, drill in schedule(2.0):
        clock.now = t
        budget.record_request()
        if t >= FAULT_ON and drill:
            attempts += 1 + sum(budget.try_acquire() for _ in range(2))
    assert attempts / 20 == 3.0  # every drill call retried twice: 40 retries from the warm-up's bank


def test_a_burst_window_longer_than_the_window_is_refused():
    with pytest.raises(rconfig.ConfigError, match=r"retryBudget\.burstWindow"):
        rconfig.from_dict({"name": "x", "retryBudget": {"ratio": 0.1, "window": "1s", "burstWindow": "2s"}})
