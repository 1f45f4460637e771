"""The resilient caller driving the demo service (through harness.demo.downstream) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time

import grpc
import pytest
from grpc import aio

from harness.core import scope
from harness.demo.downstream import as_downstream, demo_caller, downstream_for
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.resilience import config as rconfig
from harness.testing import resilience_bench as bench
from tests.conftest import sample, sample_sum

REQ = drill_pb2.CallRequest(payload="p")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def cfg(base: str, **changes):
    return bench.with_overrides(rconfig.load(base), **changes)


async def _failing_leaf(service: str):
    return await bench.start_hop(service, seed=3)


def test_every_attempt_carries_the_same_request_id_and_its_number():
    async def go():
        leaf = await _failing_leaf("rid-leaf")
        c = demo_caller(
            [leaf.address],
            rconfig.load("naive"),
            service="rid-client",
            tagging=bench.drill_tagging("abort:UNAVAILABLE"),
        )
        try:
            with pytest.raises(aio.AioRpcError) as err:
                await c.call("Call", REQ, timeout=5.0)
            assert err.value.code() is grpc.StatusCode.UNAVAILABLE
        finally:
            await c.close()
            await leaf.server.stop(None)
        return leaf.recorder.previous_attempts, leaf.recorder.ends

    seen, ends = run(go())
    assert len({origin for _, origin in ends}) == 1  # one origin deadline: the logical call's
    assert len(seen) == 4  # naive: 1 + 3 immediate retries
    assert len({rid for rid, _, _ in seen}) == 1 and seen[0][0]
    assert [fallback for _, _, fallback in seen] == ["", "1", "2", "3"]


def test_non_idempotent_write_is_never_retried():
    async def go():
        leaf = await _failing_leaf("write-leaf")
        c = demo_caller(
            [leaf.address],
            rconfig.load("naive"),
            service="write-client",
            tagging=bench.drill_tagging("abort:UNAVAILABLE"),
        )
        try:
            with pytest.raises(aio.AioRpcError):
                await c.call("Write", REQ)
        finally:
            await c.close()
            await leaf.server.stop(None)
        return leaf.recorder.calls

    assert run(go()) == 1


def test_logical_calls_are_recorded_once_with_the_config_label():
    labels = dict(service="label-client", grpc_method="drill.v1.Demo/Call", fault_mode="abort", traffic="drill",
                  injected="true")
    before = sample("drill_client_calls_total", grpc_status="UNAVAILABLE", config="jitter", **labels)
    retries_before = sample(
        "drill_retry_attempts_total", service="label-client", grpc_method="drill.v1.Demo/Call", config="jitter"
    )

    async def go():
        leaf = await _failing_leaf("label-leaf")
        c = demo_caller(
            [leaf.address],
            rconfig.load("jitter"),
            service="label-client",
            tagging=bench.drill_tagging("abort:UNAVAILABLE"),
            rng=random.Random(1),
        )
        try:
            with pytest.raises(aio.AioRpcError):
                await c.call("Call", REQ)
        finally:
            await c.close()
            await leaf.server.stop(None)

    run(go())
    assert sample("drill_client_calls_total", grpc_status="UNAVAILABLE", config="jitter", **labels) == before + 1
    assert (
        sample("drill_retry_attempts_total", service="label-client", grpc_method="drill.v1.Demo/Call", config="jitter")
        == retries_before + 3
    )


def test_budget_exhaustion_fails_fast_and_is_counted():
    budget_cfg = cfg("budget", name="budget-tight", budget={"ratio": 0.1, "min_retries_per_s": 0.0, "window_s": 60.0})

    async def go():
        leaf = await _failing_leaf("budget-leaf")
        c = demo_caller(
            [leaf.address],
            budget_cfg,
            service="budget-client",
            tagging=bench.drill_tagging("abort:UNAVAILABLE"),
            rng=random.Random(1),
        )
        try:
            for _ in range(20):
                with pytest.raises(aio.AioRpcError):
                    await c.call("Call", REQ)
        finally:
            await c.close()
            await leaf.server.stop(None)
        return leaf.recorder.calls

    calls = run(go())
    assert calls <= 22  # 20 requests + at most 10% retries
    assert (
        sample(
            "drill_retry_budget_exhausted_total",
            service="budget-client",
            grpc_method="drill.v1.Demo/Call",
            config="budget-tight",
        )
        >= 18
    )


def test_breaker_opens_on_real_failures_and_fails_fast():
    async def go():
        leaf = await _failing_leaf("breaker-leaf")
        c = demo_caller(
            [leaf.address],
            rconfig.load("resilient"),
            service="breaker-client",
            tagging=bench.drill_tagging("abort:UNAVAILABLE"),
            rng=random.Random(1),
        )
        try:
            for _ in range(MIN_CALLS + 20):
                with pytest.raises(aio.AioRpcError):
                    await c.call("Call", REQ)
        finally:
            await c.close()
            await leaf.server.stop(None)
        return leaf.address, leaf.recorder.calls

    MIN_CALLS = rconfig.load("resilient").breaker["min_calls"]
    addr, calls = run(go())
    # min_calls failures open it (sequential calls: no attempt is in flight when it opens);
    # then nothing reaches the leaf within open_s
    assert calls == MIN_CALLS
    assert sample("drill_breaker_state", service="breaker-client", backend=addr, config="resilient") == 2
    assert (
        sample(
            "drill_breaker_transitions_total",
            service="breaker-client",
            backend=addr,
            config="resilient",
            **{"from": "closed", "to": "open"},
        )
        == 1
    )
    assert (
        sample(
            "drill_fail_fast_total",
            service="breaker-client",
            grpc_method="drill.v1.Demo/Call",
            config="resilient",
            reason="breaker",
        )
        >= 18
    )


def _served(remaining: float | None) -> scope.CallScope:
    deadline = None if remaining is None else time.monotonic() + remaining
    return scope.CallScope(service="mid", method="drill.v1.Demo/Call", request_id="rid-1", deadline_monotonic=deadline)


async def _call_in_scope(config, remaining: float | None, *, timeout=None):
    leaf = await bench.start_hop("deadline-leaf", faults=False)
    c = demo_caller([leaf.address], config, service="deadline-client")
    token = scope.enter(_served(remaining))
    try:
        try:
            await c.call("Call", REQ, timeout=timeout)
            code = grpc.StatusCode.OK
        except aio.AioRpcError as err:
            code = err.code()
    finally:
        scope.leave(token)
        await c.close()
        await leaf.server.stop(None)
    return code, leaf.recorder


def test_outgoing_deadline_is_the_incoming_one_minus_the_hop_margin():
    """resilient, its caps lifted (2 s methodConfig timeout, 1 s per attempt: they would bind below a 10 s
    incoming deadline) and its hop margin made 1 s, so that a margin not subtracted shows however long the call
    takes to reach the leaf (before: 10 ms margin on a 0.3 s incoming deadline, where a stall of 0.29 s failed
    the call and a missing margin passed whenever the leaf read its deadline 5 ms late)."""
    base = rconfig.load("resilient")
    config = cfg("resilient", deadline=dataclasses.replace(base.deadline, hop_margin_s=1.0, total_s=None), timeouts={})
    code, rec = run(_call_in_scope(config, 10.0))
    assert code is grpc.StatusCode.OK
    (remaining,) = rec.remaining
    # at most 10 s - 1 s (the time the call took only lowers it), + 12 ms of gRPC core's rounding up: it sends a
    # timeout of 1 to 10 s in 10-ms units, from and to whole milliseconds (+2 ms, as tests/fleet/test_hops.py);
    # without the margin it would be 10 s less that time, above 9.012 s unless the call took a second
    assert remaining is not None and 0.0 < remaining <= 9.0 + 0.012
    assert [rid for rid, _, _ in rec.previous_attempts] == ["rid-1"]  # the served call's request id


def test_early_give_up_answers_deadline_exceeded_without_calling_downstream():
    before = sample(
        "drill_fail_fast_total",
        service="deadline-client",
        grpc_method="drill.v1.Demo/Call",
        config="resilient",
        reason="deadline",
    )
    code, rec = run(_call_in_scope(rconfig.load("resilient"), 0.012))
    assert code is grpc.StatusCode.DEADLINE_EXCEEDED
    assert rec.calls == 0
    assert (
        sample(
            "drill_fail_fast_total",
            service="deadline-client",
            grpc_method="drill.v1.Demo/Call",
            config="resilient",
            reason="deadline",
        )
        == before + 1
    )


def test_an_unbounded_incoming_deadline_is_never_passed_on():
    bare = rconfig.from_dict({"name": "bare", "deadline": {"propagate": True}})
    code, rec = run(_call_in_scope(bare, None))
    assert code is grpc.StatusCode.OK and rec.remaining == [None]


def test_without_propagation_the_incoming_deadline_is_ignored():
    """naive, its 1 s per-attempt timeout lifted, under a 1 ms incoming deadline that a propagating hop would give
    up on (DEADLINE_EXCEEDED, no downstream call; 1 ms is less than the margin): the call goes out, with the
    caller's own 9 s. (Before: a 0.3 s incoming deadline and naive's 1 s, where a 0.5 s stall failed the test.)"""
    code, rec = run(_call_in_scope(cfg("naive", timeouts={}), 0.001, timeout=9))
    assert code is grpc.StatusCode.OK and rec.calls == 1
    # the caller's own 9 s (8.5 s of slack for the call to reach the leaf), not the 1 ms incoming one; + 12 ms of
    # gRPC core's rounding up (as above; 9 s, not 10, keeps it below 10 s, whose 100-ms units read 10.095 s once)
    assert rec.remaining[0] is not None and 0.5 < rec.remaining[0] <= 9 + 0.012


def test_downstream_for_serves_a_hop_over_balanced_replicas():
    async def go():
        replicas = [await bench.start_hop("replica", faults=False, instance=f"replica-{i}") for i in range(2)]
        downstream, closeable = await downstream_for(
            ",".join(r.address for r in replicas), "resilient", service="front"
        )
        front = await bench.start_hop("front", faults=False, downstream=downstream)
        served_by = set()
        try:
            async with aio.insecure_channel(front.address) as ch:
                stub = drill_pb2_grpc.DemoStub(ch)
                for _ in range(4):
                    reply = await stub.Call(REQ, timeout=5)
                    assert list(reply.path) == ["front", "replica"]
                    served_by.add(reply.served_by)
        finally:
            await closeable.close()
            for hop in (front, *replicas):
                await hop.server.stop(None)
        return served_by, [r.address for r in replicas]

    served_by, addrs = run(go())
    assert served_by == {"replica-0", "replica-1"}  # round robin over both
    assert sample_sum("drill_balancer_picks_total", service="front", config="resilient") >= 4
    assert all(sample("drill_balancer_picks_total", service="front", backend=a, config="resilient") >= 2 for a in addrs)


def test_a_hop_that_gave_up_tells_its_caller_not_to_retry():
    async def go():
        leaf = await _failing_leaf("pushback-leaf")
        inner = demo_caller([leaf.address], rconfig.load("budget"), service="pushback-mid")
        # faults on: the gate forwards drill keys only when the switch is on
        mid = await bench.start_hop("pushback-mid", faults=True, downstream=as_downstream(inner))
        outer = demo_caller(
            [mid.address],
            rconfig.load("budget"),
            service="pushback-edge",
            tagging=bench.drill_tagging("abort:UNAVAILABLE", target="pushback-leaf"),
        )
        try:
            with pytest.raises(aio.AioRpcError) as err:
                await outer.call("Call", REQ)
            trailing = dict(err.value.trailing_metadata())
        finally:
            await outer.close()
            await inner.close()
            await mid.server.stop(None)
            await leaf.server.stop(None)
        return mid.recorder.calls, leaf.recorder.calls, trailing

    mid_calls, leaf_calls, trailing = run(go())
    assert trailing.get("grpc-retry-pushback-ms") == "-1"
    assert mid_calls == 1  # the edge honoured the pushback
    # the mid hop retried within its budget: a quiet client's floor allows one retry in any 1-s burst window
    assert leaf_calls == 2
