"""Sync grpc.server interceptor: the same behaviour as aio, on real thread-pool servers."""

from __future__ import annotations

import logging
import time

import grpc
import pytest

from harness.core.settings import FaultSettings
from harness.demo.proto import drill_pb2
from harness.interceptors import SyncFaultServerInterceptor, Tagging, call_with_cancel
from tests.conftest import sample
from tests.interceptors.servers import sync_server, sync_stub

M = "drill.v1.Demo/Call"


def settings(service: str) -> FaultSettings:
    return FaultSettings(enabled=True, seed=11, service=service, instance_id=f"{service}-0")


def drill(directive: str, **kw) -> Tagging:
    return Tagging(tenant="tenant-drill", directive=directive, **kw)


def test_delay_runs_the_handler_and_answers_late():
    with sync_server(settings("sync-delay")) as (port, servicer), sync_stub(port, drill("delay:250")) as stub:
        t0 = time.perf_counter()
        reply = stub.Call(drill_pb2.CallRequest(payload="p"))
        elapsed = time.perf_counter() - t0
    assert elapsed >= 0.25 and reply.payload == "p" and servicer.calls == 1
    assert sample("drill_fault_hits_total", service="sync-delay", grpc_method=M, mode="delay") == 1


def test_abort_without_running_the_handler():
    with (
        sync_server(settings("sync-abort")) as (port, servicer),
        sync_stub(port, drill("abort:UNAVAILABLE")) as stub,
    ):
        with pytest.raises(grpc.RpcError) as info:
            stub.Call(drill_pb2.CallRequest())
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE
    assert info.value.details() == "injected fault: UNAVAILABLE"
    assert servicer.calls == 0


def test_drop_with_a_shorter_deadline_records_the_gap_and_frees_the_thread():
    """One worker thread: if it sat out the whole 60 s drop after the caller left at 0.8 s, the next call (20 s
    budget, sent at once) could only start at 60 s and would run out of time; served, it shows the thread was freed.
    (A 60 s drop, not 2 s, so the next call's budget can be generous: a stalled box cannot make it miss.)"""
    labels = dict(service="sync-drop", grpc_method=M, fault_mode="drop")
    with (
        sync_server(settings("sync-drop"), workers=1) as (port, servicer),
        sync_stub(port, drill("drop:60000")) as stub,
        sync_stub(port) as organic,
    ):
        t0 = time.perf_counter()
        with pytest.raises(grpc.RpcError) as info:
            stub.Call(drill_pb2.CallRequest(), timeout=0.8)
        elapsed = time.perf_counter() - t0
        after = organic.Call(drill_pb2.CallRequest(payload="next"), timeout=20)  # the freed worker serves it
        seen = None
        while time.perf_counter() - t0 < 10:  # the server records when the call ends (the caller's deadline)
            if sample("drill_deadline_gap_seconds_count", **labels):
                seen = time.perf_counter() - t0
                break
            time.sleep(0.02)
    # the caller's deadline ended the call, not the drop (UNAVAILABLE after 60 s): its code says so, with no upper
    # bound on the wall clock (the aio twin's took 2.19 s on a CI run's busy box); the freed worker is the `after` call
    assert info.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert 0.75 <= elapsed and after.payload == "next" and servicer.calls == 1
    assert seen is not None, "no deadline gap recorded within 10 s of the call"
    assert sample("drill_deadline_gap_seconds_count", **labels) == 1
    # the gap is when the drop would have ended (its handler's start + 60 s) past the caller's deadline (the origin
    # deadline it sends, 0.8 s after its tagging, to the ms): 59.2 s plus the wait between the tagging and the
    # handler's start (>= 0; the lower bound keeps 0.2 s for the ms rounding and the wall-to-monotonic mapping),
    # which a busy box lengthens but which began after t0 and ended before the sample was seen
    assert 59.0 <= sample("drill_deadline_gap_seconds_sum", **labels) <= 59.2 + seen


