"""A grpc.aio echo service on raw bytes (no generated code), for the link's tests: every call kind.

`/echo.Echo/Unary` answers its request; `Wait` answers after the milliseconds its request names (a call kept in
flight); `ServerStream` answers its request `n` times (n from the `x-n` key, default 3); `ClientStream` answers the
requests joined; `Bidi` answers each request as it comes.
"""

from __future__ import annotations

import asyncio
import contextlib

import grpc
from grpc import aio

SERVICE = "/echo.Echo/"


async def _unary(request: bytes, context) -> bytes:
    return request


async def _wait(request: bytes, context) -> bytes:
    await asyncio.sleep(int(request or b"0") / 1000.0)
    return request


async def _server_stream(request: bytes, context):
    n = int(dict(context.invocation_metadata()).get("x-n", "3"))
    for _ in range(n):
        yield request


async def _client_stream(requests, context) -> bytes:
    return b"".join([r async for r in requests])


async def _bidi(requests, context):
    async for r in requests:
        yield r


HANDLERS = grpc.method_handlers_generic_handler("echo.Echo", {
    "Unary": grpc.unary_unary_rpc_method_handler(_unary),
    "Wait": grpc.unary_unary_rpc_method_handler(_wait),
    "ServerStream": grpc.unary_stream_rpc_method_handler(_server_stream),
    "ClientStream": grpc.stream_unary_rpc_method_handler(_client_stream),
    "Bidi": grpc.stream_stream_rpc_method_handler(_bidi),
})  # fmt: skip

BIG = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


@contextlib.asynccontextmanager
async def echo_server(options=(), handlers=None):
    """An echo server on 127.0.0.1 (grpc `options` beside BIG's; `handlers` instead of the echo's); yields its
    port."""
    server = aio.server(options=[*BIG, *options])
    server.add_generic_rpc_handlers((handlers or HANDLERS,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port
    finally:
        await server.stop(0)


@contextlib.asynccontextmanager
async def linked(handlers=None):
    """A server (`handlers`, else the echo's) behind a link with no toxic, and a channel through the link: yields
    (link, channel)."""
    from harness.link.links import LinkSet

    async with echo_server(handlers=handlers) as port:
        links = LinkSet()
        try:
            link = await links.add("t", "127.0.0.1:0", f"127.0.0.1:{port}")
            async with aio.insecure_channel(f"127.0.0.1:{link.port}", options=BIG) as channel:
                yield link, channel
        finally:
            await links.close()


def unary(channel: aio.Channel, method: str = "Unary"):
    return channel.unary_unary(SERVICE + method)
