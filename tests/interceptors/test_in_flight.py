"""The aio server interceptor's in-flight limit (`harness.interceptors._overload.InFlight`), call by call.

grpc hands a call to the interceptor before its handler runs; a call let in then may find the server full by
the time its handler starts (others were let in meanwhile). These tests hand the interceptor calls the way
grpc.aio does (`intercept_service`, then the handler in a task of its own) with a context that records what
the pipeline does to it, so that window is exact: two calls let in while the server was empty, the first holds
the only place, the second is refused at its handler's entry. Through a real proxy and server:
tests/proxy/test_overload.py and tests/demo/test_serve.py.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc import aio

from harness.core import headers as h
from harness.core.settings import FaultSettings, SettingsError
from harness.interceptors import FaultServerInterceptor, SyncFaultServerInterceptor, server_interceptors
from tests.conftest import sample


class _Refused(Exception):
    pass


class _Context:
    """The parts of grpc.aio's servicer context the pipeline touches; `abort` records and raises."""

    def __init__(self) -> None:
        self.aborted: tuple | None = None
        self.trailers: tuple = ()

    def time_remaining(self):
        return 10.0

    def code(self):
        return None

    def done(self) -> bool:  # the caller is still there (an @served fault asks before it acts)
        return False

    def trailing_metadata(self):
        return self.trailers

    def set_trailing_metadata(self, md) -> None:
        self.trailers = tuple(md)

    async def abort(self, code, details="", trailing_metadata=()):
        self.aborted = (code, details)
        raise _Refused


class _Details:
    def __init__(self, method: str, metadata=()) -> None:
        self.method, self.invocation_metadata = method, tuple(metadata)


#: A drill call every one of which is hit: the first is held by its delay (in flight), the second would be delayed too
DRILL = ((h.TENANT, "tenant-drill"), (h.FAULT, "delay:200"), (h.FAULT_RATIO, "100"), (h.REQUEST_ID, "d-1"))


def _handler(kind: str, gate: asyncio.Event):
    async def unary(request, context):
        await gate.wait()
        return b"ok"

    async def bidi(requests, context):
        await gate.wait()
        yield b"ok"

    return grpc.unary_unary_rpc_method_handler(unary) if kind == "unary" else \
        grpc.stream_stream_rpc_method_handler(bidi)  # fmt: skip


async def _run(handler, kind: str, context: _Context):
    try:
        if kind == "unary":
            return await handler.unary_unary(b"x", context)
        return [m async for m in handler.stream_stream(None, context)]
    except _Refused:
        return "refused"


@pytest.mark.parametrize("kind, metadata", [("unary", ()), ("unary", DRILL), ("bidi", ())],
                         ids=["organic-unary", "drill-unary-that-would-hit", "bidi"])  # fmt: skip
def test_a_call_let_in_before_the_server_filled_up_is_refused_at_its_handlers_entry(kind, metadata):
    service = f"entry-{kind}-{len(metadata)}"
    method = f"/entry.{kind.title()}{len(metadata)}/Call"
    interceptor = FaultServerInterceptor(FaultSettings(service=service, enabled=True, max_in_flight=1), metrics=True)
    labels = {"service": service, "grpc_method": method[1:]}

    async def main():
        gate = asyncio.Event()
        handler = _handler(kind, gate)

        async def continuation(details):
            return handler

        details = _Details(method, metadata)
        first = await interceptor.intercept_service(continuation, details)
        second = await interceptor.intercept_service(continuation, details)  # the server is still empty
        holding = asyncio.create_task(_run(first, kind, _Context()))
        for _ in range(5000):  # the first holds its place (its handler waits, or its delay)
            if interceptor.core.flight.calls == 1:
                break
            await asyncio.sleep(0.001)
        context = _Context()
        refused = await _run(second, kind, context)
        gate.set()
        return refused, context, await holding, interceptor.core.flight.calls

    refused, context, held, left = asyncio.run(main())
    assert refused == "refused" and context.aborted == (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                         "drill: in-flight limit 1 reached")  # fmt: skip
    assert h.FAULT_MARKER not in dict(context.trailers)  # never faulted
    assert held in (b"ok", [b"ok"]) and left == 0
    assert sample("drill_server_refused_total", reason="in_flight", **labels) == 1
    assert sample("drill_fault_hits_total", mode="delay", **labels) == (1 if metadata else 0)  # the held one only
    traffic = "drill" if metadata else "organic"
    assert sample("drill_server_calls_total", grpc_status="RESOURCE_EXHAUSTED", traffic=traffic, fault_mode="none",
                  **labels) == 1  # fmt: skip


def test_a_full_server_refuses_without_asking_for_the_handler_but_lets_health_and_reflection_through():
    """When full, the interceptor answers without looking the method up (its refusal reads no request: a
    client-streaming handler, whatever the method's kind); a health check or reflection call is a probe and
    goes on to its own handler."""
    interceptor = FaultServerInterceptor(FaultSettings(service="full", max_in_flight=2), metrics=True)
    interceptor.core.flight.calls = 2
    asked: list[str] = []
    own = grpc.unary_unary_rpc_method_handler(lambda request, context: b"")

    async def continuation(details):
        asked.append(details.method)
        return own

    async def main():
        out = []
        for method in ("/app.Svc/Call", "/grpc.health.v1.Health/Check",
                       "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"):  # fmt: skip
            out.append(await interceptor.intercept_service(continuation, _Details(method)))
        return out

    call, health, reflection = asyncio.run(main())
    assert call.request_streaming and not call.response_streaming and call is interceptor.core.flight.handler
    assert (health, reflection) == (own, own) and asked == ["/grpc.health.v1.Health/Check",
                                                            "/grpc.reflection.v1alpha.ServerReflection/"
                                                            "ServerReflectionInfo"]  # fmt: skip
    assert sample("drill_server_refused_total", service="full", grpc_method="app.Svc/Call", reason="in_flight") == 1


def test_the_limit_is_read_from_the_environment_and_installs_the_interceptor_even_with_the_switch_off():
    settings = FaultSettings.from_env({"DRILL_MAX_IN_FLIGHT": "7"})
    assert settings.max_in_flight == 7 and FaultSettings.from_env({}).max_in_flight == 0  # a library: no limit
    (interceptor,) = server_interceptors(settings)
    assert isinstance(interceptor, aio.ServerInterceptor) and interceptor.core.flight.limit == 7
    assert server_interceptors(FaultSettings.from_env({})) == []
    for bad, says in (("-1", "within 0..10000"), ("10001", "within 0..10000"), ("x", "is not an integer")):
        with pytest.raises(SettingsError, match=says):
            FaultSettings.from_env({"DRILL_MAX_IN_FLIGHT": bad})


def test_a_sync_server_is_told_to_use_its_own_limit_rather_than_have_the_setting_ignored():
    with pytest.raises(SettingsError, match="maximum_concurrent_rpcs=5"):
        SyncFaultServerInterceptor(FaultSettings(max_in_flight=5))
    SyncFaultServerInterceptor(FaultSettings())  # no limit: as before
