"""The relay with real grpc-python clients and servers on 127.0.0.1 (harness.link.relay): bytes pass exactly, and
each toxic does what its definition says, seen as a caller sees it.

Each test runs an echo server (tests/link/echo.py), a link in front of it and the client in one event loop
(`through`), as a runner drives the Python API. Tolerances are derived where they are stated.
"""

from __future__ import annotations

import asyncio
import os
import time

import grpc
import pytest
from grpc import aio

from harness.link.links import LinkSet
from harness.link.relay import HELD_HIGH, WRITE_HIGH
from harness.link.toxics import parse_toxic
from tests.link.echo import BIG, SERVICE, echo_server, unary

DRILL = (("x-tenant-id", "tenant-drill"),)
ORGANIC = (("x-tenant-id", "tenant-a"),)
#: A lower bound on a wait the relay holds: asyncio may run a timer up to its clock resolution (1 ms) early
EARLY_S = 0.001


def through(body, server_options=(), channel_options=(), **link_options):
    """`body(link, channel)` with a channel to a link in front of an echo server; its result."""

    async def main():
        async with echo_server(server_options) as port:
            links = LinkSet(**link_options)
            link = await links.add("t", "127.0.0.1:0", f"127.0.0.1:{port}")
            try:
                options = [*BIG, *channel_options]
                async with aio.insecure_channel(f"127.0.0.1:{link.port}", options=options) as channel:
                    return await body(link, channel)
            finally:
                await links.close()

    return asyncio.run(main())


def toxic(kind: str, stream: str = "downstream", **attributes):
    return parse_toxic({"type": kind, "stream": stream, "attributes": attributes})


async def timed(call) -> float:
    t = time.perf_counter()
    await call
    return time.perf_counter() - t


def test_unary_calls_pass_byte_exact_at_every_size_and_concurrently():
    async def body(link, channel):
        for size in (0, 1, 16_383, 16_385, 1 << 20, 8 << 20):
            data = os.urandom(size)
            assert await unary(channel)(data, timeout=20) == data
        many = [os.urandom(100 + i) for i in range(200)]
        assert await asyncio.gather(*(unary(channel)(m, timeout=20) for m in many)) == many
        return len(link.connections)

    assert through(body) == 1  # one connection carried them all


def test_streams_pass_byte_exact_in_order():
    async def body(link, channel):
        data = os.urandom(100_000)
        replies = [r async for r in channel.unary_stream(SERVICE + "ServerStream")(data, metadata=(("x-n", "7"),))]
        assert replies == [data] * 7
        parts = [os.urandom(1000 * (i + 1)) for i in range(20)]

        async def gen():
            for p in parts:
                yield p

        assert await channel.stream_unary(SERVICE + "ClientStream")(gen(), timeout=20) == b"".join(parts)
        call = channel.stream_stream(SERVICE + "Bidi")()
        for p in parts:
            await call.write(p)
            assert await call.read() == p
        await call.done_writing()
        assert await call.read() == aio.EOF

    through(body)


@pytest.mark.parametrize("stream", ["downstream", "upstream"])
def test_latency_adds_its_time_once_and_never_early(stream):
    """Was `..._within_2_ms`: a CI run beside two CPU hogs read 43.6 ms for the quickest of 15 calls, the OS waking the
    process late on every one. How close to 40 ms the relay sends is a speed target, measured on a core of its own by
    benchmarks/link_latency_accuracy.py (docs/link.md); here, what holds on any box."""

    async def body(link, channel):
        call = unary(channel)
        await call(b"warm", timeout=5)
        link.add_toxic(toxic("latency", stream, latency=40))
        after = [await timed(call(b"x", timeout=5)) for _ in range(15)]
        return min(after)

    # A unary call crosses the toxic's direction once: its bytes there (headers, message and trailers, in one or
    # a few chunks written together) each leave 40 ms after they came, never earlier (asyncio may run a timer up to
    # its 1-ms clock resolution early: EARLY_S), so every call with the toxic takes at least 40 ms less that. Applied
    # twice (both directions, or twice per chunk) every call would take at least 80 ms less twice that: the quickest
    # of 15 under 78 ms tells once from twice unless the box stalls each of the 15 calls by 38 ms
    slowed = through(body)
    assert 0.040 - EARLY_S <= slowed < 0.080 - 2 * EARLY_S, slowed


def test_bandwidth_carries_the_rate_within_10_percent():
    async def body(link, channel):
        call = unary(channel)
        data = os.urandom(500_000)
        await call(data, timeout=10)
        bare = await timed(call(data, timeout=10))
        link.add_toxic(toxic("bandwidth", rate=500))  # 500 KB/s downstream: the 500 kB answer takes 1 s
        slowed = await timed(call(data, timeout=10))
        return bare, slowed

    bare, slowed = through(body)
    # the answer is 500,000 bytes of message plus gRPC and HTTP/2 framing (5 + 9 bytes per 16 KiB frame, ~0.1 %):
    # 1.0 s at the rate; the call's own time (bare, the upstream half included) adds at most `bare`
    assert 0.9 <= slowed <= 1.1 + bare


def test_reset_peer_is_seen_as_unavailable():
    async def body(link, channel):
        call = unary(channel)
        await call(b"ok", timeout=5)
        link.add_toxic(toxic("reset_peer", "upstream", timeout=0))
        with pytest.raises(aio.AioRpcError) as err:
            await call(b"x", timeout=5)
        return err.value.code()

    assert through(body) == grpc.StatusCode.UNAVAILABLE


