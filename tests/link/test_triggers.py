"""Triggers counted in protocol units (harness.link.toxics, relay, effects, h2): a toxic's `after_streams` (it acts on
a connection from its N+1-th stream on) and `rst_stream`'s `after_messages` (a drill stream reset once its k-th gRPC
message of the toxic's direction passed), each against its definition with real grpc-python calls on 127.0.0.1;
bad values refused (400) with nothing changed."""

from __future__ import annotations

import asyncio
import json
import os
import struct
import time
import urllib.error
import urllib.request

import grpc
import pytest
from grpc import aio

from harness.link import h2
from harness.link.admin import serve_admin
from harness.link.links import LinkSet
from harness.link.toxics import ToxicError, parse_toxic
from tests.link.echo import BIG, SERVICE, echo_server, linked, unary
from tests.link.test_relay import DRILL, ORGANIC, through, toxic

APART = [("grpc.use_local_subchannel_pool", 1)]  # each channel its own connection
#: The deadline of a call expected to be answered (a loaded CI box stalls for 1-2 s at any point)
ANSWERED_S = 10.0
#: The deadline of a call a blackhole holds: nothing but its deadline ends it, so it is no bound on anything
HELD_S = 1.0


async def _ok(call) -> bool:
    try:
        await call
        return True
    except aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED, exc
        return False


def test_after_streams_blackholes_a_connection_from_its_n_plus_1th_stream_on():
    """`timeout` (a blackhole) with after_streams 2: on each connection the first two calls are answered and every
    later one waits out its deadline; a connection past two streams when it is set is held at once."""

    async def main():
        async with echo_server() as port:
            links = LinkSet()
            link = await links.add("t", "127.0.0.1:0", f"127.0.0.1:{port}")
            address = f"127.0.0.1:{link.port}"
            try:
                async with aio.insecure_channel(address, options=[*BIG, *APART]) as old:
                    for _ in range(3):  # three streams before the toxic is set
                        assert await unary(old)(b"x", timeout=ANSWERED_S) == b"x"
                    link.add_toxic(toxic("timeout", after_streams=2))
                    old_now = await _ok(unary(old)(b"x", timeout=HELD_S))
                    async with aio.insecure_channel(address, options=[*BIG, *APART]) as new:
                        # one at a time, so each is its connection's next stream; the first two are expected to be
                        # answered, the rest held (were any of them held or answered otherwise, the list shows it)
                        deadlines = [ANSWERED_S, ANSWERED_S, HELD_S, HELD_S]
                        new_calls = [await _ok(unary(new)(b"x", metadata=ORGANIC, timeout=d)) for d in deadlines]
                return old_now, new_calls, link.accepted
            finally:
                await links.close()

    old_now, new_calls, accepted = asyncio.run(main())
    assert old_now is False  # its 4th stream: past 2, blackholed
    assert new_calls == [True, True, False, False]
    assert accepted == 2


LATENCY_S = 4.0


def test_after_streams_on_latency_adds_the_delay_from_that_stream_on():
    """latency 4 s upstream, after_streams 1: the connection's first call is not delayed by it, the second is.
    The first is answered (deadline 10 s) in less than the 4 s the toxic would add (loopback answers in
    milliseconds: the 4 s leave a loaded box's 1-2 s stalls their slack); the second cannot be, by its deadline of
    1 s (4 s added to its request before the server sees it: its answer could come 3 s after that deadline at the
    earliest, more than a stall can make grpc's deadline timer late); the third, with time, still is."""

    async def body(link, channel):
        link.add_toxic(toxic("latency", "upstream", latency=int(LATENCY_S * 1000), after_streams=1))
        t0 = time.monotonic()
        first = await _ok(unary(channel)(b"a", timeout=ANSWERED_S))
        first_s = time.monotonic() - t0
        second = await _ok(unary(channel)(b"b", timeout=1.0))
        third = await unary(channel)(b"c", timeout=LATENCY_S + ANSWERED_S)  # it still arrives, late
        return first, first_s < LATENCY_S, second, third

    assert through(body) == (True, True, False, b"c")


MESSAGE = 40_000  # bytes: more than a DATA frame (16,384 by default), so a message's boundary falls mid-frame


async def _spaced(request: bytes, context):
    """`n` messages (from `x-n`) of MESSAGE bytes, 50 ms apart, so each leaves in frames of its own."""
    n = int(dict(context.invocation_metadata()).get("x-n", "5"))
    for i in range(n):
        yield bytes([i]) * MESSAGE
        await asyncio.sleep(0.05)


