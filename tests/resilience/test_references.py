"""Issue 13: each strategy behaves like its reference (Envoy, Finagle, gRFC A6, the SRE book).

Fake invokes (no server), fake clocks and seeded randomness; one real two-backend
grpc.aio test on 127.0.0.1 for the retried per-try timeout.
"""

from __future__ import annotations

import asyncio
import random
import time

import grpc
import pytest
from grpc import aio

from harness.core import headers as h
from harness.resilience import ChannelPool, ResilientCaller, from_dict, unary_invoker
from harness.resilience.balancer import Balancer, Ejection, PowerOfTwoChoices
from harness.resilience.caller import rpc_error
from tests.conftest import sample

from .test_strategies import FakeClock

METHOD = "/t.v1.Svc/Do"
LABEL = "t.v1.Svc/Do"
RETRY = {
    "maxAttempts": 3,
    "initialBackoff": "0.1s",
    "maxBackoff": "1s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}


def config(name: str, *, timeout: str | None = "2s", retry: dict | None = None, **extra):
    entry: dict = {"name": [{}], "retryPolicy": {**RETRY, **(retry or {})}}
    if timeout is not None:
        entry["timeout"] = timeout
    return from_dict({"name": name, "methodConfig": [entry], **extra})


def unavailable(trailing=()):
    return rpc_error(grpc.StatusCode.UNAVAILABLE, "down", trailing)


class Fleet:
    """A fake invoke: per target, a list of outcomes (an exception to raise, or a reply); the last repeats."""

    def __init__(self, script: dict[str, list]) -> None:
        self.script = script
        self.calls: list[tuple[str, float | None]] = []

    async def __call__(self, target, request, timeout, metadata):
        n = sum(1 for t, _ in self.calls if t == target)
        self.calls.append((target, timeout))
        outcomes = self.script[target]
        outcome = outcomes[min(n, len(outcomes) - 1)]
        if callable(outcome) and not isinstance(outcome, BaseException):
            outcome = await outcome()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def targets(self) -> list[str]:
        return [t for t, _ in self.calls]


class Sleeps:
    """A fake `sleep` that records and returns at once."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)


def caller(targets, cfg, fleet, *, service: str, sleep=None, clock=None) -> ResilientCaller:
    return ResilientCaller(
        targets, cfg, {METHOD: fleet}, service=service, rng=random.Random(7), sleep=sleep or Sleeps(),
        clock=clock or time.monotonic,
    )  # fmt: skip


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def outcome(c: ResilientCaller, **kw) -> str:
    try:
        await c.call(METHOD, b"x", **kw)
    except aio.AioRpcError as err:
        return err.code().name
    return "OK"


# -- 1. a per-try timeout is retried, on another backend -----------------------------------------
def test_a_per_try_timeout_is_retried_on_the_other_backend_when_time_remains():
    cfg = config("t13-pertry", attemptTimeouts={"default": {"kind": "fixed", "timeout": "0.2s"}})
    fleet = Fleet({"slow": [rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "per-try")], "fast": [b"ok"]})
    c = caller(["slow", "fast"], cfg, fleet, service="t13-pertry")
    assert run(outcome(c)) == "OK"
    assert fleet.targets() == ["slow", "fast"]
    assert c.balancer.backends[0].consecutive_failures == 1  # counted as the slow backend's attempt outcome


def test_a_deadline_exceeded_that_used_up_the_call_is_not_retried():
    cfg = config("t13-calldl", timeout="0.5s", attemptTimeouts={"default": {"kind": "fixed", "timeout": "1s"}})
    fleet = Fleet({"slow": [rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "call")], "fast": [b"ok"]})
    c = caller(["slow", "fast"], cfg, fleet, service="t13-calldl")
    assert run(outcome(c)) == "DEADLINE_EXCEEDED"  # the call's own deadline was the binding one
    assert fleet.targets() == ["slow"]


def test_a_non_idempotent_method_is_not_retried_after_a_per_try_timeout():
    cfg = config(
        "t13-write", attemptTimeouts={"default": {"kind": "fixed", "timeout": "0.2s"}}, nonIdempotentMethods=["Do"]
    )
    fleet = Fleet({"slow": [rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "per-try")], "fast": [b"ok"]})
    c = caller(["slow", "fast"], cfg, fleet, service="t13-write")
    assert run(outcome(c)) == "DEADLINE_EXCEEDED" and fleet.targets() == ["slow"]


async def _bytes_server(delay_s: float):
    seen: list[float | None] = []

    async def unary(request: bytes, context: aio.ServicerContext) -> bytes:
        seen.append(context.time_remaining())
        await asyncio.sleep(delay_s)
        return b"done:" + request

    server = aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("t.v1.Svc", {"Do": grpc.unary_unary_rpc_method_handler(unary)}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}", seen


def test_real_servers_a_per_try_timeout_on_the_slow_backend_is_retried_on_the_healthy_one():
    # a 10 s call: the retry is sent and answered however long a busy box stalls between the two attempts
    cfg = config("t13-real", timeout="10s", attemptTimeouts={"default": {"kind": "fixed", "timeout": "0.2s"}})

    async def go():
        slow, slow_addr, slow_seen = await _bytes_server(5.0)
        fast, fast_addr, fast_seen = await _bytes_server(0.0)
        channels = ChannelPool(service="t13-real", config=cfg.name)
        c = ResilientCaller(
            [slow_addr, fast_addr],  # round robin: the first call goes to the slow one first
            cfg,
            {METHOD: unary_invoker(channels, METHOD)},
            service="t13-real",
            channels=channels,
            rng=random.Random(1),
        )
        try:
            reply = await c.call(METHOD, b"hi")
        except aio.AioRpcError as err:
            reply = err.code().name
        await c.close()
        await slow.stop(None)
        await fast.stop(None)
        return reply, slow_seen, fast_seen, dict(c.picks)

    reply, slow_seen, fast_seen, picks = asyncio.run(asyncio.wait_for(go(), 30))
    # the fast backend's answer is the reply: its attempt carried the rest of the call's deadline (below), so grpc
    # would have ended it DEADLINE_EXCEEDED past that deadline; no wall-clock bound (a busy box may return late)
    assert reply == b"done:hi"
    assert len(slow_seen) == 1 and len(fast_seen) == 1 and sum(picks.values()) == 2
    assert slow_seen[0] is not None and slow_seen[0] <= 0.25  # the slow one was given the per-try timeout
    assert fast_seen[0] is not None and fast_seen[0] <= 10 - 0.2 + 0.05  # the retry: what is left of the call


# -- 2. peak EWMA decays with time when read -----------------------------------------------------
def test_a_backend_slow_once_recovers_its_share_as_its_peak_ewma_decays():
    clock = FakeClock()
    b = Balancer(["a", "b", "c", "d"], PowerOfTwoChoices(random.Random(13)), decay_s=10.0, clock=clock)
    for backend in b.backends:
        backend.ewma.observe(0.3 if backend.address == "a" else 0.01)
    picks = {x.address: 0 for x in b.backends}
    for _ in range(3600):  # one pick per second for an hour, every reply 10 ms
        clock.advance(1.0)
        backend = b.pick()
        picks[backend.address] += 1
        b.started(backend)
        b.finished(backend, 0.01, grpc.StatusCode.OK)
    a = b.backends[0]
    assert picks["a"] > 600, picks  # a fair share is 900
    assert a.ewma.value < 0.02


def test_peak_ewma_read_decays_like_finagle():
    from harness.resilience.balancer import PeakEwma

    clock = FakeClock()
    e = PeakEwma(decay_s=10.0, clock=clock)
    e.observe(0.3)
    clock.advance(60.0)
    assert e.value == pytest.approx(0.3 * 2.718281828 ** -6, rel=1e-6)  # no new sample needed


# -- 3. an exception that is not a gRPC error is not an OK -----------------------------------------
def test_a_local_exception_is_counted_unknown_and_leaves_breaker_and_percentiles_alone():
    cfg = config(
        "t13-local",
        breaker={"failureRate": 0.5, "minCalls": 5, "window": {"kind": "count", "size": 50}},
        attemptTimeouts={"default": {"kind": "p99", "minSamples": 1}},
    )
    fleet = Fleet({"a": [AttributeError("'Stub' object has no attribute 'Cal'")]})
    c = caller(["a"], cfg, fleet, service="t13-local")
    labels = dict(
        service="t13-local", grpc_method=LABEL, config="t13-local", fault_mode="none", traffic="organic",
        injected="false",
    )

    async def go():
        raised = 0
        for _ in range(30):
            try:
                await c.call(METHOD, b"x")
            except AttributeError:
                raised += 1
        return raised

    assert run(go()) == 30  # the user's bug surfaces as itself
    assert sample("drill_client_calls_total", grpc_status="OK", **labels) == 0
    assert sample("drill_client_calls_total", grpc_status="UNKNOWN", **labels) == 30
    assert c.breakers.for_backend("a").window.counts() == (0, 0)
    assert c.timeouts.for_method(LABEL).p99() is None  # no latency sample from a call that never left
    assert c.balancer.backends[0].inflight == 0 and c.balancer.backends[0].ewma.value == 0.0


# -- 4. tokens and retry counts only for retries actually sent ------------------------------------
def test_no_budget_token_nor_retry_count_for_a_retry_the_breaker_refuses():
    cfg = config(
        "t13-token",
        retry={"maxAttempts": 5},
        # 3 retries in all (burst window = window: this test counts tokens, not bursts)
        retryBudget={"ratio": 0.0, "minRetriesPerSecond": 0.3, "window": "10s", "burstWindow": "10s"},
        breaker={"failureRate": 0.5, "minCalls": 2, "window": {"kind": "count", "size": 2}},
    )
    fleet = Fleet({"a": [unavailable()]})
    c = caller(["a"], cfg, fleet, service="t13-token")
    before = sample("drill_retry_attempts_total", service="t13-token", grpc_method=LABEL, config="t13-token")
    assert run(outcome(c)) == "UNAVAILABLE"
    sent = len(fleet.calls)  # 2: the second failure opens the breaker
    counted = sample("drill_retry_attempts_total", service="t13-token", grpc_method=LABEL, config="t13-token")
    assert sent == 2
    assert counted - before == sent - 1
    left = sum(c.budget.try_acquire() for _ in range(5))
    assert left == 2  # 3 − the one retry that was sent


def test_a_retry_falls_back_to_a_tried_backend_whose_breaker_is_closed():
    cfg = config("t13-fallback", breaker={"failureRate": 0.5, "minCalls": 2, "window": {"kind": "count", "size": 10}})
    fleet = Fleet({"a": [unavailable(), b"ok"], "b": [b"ok"]})
    c = caller(["a", "b"], cfg, fleet, service="t13-fallback")
    for _ in range(2):
        c.breakers.for_backend("b").record(grpc.StatusCode.UNAVAILABLE)  # b's breaker is open
    assert run(outcome(c)) == "OK"
    assert fleet.targets() == ["a", "a"]


# -- 5. early give-up at the method's expected latency --------------------------------------------
# The caller's clock is a fake one the fleet moves (an attempt "takes" its latency on it): the deadline, the
# latencies and the give-up are then exact, where a real clock made a box's stall of tens of ms refuse the first
# attempt (DEADLINE_EXCEEDED, no attempt sent).
def test_a_retry_that_cannot_finish_in_the_methods_p50_is_not_sent():
    clock = FakeClock()

    async def slow_ok():
        clock.advance(0.03)
        return b"ok"

    async def slow_fail():
        clock.advance(0.035)
        return unavailable()

    cfg = config("t13-p50", timeout=None, retry={"initialBackoff": "0.001s", "maxBackoff": "0.001s"})
    fleet = Fleet({"a": [slow_ok] * 12 + [slow_fail]})
    c = caller(["a"], cfg, fleet, service="t13-p50", clock=clock)
    gave_up = dict(service="t13-p50", grpc_method=LABEL, config="t13-p50", reason="deadline")

    async def go():
        for _ in range(12):
            assert await c.call(METHOD, b"x") == b"ok"
        n = len(fleet.calls)
        code = await outcome(c, timeout=0.06)  # 25 ms left after the failed attempt; p50 is 30 ms
        return code, fleet.calls[n:]

    code, calls = run(go())
    assert code == "UNAVAILABLE"  # the failed attempt's answer
    assert len(calls) == 1, calls  # before: a retry went out with a ~20 ms timeout
    assert sample("drill_fail_fast_total", **gave_up) == 1  # refused by the deadline gate, not another strategy


def test_the_first_attempt_is_not_refused_by_the_p50():
    # Only retries are refused at the expected latency: the first attempt keeps feeding the window,
    # so a method that got faster is seen to be faster (no lock-out).
    clock = FakeClock()

    async def slow_ok():
        clock.advance(0.03)
        return b"ok"

    cfg = config("t13-first", timeout=None)
    fleet = Fleet({"a": [slow_ok] * 12 + [b"ok"]})
    c = caller(["a"], cfg, fleet, service="t13-first", clock=clock)

    async def go():
        for _ in range(12):
            await c.call(METHOD, b"x")
        return await outcome(c, timeout=0.02)  # 20 ms: below the p50 (30 ms), above the first attempt's 5 ms floor

    assert run(go()) == "OK"
    assert len(fleet.calls) == 13


# -- 6. strict validation of what would turn a mechanism off --------------------------------------
@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"attemptTimeouts": {"default": {"kind": "p99", "window": 10, "minSamples": 20}}}, "minSamples: 20"),
        ({"retryBudget": {"ratio": 0, "minRetriesPerSecond": 0}}, "retryBudget: ratio 0 and minRetriesPerSecond 0"),
        ({"balancer": {"kind": "p2c", "ejection": {"maxEjectionPercent": 0}}}, "maxEjectionPercent: 0"),
        ({"balancer": {"kind": "p2c", "ejection": {"consecutiveFailures": 0}}}, "ejection: never ejects"),
        (
            {"balancer": {"kind": "p2c", "ejection": {"baseEjectionTime": "60s", "maxEjectionTime": "30s"}}},
            "maxEjectionTime: 30s is below baseEjectionTime",
        ),
        ({"deadline": {"minRemaining": "2s"}}, "deadline.minRemaining: 2s leaves no time"),
        ({"breaker": {"window": {"kind": ["count"]}}}, "breaker.window.kind"),
        ({"attemptTimeouts": {"default": {"kind": ["p99"]}}}, "attemptTimeouts.default.kind"),
        ({"pushback": {"maxDelay": "0s"}}, "pushback.maxDelay: 0.0 out of range"),
    ],
)
def test_settings_that_would_disable_a_mechanism_are_refused(raw, message):
    base = {"name": "x", "methodConfig": [{"name": [{}], "timeout": "2s", "retryPolicy": RETRY}]}
    with pytest.raises(Exception) as err:
        from_dict({**base, **raw}, "x")
    assert type(err.value).__name__ == "ConfigError", err.value
    assert message in str(err.value)


# -- 7. pushback resets the backoff and is bounded; ejection decays and is capped -----------------
def test_after_a_pushback_delayed_retry_the_backoff_starts_again_from_initial():
    cfg = config("t13-reset", timeout=None, retry={"maxAttempts": 4}, backoff={"jitter": "none"})
    pushback = unavailable(((h.RETRY_PUSHBACK_MS, "50"),))
    fleet = Fleet({"a": [pushback, unavailable(), unavailable(), b"ok"]})
    sleeps = Sleeps()
    c = caller(["a"], cfg, fleet, service="t13-reset", sleep=sleeps)
    assert run(outcome(c)) == "OK"
    assert sleeps.slept == pytest.approx([0.05, 0.1, 0.2])  # gRFC A6 / grpc core: reset after pushback


def test_an_enormous_pushback_without_a_deadline_is_not_slept():
    cfg = config("t13-huge", timeout=None)
    fleet = Fleet({"a": [unavailable(((h.RETRY_PUSHBACK_MS, "999999999"),)), b"ok"]})
    sleeps = Sleeps()
    c = caller(["a"], cfg, fleet, service="t13-huge", sleep=sleeps)
    assert run(outcome(c)) == "UNAVAILABLE"
    assert sleeps.slept == [] and len(fleet.calls) == 1


def _eject(b: Balancer, clock: FakeClock, backend) -> float:
    clock.now = max(clock.now, backend.ejected_until)
    b.started(backend)
    b.finished(backend, 0.001, grpc.StatusCode.UNAVAILABLE)
    return backend.ejected_until - clock.now


def test_ejection_time_is_capped_at_max_ejection_time():
    clock = FakeClock()
    b = Balancer(["a", "b", "c"], PowerOfTwoChoices(random.Random(1)), clock=clock,
                 ejection=Ejection(consecutive_failures=1, base_s=10.0, max_percent=50))  # fmt: skip
    a = b.backends[0]
    times = [_eject(b, clock, a) for _ in range(40)]
    assert times[:3] == [10.0, 20.0, 30.0]
    assert max(times) == 300.0  # Envoy's default max_ejection_time


def test_ejection_multiplier_decays_while_the_backend_is_healthy():
    clock = FakeClock()
    b = Balancer(["a", "b", "c"], PowerOfTwoChoices(random.Random(1)), clock=clock,
                 ejection=Ejection(consecutive_failures=1, base_s=10.0, max_percent=50))  # fmt: skip
    a = b.backends[0]
    assert [_eject(b, clock, a) for _ in range(3)] == [10.0, 20.0, 30.0]
    clock.now = a.ejected_until + 100.0  # 100 s healthy: ten base periods
    assert _eject(b, clock, a) == 10.0