def test_timeout_zero_holds_the_connection_open_while_data_is_dropped():
    async def body(link, channel):
        call = unary(channel)
        await call(b"ok", timeout=5)
        (conn,) = link.connections
        link.add_toxic(toxic("timeout", timeout=0))
        with pytest.raises(aio.AioRpcError) as err:
            await call(b"x", timeout=1.5)
        await asyncio.sleep(0.5)
        # the answer never came, yet neither end was closed: the caller waits out its deadline
        return err.value.code(), conn.client.closed, conn.server.closed, len(link.connections)

    assert through(body) == (grpc.StatusCode.DEADLINE_EXCEEDED, False, False, 1)


def test_goaway_drains_the_streams_in_flight_and_new_calls_take_a_new_connection():
    async def body(link, channel):
        await unary(channel)(b"ok", timeout=5)
        waits = [asyncio.ensure_future(unary(channel, "Wait")(b"600", timeout=5)) for _ in range(3)]
        await asyncio.sleep(0.2)
        link.add_toxic(toxic("goaway", code="NO_ERROR", last_stream="current", debug="max_age"))
        assert await asyncio.gather(*waits) == [b"600"] * 3  # in flight: finished on the old connection
        assert await unary(channel)(b"new", timeout=5) == b"new"
        return link.accepted

    assert through(body) == 2


def test_rst_stream_resets_drill_streams_only_and_organic_ones_on_the_same_connection_pass():
    async def body(link, channel):
        await unary(channel)(b"ok", timeout=5)
        link.add_toxic(toxic("rst_stream", code="INTERNAL_ERROR"))
        wait = unary(channel, "Wait")
        calls = [wait(b"300", metadata=DRILL if i % 2 else ORGANIC, timeout=5) for i in range(20)]
        results = await asyncio.gather(*calls, return_exceptions=True)
        return results, len(link.connections), link.accepted

    results, open_now, accepted = through(body)
    drill, organic = results[1::2], results[0::2]
    assert organic == [b"300"] * 10
    assert [r.code() for r in drill] == [grpc.StatusCode.INTERNAL] * 10
    assert (open_now, accepted) == (1, 1)  # all on one connection


def test_a_slow_reader_slows_the_writer_nothing_buffers_without_bound():
    """A server that writes 64 MB to a client that reads nothing: the link holds at most its bounds."""

    async def main():
        total = 64 << 20
        sent = 0

        async def flood(reader, writer):
            nonlocal sent
            chunk = b"x" * 65536
            try:
                while sent < total:
                    writer.write(chunk)
                    sent += len(chunk)
                    await writer.drain()  # blocks while the link does not read
            except ConnectionError:
                pass

        server = await asyncio.start_server(flood, "127.0.0.1", 0)
        links = LinkSet()
        link = await links.add("t", "127.0.0.1:0", f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
        link.add_toxic(toxic("latency", latency=200))
        reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
        await asyncio.sleep(2.0)
        (conn,) = link.connections
        held, buffered = conn.down.held, conn.client.transport.get_write_buffer_size()
        writer.close()
        await links.close()
        server.close()
        return sent, held, buffered, total

    sent, held, buffered, total = asyncio.run(main())
    # a read is at most 256 KiB (asyncio's buffer): the bounds are passed by one read at most
    assert held <= HELD_HIGH + (256 << 10)
    assert buffered <= WRITE_HIGH + (256 << 10)
    # the rest waits in the kernel's socket buffers (a few MB on loopback), not in the link: the writer was held
    assert sent < total / 4


@pytest.mark.parametrize("at", ["data", "end"])
def test_rst_stream_mid_message_or_after_the_data_resets_the_drill_stream(at):
    async def body(link, channel):
        link.add_toxic(toxic("rst_stream", code="CANCEL", at=at))
        call = channel.stream_unary(SERVICE + "ClientStream")

        async def parts():
            yield b"one"
            await asyncio.sleep(0.2)
            yield b"two"

        with pytest.raises(aio.AioRpcError) as err:
            await call(parts(), metadata=DRILL, timeout=5)
        organic = await call(parts(), metadata=ORGANIC, timeout=5)
        return err.value.code(), organic

    assert through(body) == (grpc.StatusCode.CANCELLED, b"onetwo")


def test_a_refused_stream_reaches_grpc_python_as_unavailable_and_limit_counts_the_resets():
    async def body(link, channel):
        await unary(channel)(b"ok", timeout=5)
        before = link.metrics.streams_reset._value.get()
        link.add_toxic(toxic("rst_stream", code="REFUSED_STREAM", limit=1))
        with pytest.raises(aio.AioRpcError) as err:
            await unary(channel)(b"first", metadata=DRILL, timeout=5)
        reply = await unary(channel)(b"again", metadata=DRILL, timeout=5)
        return err.value.code(), reply, link.metrics.streams_reset._value.get() - before

    # grpc-python (1.85) does not retry a REFUSED_STREAM sent after its whole request left (no retry policy):
    # UNAVAILABLE, the status a retry policy retries on; the second drill call passes (limit 1), one reset counted
    assert through(body) == (grpc.StatusCode.UNAVAILABLE, b"again", 1)