SPACED = grpc.method_handlers_generic_handler("t.T", {"Spaced": grpc.unary_stream_rpc_method_handler(_spaced)})


def _through_spaced(body):
    async def main():
        async with linked(SPACED) as (link, channel):
            return await body(link, channel)

    return asyncio.run(main())


async def _read(call) -> tuple[list[int], grpc.StatusCode]:
    got = []
    try:
        async for reply in call:
            assert len(reply) == MESSAGE
            got.append(reply[0])
    except aio.AioRpcError as exc:
        return got, exc.code()
    return got, grpc.StatusCode.OK


def test_after_messages_downstream_resets_a_drill_stream_right_after_its_kth_answer():
    async def body(link, channel):
        before = link.metrics.streams_reset._value.get()  # the counter is the process's, by link name
        link.add_toxic(toxic("rst_stream", "downstream", code="INTERNAL_ERROR", after_messages=3))
        spaced = channel.unary_stream("/t.T/Spaced")
        drill = await _read(spaced(b"", metadata=(*DRILL, ("x-n", "6")), timeout=10))
        organic = await _read(spaced(b"", metadata=(*ORGANIC, ("x-n", "6")), timeout=10))
        short = await _read(spaced(b"", metadata=(*DRILL, ("x-n", "2")), timeout=10))  # never reaches a 3rd
        return drill, organic, short, link.metrics.streams_reset._value.get() - before

    drill, organic, short, resets = _through_spaced(body)
    assert drill == ([0, 1, 2], grpc.StatusCode.INTERNAL)  # three answers, then the reset: not before, not after
    assert organic == ([0, 1, 2, 3, 4, 5], grpc.StatusCode.OK)
    assert short == ([0, 1], grpc.StatusCode.OK)
    assert resets == 1


def test_after_messages_upstream_resets_once_the_kth_request_passed():
    """Bidi echo, after_messages 2 upstream: the 1st request's echo comes back; the 2nd request is the last the
    stream carries (the client is told CANCELLED before any echo of it can come back: the reset is sent the
    moment its frame passed); the same on a stream past `after_streams` only."""

    async def body(link, channel):
        link.add_toxic(toxic("rst_stream", "upstream", code="CANCEL", after_messages=2, after_streams=1))
        bidi = channel.stream_stream(SERVICE + "Bidi")

        async def exchange(metadata):
            call = bidi(metadata=metadata, timeout=10)
            echoed = []
            try:
                for part in (b"one", b"two", b"three"):
                    await call.write(part)
                    echoed.append(await call.read())
                await call.done_writing()
                return echoed, (await call.code())
            except aio.AioRpcError as exc:
                return echoed, exc.code()

        spared = await exchange(DRILL)  # the connection's first drill stream: after_streams 1 lets it pass
        drill = await exchange(DRILL)
        organic = await exchange(ORGANIC)
        return spared, drill, organic

    spared, drill, organic = through(body)
    assert spared == ([b"one", b"two", b"three"], grpc.StatusCode.OK)
    assert drill == ([b"one"], grpc.StatusCode.CANCELLED)
    assert organic == ([b"one", b"two", b"three"], grpc.StatusCode.OK)


def _grpc_messages(*sizes: int) -> bytes:
    return b"".join(b"\0" + struct.pack(">I", n) + b"m" * n for n in sizes)


@pytest.mark.parametrize("cut", [1, 3, 5, 6, 7, 11, 1000])
def test_messages_are_counted_across_any_frame_cut_with_padding_and_empty_messages(cut):
    """The counting itself (h2.H2Conn.data_messages), on bytes cut into DATA frames at every kind of place:
    inside a prefix, at its end, inside a message; a padded frame; messages of 0 bytes (a prefix alone)."""
    conn = h2.H2Conn(frozenset())
    conn.count_messages = 1
    seen = []
    conn.on_stream = lambda st, point: seen.append((point, st.messages[0]))
    conn._open(1, True)
    seen.clear()
    data = _grpc_messages(3, 0, 20, 0, 0, 7)
    st = conn.streams[1]
    for i in range(0, len(data), cut):
        chunk = data[i : i + cut]
        if i % 2:  # every other frame padded: pad length, data, padding
            conn.data_messages(st, True, h2.PADDED, bytes([4]) + chunk + b"\0" * 4)
        else:
            conn.data_messages(st, True, 0, chunk)
    assert seen == [("message_upstream", k) for k in range(1, 7)]
    assert st.messages == [6, 0]


