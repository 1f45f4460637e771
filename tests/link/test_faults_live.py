"""The HTTP/2 toxics, the connect faults and the cap on faulted connections with real grpc-python clients and servers,
seen as a caller sees them (the link, the server and the client in one event loop, `through`)."""

from __future__ import annotations

import asyncio
import os
import time

import grpc
import pytest
from grpc import aio

from harness.link.links import LinkSet
from harness.link.toxics import parse_toxic
from tests.link.echo import BIG, echo_server, unary
from tests.link.test_relay import DRILL, ORGANIC, through, timed, toxic

#: Keepalive as it detects (gRFC A8; the issue: without the ping timeout grpc-python did not notice in 20 s), and a
#: server that permits pings that often (else it answers them with GOAWAY too_many_pings)
KEEPALIVE = [("grpc.keepalive_time_ms", 1000), ("grpc.keepalive_timeout_ms", 1000),
             ("grpc.http2.ping_timeout_ms", 1000), ("grpc.keepalive_permit_without_calls", 1)]  # fmt: skip
PERMIT = [("grpc.http2.min_recv_ping_interval_without_data_ms", 100), ("grpc.http2.max_ping_strikes", 0),
          ("grpc.http2.min_ping_interval_without_data_ms", 100)]  # fmt: skip
APART = [("grpc.use_local_subchannel_pool", 1)]  # each channel its own connection


def test_ping_blackhole_lets_keepalive_detect_a_silent_peer_while_data_flows_without_it():
    async def body(link, channel):
        wait = unary(channel, "Wait")
        assert await wait(b"2500", timeout=10) == b"2500"  # pings answered: a long call lives on
        link.add_toxic(toxic("ping_blackhole", "upstream"))
        t0 = time.monotonic()
        with pytest.raises(aio.AioRpcError) as err:
            await wait(b"10000", timeout=8)
        return err.value.code(), time.monotonic() - t0

    code, took = through(body, server_options=PERMIT, channel_options=KEEPALIVE)
    # a PING is sent within keepalive time (1 s) of the last, and its missing ACK is given up after 1 s: ~2 s,
    # far from the 8 s deadline; 5 s leaves grpc's timer wheel and a busy box their slack
    assert code == grpc.StatusCode.UNAVAILABLE and took < 5.0


def test_max_streams_makes_the_client_queue_its_calls_then_lets_them_go():
    async def body(link, channel):
        wait = unary(channel, "Wait")
        await wait(b"0", timeout=5)
        link.add_toxic(toxic("max_streams", streams=1))
        await asyncio.sleep(0.2)  # the SETTINGS reach the client
        one_at_a_time = await timed(asyncio.gather(*(wait(b"300", timeout=10) for _ in range(4))))
        link.remove_toxic("max_streams_downstream")
        await asyncio.sleep(0.2)
        together = await timed(asyncio.gather(*(wait(b"300", timeout=10) for _ in range(4))))
        return one_at_a_time, together

    one_at_a_time, together = through(body)
    # four 300-ms calls: one stream at a time they take 4 x 300 ms; all at once about 300 ms
    assert one_at_a_time >= 1.2 and together < 0.9


def test_window_stall_holds_a_large_answer_until_it_ends():
    async def body(link, channel):
        data = os.urandom(8 << 20)
        await unary(channel)(b"warm", timeout=5)
        link.add_toxic(toxic("window_stall", "upstream"))
        call = asyncio.ensure_future(unary(channel)(data, timeout=20))
        await asyncio.sleep(1.5)
        stalled = not call.done()
        link.remove_toxic("window_stall_upstream")  # the withheld WINDOW_UPDATEs go on
        return stalled, (await call) == data

    # 8 MB cannot pass in the windows granted before the stall (HTTP/2's 64 KiB, grpc's BDP-grown ones, well under
    # 8 MB): the answer waits while the client's WINDOW_UPDATEs are withheld, and completes once they go
    assert through(body) == (True, True)


def test_connect_refuse_fails_new_connections_and_leaves_open_ones_alone():
    async def main():
        async with echo_server() as port:
            links = LinkSet()
            link = await links.add("t", "127.0.0.1:0", f"127.0.0.1:{port}")
            address = f"127.0.0.1:{link.port}"
            async with aio.insecure_channel(address, options=[*BIG, *APART]) as old:
                await unary(old)(b"ok", timeout=5)
                link.add_toxic(toxic("connect", mode="refuse"))
                async with aio.insecure_channel(address, options=[*BIG, *APART]) as new:
                    with pytest.raises(aio.AioRpcError) as err:
                        await unary(new)(b"x", timeout=3)
                assert await unary(old)(b"still", timeout=5) == b"still"
                link.remove_toxic("connect_downstream")
                link.add_toxic(toxic("connect", mode="hang"))
                async with aio.insecure_channel(address, options=[*BIG, *APART]) as new:
                    with pytest.raises(aio.AioRpcError) as hung:
                        await unary(new)(b"x", timeout=1.5)
            await links.close()
            return err.value.code(), hung.value.code()

    # refused: the connection reset at once (UNAVAILABLE); hung: accepted, never answered (the deadline)
    assert asyncio.run(main()) == (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def test_the_cap_on_faulted_connections_lets_the_rest_pass_untouched():
    async def main():
        async with echo_server() as port:
            links = LinkSet(max_faulted=1)
            link = await links.add("t", "127.0.0.1:0", f"127.0.0.1:{port}")
            link.add_toxic(toxic("latency", latency=300))
            channels = [aio.insecure_channel(f"127.0.0.1:{link.port}", options=[*BIG, *APART]) for _ in range(3)]
            took = [await timed(unary(ch)(b"x", timeout=5)) for ch in channels]
            for ch in channels:
                await ch.close()
            await links.close()
            return took

    took = asyncio.run(main())
    # three connections open at once, one slot: exactly one is delayed (300 ms), the others pass (< 150 ms)
    assert sum(t >= 0.3 for t in took) == 1 and sum(t < 0.15 for t in took) == 2


def test_limit_data_closes_the_connection_once_its_bytes_passed():
    async def body(link, channel):
        await unary(channel)(b"ok", timeout=5)
        link.add_toxic(toxic("limit_data", bytes=1000))
        with pytest.raises(aio.AioRpcError) as err:
            await unary(channel)(os.urandom(100_000), timeout=5)
        return err.value.code()

    assert through(body) == grpc.StatusCode.UNAVAILABLE


def test_drill_only_faults_connections_that_carried_only_drill_streams():
    async def main():
        async with echo_server() as port:
            links = LinkSet()
            link = await links.add("t", "127.0.0.1:0", f"127.0.0.1:{port}")
            link.add_toxic(parse_toxic({"type": "latency", "drill_only": True, "attributes": {"latency": 300}}))
            took = {}
            for name, calls in (("drill", "ddd"), ("organic first", "odd"), ("organic later", "dod")):
                async with aio.insecure_channel(f"127.0.0.1:{link.port}", options=[*BIG, *APART]) as ch:
                    seen = ""
                    for c in calls:
                        t = await timed(unary(ch)(b"x", timeout=5, metadata=DRILL if c == "d" else ORGANIC))
                        seen += "S" if t >= 0.3 else "f"
                    took[name] = seen
            await links.close()
            return took

    # S: the answer waited 300 ms; f: it did not (a bare call here is well under 300 ms). A connection is faulted
    # from its first drill stream while every stream on it is the drill's; its first organic stream ends that for good
    assert asyncio.run(main()) == {"drill": "SSS", "organic first": "fff", "organic later": "Sff"}
