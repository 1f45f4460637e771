"""Work for callers that left is not kept: a handler that would begin after its caller's deadline never runs.

A real grpc.aio server on its own thread and loop, with the fault interceptor behind
an interceptor that stalls the loop (a blocking wait, as a busy or overloaded server
does) after the request has arrived and until the client has seen DEADLINE_EXCEEDED.
When the loop goes on, the fault interceptor is the next code to run for that call,
before grpc gets to process the cancellation (the stall ends only once the server's
own clock is past the deadline too): it must answer without the handler,
inject no fault, and count the call in `drill_server_expired_total{where="handler"}`.
The order is set by events, not by timing: the only time in the test is the call's
deadline, which passes while the server is stalled (the client's own grpc core ends
the call at its deadline).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import grpc
from grpc import aio

from harness.core import headers as h
from harness.core.settings import FaultSettings
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import FaultServerInterceptor
from tests.conftest import sample, sample_sum
from tests.interceptors.servers import CountingAioServicer

M = "drill.v1.Demo/Call"
#: Long enough for the request to reach the server before it passes, even beside two CPU hogs.
DEADLINE_S = 2.0


class _StallLoop(aio.ServerInterceptor):
    """Blocks the event loop (not just this call) once the request has arrived, until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        inner = handler.unary_unary

        async def unary(request, context):
            self.entered.set()
            self.release.wait(60)  # blocking on purpose: grpc cannot see the deadline pass meanwhile
            # The server's deadline is the client's plus the request's transit: hold until it passed too.
            for _ in range(6000):
                if context.time_remaining() <= 0:
                    break
                time.sleep(0.01)
            return await inner(request, context)  # no await before it: the next code to run for the call

        return grpc.unary_unary_rpc_method_handler(
            unary, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )


@contextlib.contextmanager
def stalled_server(settings: FaultSettings):
    """(port, servicer, stall) of an aio server running on its own thread's loop."""
    stall, servicer = _StallLoop(), CountingAioServicer()
    loop = asyncio.new_event_loop()
    started, stop = threading.Event(), None
    port = 0

    async def serve() -> None:
        nonlocal port, stop
        server = aio.server(interceptors=[stall, FaultServerInterceptor(settings, metrics=True)])
        drill_pb2_grpc.add_DemoServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        stop = asyncio.Event()
        started.set()
        await stop.wait()
        await server.stop(0)

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert started.wait(30)
    try:
        yield port, servicer, stall
    finally:
        stall.release.set()
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()


def _wait_for(predicate, timeout_s: float = 30.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_a_handler_due_after_its_callers_deadline_never_runs_and_injects_nothing():
    service = "expiry"
    settings = FaultSettings(
        enabled=True, seed=3, service=service, instance_id=f"{service}-0", tenants=frozenset({"tenant-drill"})
    )
    started0 = sample("grpc_server_call_started_total", grpc_method=M)
    expired0 = sample("drill_server_expired_total", service=service, grpc_method=M, where="handler")
    with stalled_server(settings) as (port, servicer, stall):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = drill_pb2_grpc.DemoStub(ch)
            md = ((h.TENANT, "tenant-drill"), (h.REQUEST_ID, "gone-1"), (h.FAULT, "delay:50"), (h.FAULT_RATIO, "100"))
            future = stub.Call.future(drill_pb2.CallRequest(payload="x"), metadata=md, timeout=DEADLINE_S)
            assert stall.entered.wait(30), "the request never reached the server"
            try:
                future.result(timeout=60)
                raise AssertionError("the call succeeded although the server was stalled past its deadline")
            except grpc.RpcError as err:
                assert err.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            stall.release.set()  # the loop goes on: the call is due at the fault interceptor now
            labels = dict(service=service, grpc_method=M, where="handler")
            assert _wait_for(lambda: sample("drill_server_expired_total", **labels) > expired0 or servicer.calls)
    assert servicer.calls == 0  # no work for a caller that left
    assert sample("drill_server_expired_total", **labels) == expired0 + 1
    assert sample("drill_fault_hits_total", service=service, grpc_method=M, fault_mode="delay") == 0
    assert sample(
        "drill_server_calls_total", service=service, grpc_method=M, grpc_status="DEADLINE_EXCEEDED",
        traffic="drill", fault_mode="none",
    ) == 1  # fmt: skip
    ended = sample_sum("drill_server_calls_total", service=service)
    # begun and ended once in the books (the probe's in flight = started - ended is back where it was)
    assert sample("grpc_server_call_started_total", grpc_method=M) - started0 == ended == 1
