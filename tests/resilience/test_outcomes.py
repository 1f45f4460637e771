"""A breaker judges its backend by what the backend did: a relayed give-up (pushback -1) is not the relay's failure.

Issue 22, point 3 of the trace: order→account and gateway→order counted account's "breaker
open" answers as failures of their own backend and opened 285 ms later. Unit tests on the
classifier, a fake-invoke caller, and a real three-hop chain on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import random

import grpc
import pytest
from grpc import aio

from harness.core import headers as h
from harness.demo.downstream import demo_caller
from harness.demo.proto import drill_pb2
from harness.resilience import from_dict
from harness.resilience.breaker import State
from harness.resilience.outcome import OutcomeClassifier, Verdict
from harness.resilience.retry import Pushback
from harness.testing import resilience_bench as bench

from .test_references import Fleet, caller, config, outcome, run, unavailable

GIVE_UP = ((h.RETRY_PUSHBACK_MS, "-1"),)
SMALL_BREAKER = {"failureRate": 0.5, "minCalls": 4, "window": {"kind": "count", "size": 4}, "openDuration": "60s"}


@pytest.mark.parametrize(
    ("code", "pushback", "default", "counted"),
    [
        ("OK", Pushback(), Verdict.SUCCESS, Verdict.SUCCESS),
        ("UNAVAILABLE", Pushback(), Verdict.FAILURE, Verdict.FAILURE),
        ("UNAVAILABLE", Pushback(stop=True), Verdict.IGNORED, Verdict.FAILURE),  # relayed give-up
        ("DEADLINE_EXCEEDED", Pushback(stop=True), Verdict.IGNORED, Verdict.FAILURE),
        ("UNAVAILABLE", Pushback(sleep_s=0.1), Verdict.FAILURE, Verdict.FAILURE),  # "retry later": its own state
        ("CANCELLED", Pushback(), Verdict.IGNORED, Verdict.IGNORED),
        ("INVALID_ARGUMENT", Pushback(), Verdict.IGNORED, Verdict.IGNORED),
    ],
)
def test_the_classifier_ignores_relayed_give_ups_unless_told_to_count_them(code, pushback, default, counted):
    assert OutcomeClassifier().classify(code, pushback) is default
    assert OutcomeClassifier("count").classify(code, pushback) is counted


def test_an_unknown_classifier_setting_is_refused():
    with pytest.raises(Exception, match=r"outcomes\.relayedGiveUps"):
        from_dict({"name": "x", "outcomes": {"relayedGiveUps": "sometimes"}})


@pytest.mark.parametrize(("setting", "sent", "state"), [("ignore", 12, State.CLOSED), ("count", 4, State.OPEN)])
def test_relayed_give_ups_do_not_open_the_breaker_by_default(setting, sent, state):
    """A backend that answers every call with a relayed give-up: its breaker opens only when configured to count."""
    cfg = config(f"t22-relay-{setting}", breaker=SMALL_BREAKER, outcomes={"relayedGiveUps": setting})
    fleet = Fleet({"account": [unavailable(GIVE_UP)]})
    c = caller(["account"], cfg, fleet, service=f"t22-relay-{setting}")
    for _ in range(12):
        assert run(outcome(c)) == "UNAVAILABLE"
    assert len(fleet.calls) == sent  # pushback -1: never retried; counted: 4 failures open it
    assert c.breakers.for_backend("account").state is state


def test_a_backends_own_failures_still_open_its_breaker():
    cfg = config("t22-own", breaker=SMALL_BREAKER)
    fleet = Fleet({"ledger": [unavailable()]})
    c = caller(["ledger"], cfg, fleet, service="t22-own")
    for _ in range(6):
        run(outcome(c))
    assert c.breakers.for_backend("ledger").state is State.OPEN


def _chain_config(setting: str):
    # resilient's semantics with a small breaker so a short test can open it
    return from_dict(
        {
            "name": f"t22-chain-{setting}",
            "retryPolicy": {
                "maxAttempts": 3,
                "initialBackoff": "0.001s",
                "maxBackoff": "0.002s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },  # fmt: skip
            "pushback": {"honour": True, "onGiveUp": True},
            "retryBudget": {"ratio": 0.1, "minRetriesPerSecond": 1.0, "window": "10s"},
            "breaker": {**SMALL_BREAKER, "minCalls": 10, "window": {"kind": "count", "size": 10}},
            "outcomes": {"relayedGiveUps": setting},
        }
    )


@pytest.mark.parametrize(("setting", "upper"), [("ignore", State.CLOSED), ("count", State.OPEN)])
def test_one_dependencys_outage_opens_only_the_breaker_next_to_it(setting, upper):
    """ingress → h1 → h2 → h3 (fails every drill call): h2's breaker on h3 opens; h1's and the ingress's do not."""

    async def go():
        cfg = _chain_config(setting)
        topo = await bench.start_chain(3, cfg, prefix=f"t22-{setting}-h")
        ingress = demo_caller(
            [topo.entry],
            cfg,
            service=f"t22-{setting}-in",
            tagging=bench.drill_tagging("abort:UNAVAILABLE", target=topo.hops[-1].service),
            rng=random.Random(3),
        )
        try:
            for _ in range(40):
                with pytest.raises(aio.AioRpcError) as err:
                    await ingress.call("Call", drill_pb2.CallRequest(payload="x"))
                assert err.value.code() is grpc.StatusCode.UNAVAILABLE
            h1, h2 = topo.hops[0], topo.hops[1]
            return (
                ingress.breakers.for_backend(h1.address).state,
                h1.caller.breakers.for_backend(h2.address).state,
                h2.caller.breakers.for_backend(topo.hops[2].address).state,
            )
        finally:
            await ingress.close()
            await topo.close()

    at_ingress, at_h1, at_h2 = asyncio.run(asyncio.wait_for(go(), 30))
    assert at_h2 is State.OPEN  # next to the failing dependency: its own failures
    assert at_h1 is upper and at_ingress is upper  # relays of h2's give-ups: counted only when configured