def test_cancel_during_delay_is_cancelled_and_quiet(caplog):
    caplog.set_level(logging.DEBUG)
    # a 20-s delay, so its answer cannot reach the caller before the cancel at 100 ms reaches the server unless the
    # box stalls 20 s (with 500 ms, a 0.4-s stall let the answer win); the server records the call once its handler
    # is over: polled for, at most 10 s (a busy box's stalls are 1-2 s), instead of a fixed sleep
    with sync_server(settings("sync-cancel")) as (port, _), sync_stub(port, drill("delay:20000")) as stub:
        t0 = time.perf_counter()
        with pytest.raises(grpc.RpcError) as info:
            call_with_cancel(stub.Call, drill_pb2.CallRequest(), 100)
        elapsed = time.perf_counter() - t0
        until = time.perf_counter() + 10
        while not sample("drill_server_calls_total", service="sync-cancel", grpc_method=M, grpc_status="CANCELLED",
                         traffic="drill", fault_mode="delay"):  # fmt: skip
            assert time.perf_counter() < until, "no server record of the cancelled call within 10 s"
            time.sleep(0.02)
    assert info.value.code() is grpc.StatusCode.CANCELLED
    # the caller's own cancel at 100 ms ended it; no upper bound on the wall clock (the aio twin of this test read
    # 1.67 s on a stalled box): that the server's delay was cut short, not served, is its CANCELLED record below
    assert elapsed >= 0.09
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert sample(
        "drill_server_calls_total", service="sync-cancel", grpc_method=M, grpc_status="CANCELLED",
        traffic="drill", fault_mode="delay",
    ) == 1  # fmt: skip


def test_future_calls_are_cancelled_by_the_interceptor():
    with sync_server(settings("sync-cancel2")) as (port, _):
        # 20 s: the delay's answer cannot beat the interceptor's cancel at 100 ms on a stalled box
        with sync_stub(port, drill("delay:20000"), cancel_after_ms=100, service="c-sync-cancel") as stub:
            fut = stub.Call.future(drill_pb2.CallRequest())
            with pytest.raises(grpc.FutureCancelledError):
                fut.result(timeout=2)
    client = dict(service="c-sync-cancel", grpc_method=M, fault_mode="delay", traffic="drill", config="none",
              injected="false")
    assert sample("drill_client_calls_total", grpc_status="CANCELLED", **client) == 1


def test_foreign_tenant_and_bad_directives_pass_untouched():
    with sync_server(settings("sync-gates")) as (port, servicer):
        with sync_stub(port, Tagging(tenant="tenant-acme", directive="abort:INTERNAL")) as stub:
            for _ in range(200):
                stub.Call(drill_pb2.CallRequest())
        with sync_stub(port, drill("abort:BOGUS")) as stub:
            stub.Call(drill_pb2.CallRequest())
    assert servicer.calls == 201
    assert sample("drill_fault_skipped_total", service="sync-gates", grpc_method=M, reason="tenant") == 200
    assert sample("drill_fault_rejected_total", service="sync-gates", grpc_method=M, reason="unknown_code") == 1


def test_switch_off_returns_the_original_handler_untouched():
    interceptor = SyncFaultServerInterceptor(FaultSettings(enabled=False))
    handler = grpc.unary_unary_rpc_method_handler(lambda r, c: r)

    class Details:
        method = "/drill.v1.Demo/Call"
        invocation_metadata = (("x-tenant-id", "tenant-drill"), ("x-fault", "abort:INTERNAL"))

    assert interceptor.intercept_service(lambda _d: handler, Details()) is handler


def test_streaming_drop_closes_unavailable():
    with sync_server(settings("sync-stream")) as (port, servicer), sync_stub(port, drill("drop:100")) as stub:
        with pytest.raises(grpc.RpcError) as info:
            list(stub.Stream(drill_pb2.CallRequest(count=2)))
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE and servicer.calls == 0