@pytest.mark.parametrize("body, words", [
    ({"type": "timeout", "attributes": {"after_streams": -1}}, "bad attribute after_streams"),
    ({"type": "latency", "attributes": {"after_streams": "2"}}, "not an integer"),
    ({"type": "connect", "attributes": {"after_streams": 1}}, "bad attribute after_streams"),
    ({"type": "rst_stream", "attributes": {"after_messages": -1}}, "bad attribute after_messages"),
    ({"type": "rst_stream", "attributes": {"after_messages": 1.5}}, "not an integer"),
    ({"type": "rst_stream", "attributes": {"after_messages": 2, "at": "data"}}, "not both"),
    ({"type": "latency", "attributes": {"after_messages": 2}}, "bad attribute after_messages"),
])  # fmt: skip
def test_bad_trigger_values_get_400_through_the_admin_api_and_change_nothing(body, words):
    async def main():
        links = LinkSet()
        async with echo_server() as port:
            link = await links.add("t", "127.0.0.1:0", f"127.0.0.1:{port}")
            link.add_toxic(toxic("latency", latency=5))
            admin = await serve_admin(links, "127.0.0.1", 0)
            base = f"http://127.0.0.1:{admin.sockets[0].getsockname()[1]}/proxies/t/toxics"

            def ask(method: str, url: str, payload=None):
                req = urllib.request.Request(url, method=method, data=None if payload is None else
                                             json.dumps(payload).encode())  # fmt: skip
                try:
                    with urllib.request.urlopen(req, timeout=10) as resp:
                        return resp.status, json.loads(resp.read())
                except urllib.error.HTTPError as exc:
                    return exc.code, json.loads(exc.read())

            try:
                before = await asyncio.to_thread(ask, "GET", base)
                new = await asyncio.to_thread(ask, "POST", base, body)
                update = (400, None)
                if body["type"] == "latency":  # an update of the latency toxic there with the same bad attributes
                    update = await asyncio.to_thread(ask, "POST", base + "/latency_downstream",
                                                     {"attributes": body["attributes"]})
                after = await asyncio.to_thread(ask, "GET", base)
            finally:
                admin.close()
                await links.close()
            return before, new, update, after

    before, new, update, after = asyncio.run(main())
    assert new[0] == 400 and words in json.dumps(new[1])
    assert update[0] == 400
    assert after == before and [t["attributes"] for t in after[1]] == [{"latency": 5, "jitter": 0}]


def test_toxiproxys_types_read_back_without_the_extension_unless_it_is_given():
    assert "after_streams" not in parse_toxic({"type": "timeout"}).attributes
    assert parse_toxic({"type": "timeout", "attributes": {"after_streams": 2}}).attributes == {
        "timeout": 0, "mode": "user", "after_streams": 2}
    with pytest.raises(ToxicError):
        parse_toxic({"type": "goaway", "attributes": {"after_streams": "x"}})


def test_a_connection_that_is_not_http2_has_no_streams_so_after_streams_never_acts():
    async def main():
        async def echo(reader, writer):
            while data := await reader.read(65536):
                writer.write(data)
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        links = LinkSet()
        link = await links.add("t", "127.0.0.1:0", f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
        link.add_toxic(toxic("timeout", after_streams=0, stream="downstream"))
        link.add_toxic(parse_toxic({"name": "later", "type": "reset_peer", "attributes": {"after_streams": 1}}))
        reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
        # the link accepts the connection and connects upstream before the toxics are set on it: wait for that
        deadline = time.monotonic() + 10
        while not (len(link.connections) == 1 and next(iter(link.connections)).early is None):
            assert time.monotonic() < deadline, "the link did not relay the connection within 10 s"
            await asyncio.sleep(0.01)
        writer.write(os.urandom(100))
        try:  # an echo through the link comes in milliseconds; a stall only makes the wait less likely to see one
            got = await asyncio.wait_for(reader.read(100), 0.5)
        except asyncio.TimeoutError:
            got = None
        (conn,) = link.connections
        acting, deferred = sorted(conn.acting), sorted(conn.deferred)
        writer.close()
        await links.close()
        server.close()
        return got, acting, deferred

    # the blackhole (after_streams 0) acts at once and holds the echo; the reset waits for a stream that never comes
    assert asyncio.run(main()) == (None, ["timeout_downstream"], ["later"])
