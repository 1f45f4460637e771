"""The caller knows no service: it drives a generic bytes-in/bytes-out service, and imports no demo code."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import grpc
import pytest
from grpc import aio

from harness.resilience import ChannelPool, ResilientCaller, from_dict, unary_invoker
from tests.conftest import ROOT

ECHO_CONFIG = {
    "name": "echo-retry",
    "methodConfig": [
        {
            "name": [{"service": "other.v1.Echo"}],
            "timeout": "5s",
            "retryPolicy": {
                "maxAttempts": 3,
                "initialBackoff": "0.01s",
                "maxBackoff": "0.05s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }
    ],
    "nonIdempotentMethods": ["other.v1.Echo/Shout"],
}


async def _echo_server(fail_first: int):
    """`other.v1.Echo/Say` and `/Shout` on 127.0.0.1: each answers UNAVAILABLE `fail_first` times, then echoes."""
    seen: list[tuple[str, bytes, dict[str, str]]] = []

    def handler(name: str):
        async def unary(request: bytes, context: aio.ServicerContext) -> bytes:
            seen.append((name, request, dict(context.invocation_metadata())))
            if sum(1 for n, _, _ in seen if n == name) <= fail_first:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "injected")
            return b"echo:" + request

        return grpc.unary_unary_rpc_method_handler(unary)  # no (de)serializers: bytes in, bytes out

    server = aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("other.v1.Echo", {"Say": handler("Say"), "Shout": handler("Shout")}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}", seen


def _caller(address: str, channels: ChannelPool) -> ResilientCaller:
    invokers = {m: unary_invoker(channels, m) for m in ("/other.v1.Echo/Say", "/other.v1.Echo/Shout")}
    return ResilientCaller([address], from_dict(ECHO_CONFIG), invokers, service="echo-client", channels=channels)


def test_a_service_that_is_not_the_demo_is_retried_through_one_unavailable():
    async def go():
        server, address, seen = await _echo_server(fail_first=1)
        channels = ChannelPool(service="echo-client", config="echo-retry")
        caller = _caller(address, channels)
        try:
            reply = await caller.call("/other.v1.Echo/Say", b"hi")
        finally:
            await caller.close()
            await server.stop(None)
        return reply, seen, caller.picks

    reply, seen, picks = asyncio.run(asyncio.wait_for(go(), 20))
    assert reply == b"echo:hi"
    assert [(name, body) for name, body, _ in seen] == [("Say", b"hi"), ("Say", b"hi")]  # one retry, then OK
    first, second = (md for _, _, md in seen)
    assert first["x-request-id"] == second["x-request-id"]
    assert "x-drill-previous-rpc-attempts" not in first and second["x-drill-previous-rpc-attempts"] == "1"
    assert sum(picks.values()) == 2


def test_a_method_the_user_named_non_idempotent_is_not_retried():
    async def go():
        server, address, seen = await _echo_server(fail_first=1)
        caller = _caller(address, ChannelPool(service="echo-client", config="echo-retry"))
        try:
            with pytest.raises(aio.AioRpcError) as err:
                await caller.call("Shout", b"hey")  # the short name, unambiguous here
        finally:
            await caller.close()
            await server.stop(None)
        return err.value.code(), seen

    code, seen = asyncio.run(asyncio.wait_for(go(), 20))
    assert code is grpc.StatusCode.UNAVAILABLE
    assert len(seen) == 1


def test_an_unknown_method_is_refused_before_any_call():
    caller = ResilientCaller(["127.0.0.1:1"], from_dict(ECHO_CONFIG), {"/other.v1.Echo/Say": None}, service="x")
    with pytest.raises(ValueError, match="not a method of this caller"):
        asyncio.run(caller.call("Whisper", b""))


def test_importing_the_resilience_layer_loads_no_demo_and_no_generated_code():
    code = (
        "import sys, harness.resilience\n"
        "bad = sorted(m for m in sys.modules if m.startswith('harness.demo') or '_pb2' in m)\n"
        "print('loaded:', bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "loaded: []", out.stdout
