"""HTTP/2 as the relay reads it (harness.link.h2): frames found whatever the chunking, streams told apart by tenant,
frames dropped, withheld and inserted only at frame boundaries. Frames are built by hand and by `hpack`'s encoder,
as a client would send them."""

from __future__ import annotations

import hpack
import pytest

from harness.link import h2

TENANT = [(":method", "POST"), (":path", "/echo.Echo/Unary"), ("x-tenant-id", "tenant-drill")]
ORGANIC = [(":method", "POST"), (":path", "/echo.Echo/Unary"), ("x-tenant-id", "someone")]


def organic_split():
    """A client's bytes: stream 1 (drill, HEADERS then DATA), a PING, stream 3 (organic; a padded HEADERS whose
    block goes on in a CONTINUATION), a WINDOW_UPDATE, stream 5 (drill, HEADERS alone); and its frames."""
    enc = hpack.Encoder()
    first = enc.encode(TENANT)
    block = enc.encode(ORGANIC)
    third = enc.encode(TENANT)
    frames = [
        h2.settings({}),
        h2.frame(h2.HEADERS, h2.END_HEADERS, 1, first),
        h2.frame(h2.DATA, h2.END_STREAM, 1, b"\0\0\0\0\3abc"),
        h2.frame(h2.PING, 0, 0, b"12345678"),
        h2.frame(h2.HEADERS, h2.PADDED, 3, b"\x02" + block[:3] + b"\0\0"),
        h2.frame(h2.CONTINUATION, h2.END_HEADERS, 3, block[3:]),
        h2.frame(h2.WINDOW_UPDATE, 0, 0, b"\0\0\1\0"),
        h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, 5, third),
    ]
    return h2.PREFACE + b"".join(frames), frames


def feed_in_chunks(reader: h2.FrameReader, data: bytes, size: int) -> bytes:
    return b"".join(reader.feed(data[i : i + size]) for i in range(0, len(data), size))


@pytest.mark.parametrize("size", [1, 2, 5, 9, 10, 17, 64, 10_000])
def test_bytes_pass_unchanged_and_streams_are_told_apart_whatever_the_chunking(size):
    data, _ = organic_split()
    conn = h2.H2Conn(frozenset({"tenant-drill"}))
    seen = []
    conn.on_stream = lambda st, point: seen.append((st.id, st.drill, point))
    assert feed_in_chunks(conn.up, data, size) == data
    assert (conn.drill_count, conn.organic_count, conn.highest, conn.blind) == (2, 1, 5, False)
    assert seen == [(1, True, "headers"), (1, True, "data"), (1, True, "end"), (3, False, "headers"),
                    (5, True, "headers"), (5, True, "end")]  # fmt: skip


@pytest.mark.parametrize("size", [1, 7, 10_000])
def test_dropped_frames_leave_every_other_byte_in_order(size):
    data, frames = organic_split()
    conn = h2.H2Conn(frozenset({"tenant-drill"}))
    conn.up.drop = frozenset({h2.PING})
    conn.up.hold = frozenset({h2.WINDOW_UPDATE})
    out = feed_in_chunks(conn.up, data, size)
    assert out == h2.PREFACE + b"".join(f for f in frames if f[3] not in (h2.PING, h2.WINDOW_UPDATE))
    assert conn.up.held == [frames[6]]


def test_a_frame_inserted_mid_frame_waits_for_the_boundary():
    data, frames = organic_split()
    conn = h2.H2Conn(frozenset())
    sent = []
    conn.up.send = sent.append
    cut = len(h2.PREFACE) + len(frames[0]) + 9 + 3  # inside the first HEADERS frame's payload
    out = conn.up.feed(data[:cut])
    conn.up.inject(h2.rst_stream(1, 8))
    assert sent == []  # mid-frame: not now
    out += conn.up.feed(data[cut:])
    at = len(h2.PREFACE) + len(frames[0]) + len(frames[1])
    assert out == data[:at] + h2.rst_stream(1, 8) + data[at:]
    conn.up.inject(h2.rst_stream(3, 8))  # at a boundary and idle: sent at once
    assert sent == [h2.rst_stream(3, 8)]


def test_server_settings_are_read_and_the_relays_own_are_not_acknowledged_to_the_server():
    conn = h2.H2Conn(frozenset())
    down = conn.down.feed(h2.settings({h2.SETTINGS_MAX_CONCURRENT_STREAMS: 100, 4: 65535}))
    assert conn.server_max_streams == 100 and down
    emitted = []
    conn.down.send = emitted.append
    conn.down.inject(h2.settings({h2.SETTINGS_MAX_CONCURRENT_STREAMS: 1}), lambda: conn.settings_fifo.append(True))
    assert list(conn.settings_fifo) == [False, True]
    ack = h2.frame(h2.SETTINGS, h2.ACK, 0)
    client = h2.PREFACE + h2.settings({}) + ack + ack
    # the client acknowledges the server's SETTINGS, then the relay's: only the first reaches the server
    assert conn.up.feed(client) == h2.PREFACE + h2.settings({}) + ack


def test_a_block_that_cannot_be_decoded_makes_the_connection_blind_never_drill():
    conn = h2.H2Conn(frozenset({"tenant-drill"}))
    bad = h2.frame(h2.HEADERS, h2.END_HEADERS, 1, b"\xff\xff\xff\xff")
    good = h2.frame(h2.HEADERS, h2.END_HEADERS, 3, hpack.Encoder().encode(TENANT))
    conn.up.feed(h2.PREFACE + h2.settings({}) + bad + good)
    assert conn.blind and conn.drill_count == 0 and conn.organic_count == 2


def test_goaways_last_stream():
    conn = h2.H2Conn(frozenset())
    conn.up.feed(organic_split()[0])
    conn.streams.pop(1)  # stream 1 ended on both sides; 3 is in flight
    assert conn.last_stream("all") == h2.MAX_STREAM_ID
    assert conn.last_stream("current") == 5
    assert conn.last_stream("before_in_flight") == 1


@pytest.mark.parametrize("split", [False, True])
def test_a_header_block_past_the_bound_is_not_kept_and_its_streams_count_as_organic(split):
    conn = h2.H2Conn(frozenset({"tenant-drill"}))
    huge = hpack.Encoder().encode([("x-tenant-id", "tenant-drill"), ("x-pad", "p" * (h2.MAX_BLOCK + 10))],
                                  huffman=False)  # fmt: skip
    if split:  # a HEADERS frame that fits, then a CONTINUATION that carries the block past the bound
        frames = h2.frame(h2.HEADERS, 0, 1, huge[:1000]) + h2.frame(h2.CONTINUATION, h2.END_HEADERS, 1, huge[1000:])
    else:
        frames = h2.frame(h2.HEADERS, h2.END_HEADERS, 1, huge)
    later = h2.frame(h2.HEADERS, h2.END_HEADERS, 3, hpack.Encoder().encode(TENANT))
    data = h2.PREFACE + h2.settings({}) + frames + later
    assert feed_in_chunks(conn.up, data, 65536) == data
    assert conn.blind and len(conn._block) == 0 and conn.up._collect is None
    # both streams counted, neither as the drill's: a fault for drill streams never acts on what it cannot read
    assert (conn.drill_count, conn.organic_count, sorted(conn.streams)) == (0, 2, [1, 3])
