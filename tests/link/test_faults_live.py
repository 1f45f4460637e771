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
from tests.link.echo import BIG, echo_server, linked, unary
from tests.link.test_relay import DRILL, ORGANIC, through, timed, toxic

#: Keepalive as it detects (gRFC A8; the issue: without the ping timeout grpc-python did not notice in 20 s), and a
#: server that permits pings that often (else it answers them with GOAWAY too_many_pings)
KEEPALIVE = [("grpc.keepalive_time_ms", 1000), ("grpc.keepalive_timeout_ms", 1000),
             ("grpc.http2.ping_timeout_ms", 1000), ("grpc.keepalive_permit_without_calls", 1)]  # fmt: skip
PERMIT = [("grpc.http2.min_recv_ping_interval_without_data_ms", 100), ("grpc.http2.max_ping_strikes", 0),
          ("grpc.http2.min_ping_interval_without_data_ms", 100)]  # fmt: skip
APART = [("grpc.use_local_subchannel_pool", 1)]  # each channel its own connection
#: How long a test waits for a condition that should hold within milliseconds before it fails
WAIT_S = 10.0


async def _until(condition, what: str) -> None:
    """Poll `condition` until it holds; fail saying `what` did not happen within WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {WAIT_S:g} s"
        await asyncio.sleep(0.01)


class _InFlight:
    """A server's `Hold` method that notes how many calls it served at once: `b"300"` holds a call 300 ms;
    `b"gate"` holds it until `gate` calls are in at once (then answers `together`), or WAIT_S passed (`alone`)."""

    def __init__(self, gate: int) -> None:
        self.gate, self.now, self.most = gate, 0, 0
        self.changed = asyncio.Event()
        hold = grpc.unary_unary_rpc_method_handler(self._hold)
        self.handlers = grpc.method_handlers_generic_handler("h.H", {"Hold": hold})

    async def _hold(self, request: bytes, context) -> bytes:
        self.now += 1
        self.most = max(self.most, self.now)
        self.changed.set()
        try:
            if request != b"gate":
                await asyncio.sleep(int(request) / 1000)
                return request
            try:
                await asyncio.wait_for(self._all_in(), WAIT_S)
                return b"together"
            except asyncio.TimeoutError:
                return b"alone"
        finally:
            self.now -= 1

    async def _all_in(self) -> None:
        while self.now < self.gate:
            self.changed.clear()
            await self.changed.wait()


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
    """Seen by the server, not by the clock: how many of four calls it served at once."""

    async def main():
        served = _InFlight(gate=4)
        async with linked(served.handlers) as (link, channel):
            hold = channel.unary_unary("/h.H/Hold")
            await hold(b"0", timeout=10)
            (conn,) = link.connections

            def acknowledged() -> bool:
                # the client ACKed the SETTINGS the link sent it (it applies them before it ACKs, RFC 9113
                # §6.5.3): none waits to be sent, none waits for its ACK
                return not conn.h2.down._pending and not conn.h2.settings_fifo

            link.add_toxic(toxic("max_streams", streams=1))
            await _until(acknowledged, "the client's ACK of SETTINGS_MAX_CONCURRENT_STREAMS 1")
            # each held 300 ms: had the client sent them at once, they would overlap on the server
            assert await asyncio.gather(*(hold(b"300", timeout=30) for _ in range(4))) == [b"300"] * 4
            one_at_a_time, served.most = served.most, 0
            link.remove_toxic("max_streams_downstream")
            await _until(acknowledged, "the client's ACK of the server's own SETTINGS_MAX_CONCURRENT_STREAMS")
            # each held until all four are in at once (up to WAIT_S): only if the client sends them together
            together = await asyncio.gather(*(hold(b"gate", timeout=30) for _ in range(4)))
            return one_at_a_time, served.most, together

    one_at_a_time, most, together = asyncio.run(main())
    assert one_at_a_time == 1  # queued by the client: never two on the server at once
    assert most == 4 and together == [b"together"] * 4  # let go: all four on the server at once


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
                await unary(old)(b"ok", timeout=10)
                link.add_toxic(toxic("connect", mode="refuse"))
                async with aio.insecure_channel(address, options=[*BIG, *APART]) as new:
                    with pytest.raises(aio.AioRpcError) as err:
                        await unary(new)(b"x", timeout=10)  # refused: fails at once, not at its deadline
                assert await unary(old)(b"still", timeout=10) == b"still"
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
            calls = []  # per channel, in order: (its call's seconds, whether the toxic acts on its connection)
            for ch in channels:  # a channel connects at its first call: its connection is the one new after it
                before = set(link.connections)
                took = await timed(unary(ch)(b"x", timeout=10))
                (conn,) = link.connections - before
                calls.append((took, "latency_downstream" in conn.acting))
            began_on = sorted(c["connection"] for c in link.touched("latency_downstream")["connections"])
            open_now = len(link.connections)
            for ch in channels:
                await ch.close()
            await links.close()
            return calls, began_on, open_now

    calls, began_on, open_now = asyncio.run(main())
    # three connections open at once, one slot: the toxic acts on exactly one (the first, which took the slot), and
    # its call waited the 300 ms; on the other two it never began (the link's record), so they passed untouched.
    # Their own durations are not judged: a loaded box can stall a bare call past 300 ms too
    assert open_now == 3 and began_on == [0]
    assert [acting for _, acting in calls] == [True, False, False]
    assert calls[0][0] >= 0.3


def test_limit_data_closes_the_connection_once_its_bytes_passed():
    async def body(link, channel):
        await unary(channel)(b"ok", timeout=10)
        link.add_toxic(toxic("limit_data", bytes=1000))
        with pytest.raises(aio.AioRpcError) as err:
            await unary(channel)(os.urandom(100_000), timeout=10)  # the close ends it, not its deadline
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
                    before, conn, seen = set(link.connections), None, ""
                    for c in calls:
                        t = await timed(unary(ch)(b"x", timeout=10, metadata=DRILL if c == "d" else ORGANIC))
                        if conn is None:  # a channel connects at its first call
                            (conn,) = link.connections - before
                        if "latency_downstream" in conn.acting:
                            seen += "S" if t >= 0.3 else "?"  # acting, yet the answer did not wait: wrong either way
                        else:
                            seen += "f"
                    took[name] = seen
            await links.close()
            return took

    # S: the toxic acted on the call's connection once it was answered (the link's own state), and the answer waited
    # its 300 ms; f: the toxic was not acting there (a call's duration alone does not say so: a loaded box can stall
    # a bare call past 300 ms). A connection is faulted from its first drill stream while every stream on it is the
    # drill's; its first organic stream ends that for good
    assert asyncio.run(main()) == {"drill": "SSS", "organic first": "fff", "organic later": "Sff"}
