"""HTTP/2 as a relay sees it: frame boundaries, streams, which streams carry the drill tenant.

`H2Conn` holds one connection's view; its two `FrameReader`s walk the bytes of each direction as
they pass (9-byte frame headers read by hand, RFC 9113 §4.1). Only the client's HEADERS (and
CONTINUATION) blocks are read, all of them in order (the dynamic table needs every block), for the
keys that tag a drill's stream (`harness.link.hscan`); from the server only frame headers are read,
and its SETTINGS. A reader hands back the bytes
to forward: the same chunk when nothing changed (the common case: no copy), else the chunk with
frames dropped (`drop`), withheld (`hold`) or frames inserted at a frame boundary (`inject`); with call
faults on (`H2Conn.calls`, `harness.link.calls`) that executor is asked about every frame as it starts, and a
frame it takes (`TAKE`) is handed to it whole once read, to forward, hold, drop or rewrite. A
header cut by the end of a chunk is held back until its 9 bytes are in, so a frame is always
judged whole. A block that fails to decode makes the connection blind: its streams count as organic
from then on (a fault never acts on a stream it cannot tell is a drill's).
"""

from __future__ import annotations

import dataclasses
import struct
from collections import deque
from collections.abc import Callable

from harness.core import headers as h
from harness.link.hscan import HeaderScanner

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_HEADER_TABLE_SIZE, SETTINGS_MAX_CONCURRENT_STREAMS = 0x1, 0x3
MAX_STREAM_ID = (1 << 31) - 1
#: A client's header block read at most (bytes); past it the connection is read blind, so memory stays bounded
#: (a server's own limit, SETTINGS_MAX_HEADER_LIST_SIZE, is grpc's 8 KiB to 16 KiB by default)
MAX_BLOCK = 1 << 20
_HEAD = struct.Struct(">BHBBI")  # 24-bit length as a byte and a short, type, flags, stream id
#: what a frame's start may ask of its reader: pass it, drop it, withhold it (`FrameReader.held`), or hand it whole
#: to the call-fault executor (`H2Conn.calls.took`)
PASS, DROP, HOLD, TAKE = 0, 1, 2, 3


def frame(ftype: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One frame, header and payload."""
    size = len(payload)
    return _HEAD.pack(size >> 16, size & 0xFFFF, ftype, flags, stream & MAX_STREAM_ID) + payload


def goaway(last_stream: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, struct.pack(">II", last_stream & MAX_STREAM_ID, code) + debug)


def rst_stream(stream: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream, struct.pack(">I", code))


def settings(pairs: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs.items()))


def message_ends(state: list, payload: bytes) -> list[int]:
    """Where gRPC messages (a 5-byte prefix: flag, length; then the message) end in `payload`, a stream's next data:
    offsets just past each. `state` ([message bytes still to come, the prefix read so far]) carries across frames."""
    ends: list[int] = []
    pos, n = 0, len(payload)
    while pos < n:
        if state[0]:
            take = min(state[0], n - pos)
            state[0] -= take
            pos += take
            if state[0]:
                break
        else:
            prefix = state[1] + payload[pos : pos + 5 - len(state[1])]
            pos += len(prefix) - len(state[1])
            if len(prefix) < 5:
                state[1] = prefix
                break
            state[0], state[1] = int.from_bytes(prefix[1:5], "big"), b""
            if state[0]:
                continue
        ends.append(pos)
    return ends


#: The header keys read from a client's blocks: the x-* drill keys, and the W3C `baggage` they travel in instead
#: past a hop that forwards only what OpenTelemetry's propagation carries (contracts "Baggage")
KEYS = frozenset(k.encode() for k in (*h.X_DRILL_KEYS, h.BAGGAGE))
_TENANT, _BAGGAGE = h.TENANT.encode(), h.BAGGAGE.encode()


def tenant_of(found: dict[bytes, bytes]) -> str | None:
    """The drill tenant a stream's headers carry, by the interceptors' rule (`harness.core.headers.metadata_dict`):
    `x-tenant-id`, else the baggage's `drill.tenant` where the stream has no x-* drill key."""
    value = found.get(_TENANT)
    if value is not None:
        return value.decode("utf-8", "replace")
    if _BAGGAGE not in found:
        return None
    md = h.metadata_dict([(k.decode("latin-1"), v.decode("utf-8", "replace")) for k, v in found.items()])
    return md.get(h.TENANT)


@dataclasses.dataclass(slots=True)
class Stream:
    """A stream the client opened: whether it carries the drill tenant, and how far it got."""

    id: int
    drill: bool
    #: the client's first DATA frame passed / its END_STREAM passed
    data: bool = False
    ended: bool = False
    #: gRPC messages counted per direction (client to server, server to client), on a stream opened while a
    #: toxic asked for them (`H2Conn.count_messages`); `framing` is each direction's place in its messages
    messages: list[int] | None = None
    framing: list[list] | None = None


class FrameReader:
    """The frames of one direction: walks them, tells `H2Conn` what passes, edits the bytes when asked."""

    def __init__(self, conn: H2Conn, to_server: bool) -> None:
        self.conn = conn
        self.to_server = to_server
        self.preface = len(PREFACE) if to_server else 0
        #: whether frames may be inserted yet: after the client preface / the server's first frame
        self.started = False
        self.send: Callable[[bytes], None] | None = None  # writes at once (the relay sets it)
        self.drop: frozenset[int] = frozenset()  # frame types dropped
        self.hold: frozenset[int] = frozenset()  # frame types withheld, kept in `held`
        self.held: list[bytes] = []
        self._pending: list[tuple[bytes, Callable[[], None] | None]] = []
        self._carry = b""
        self._left = 0  # payload bytes of the current frame still to come
        self._in_frame = False
        self._ftype = self._flags = self._stream = 0
        self._mode = PASS  # PASS, DROP, HOLD or TAKE
        self._collect: bytearray | None = None
        self._hold_buf: bytearray | None = None
        self._feeding = False
        self._message_stream: Stream | None = None  # the stream whose DATA payload is collected, to count messages

    @property
    def at_boundary(self) -> bool:
        return not self._in_frame and not self._carry and self.preface == 0

    def inject(self, data: bytes, emitted: Callable[[], None] | None = None) -> None:
        """Insert a frame at the next frame boundary (now, if the direction is at one and idle)."""
        if not self._feeding and self.started and self.at_boundary and self.send is not None:
            self.send(data)
            if emitted:
                emitted()
        else:
            self._pending.append((data, emitted))

    def release_held(self) -> None:
        held, self.held = self.held, []
        for data in held:
            self.inject(data)

    def feed(self, data: bytes) -> bytes:
        """The bytes to forward for this chunk."""
        self._feeding = True
        try:
            return self._feed(data)
        finally:
            self._feeding = False

    def _feed(self, data: bytes) -> bytes:
        if self._carry:
            data, self._carry = self._carry + data, b""
        n, pos, keep = len(data), 0, 0
        out: list[bytes] | None = None
        if self.preface:
            take = min(self.preface, n)
            pos = take
            self.preface -= take
        while True:
            if self._in_frame:
                take = min(self._left, n - pos)
                if take:
                    piece = data[pos : pos + take]
                    if self._collect is not None:
                        self._collect += piece
                    if self._mode:
                        if self._mode >= HOLD:
                            self._hold_buf += piece
                        if out is None:
                            out = []
                        out.append(data[keep:pos])
                        keep = pos + take
                    pos += take
                    self._left -= take
                if self._left:
                    break
                self._in_frame = False
                self._frame_done()
            if self._pending and self.started and self.preface == 0:
                if out is None:
                    out = []
                out.append(data[keep:pos])
                keep = pos
                pending, self._pending = self._pending, []
                for frame_bytes, emitted in pending:
                    out.append(frame_bytes)
                    if emitted:
                        emitted()
            if pos >= n:
                break
            if n - pos < 9:
                self._carry = data[pos:]
                n = pos
                break
            hi, lo, ftype, flags, stream = _HEAD.unpack_from(data, pos)
            self._left, self._ftype, self._flags, self._stream = (hi << 16) | lo, ftype, flags, stream & MAX_STREAM_ID
            self._in_frame = True
            self._mode = self._frame_start()
            if self._mode:
                if out is None:
                    out = []
                out.append(data[keep:pos])
                if self._mode >= HOLD:
                    self._hold_buf = bytearray(data[pos : pos + 9])
                keep = pos + 9
            pos += 9
        if out is None:
            return data if n == len(data) else data[:n]
        out.append(data[keep:n])
        return b"".join(out)

    def _frame_start(self) -> int:
        """A frame header was read: 0 pass it, 1 drop it, 2 withhold it."""
        ftype, conn = self._ftype, self.conn
        self._collect = None
        if ftype == DATA and conn.count_messages:
            st = conn.streams.get(self._stream)
            if st is not None and st.messages is not None:
                self._message_stream = st
                self._collect = bytearray()  # at most a frame (SETTINGS_MAX_FRAME_SIZE)
        if self.to_server:
            if ftype in (HEADERS, CONTINUATION):
                if not conn.blind and self._left + len(conn._block) > MAX_BLOCK:  # no block read past it: blind
                    conn.blind = True
                    if ftype == CONTINUATION:  # the stream whose block this was opens as organic
                        conn.blind_headers(conn._block_stream, conn._block_flags)
                if not conn.blind:
                    self._collect = bytearray()
                elif ftype == HEADERS:  # blind: the stream still counts (as organic), its block unread
                    conn.blind_headers(self._stream, self._flags)
            elif ftype == SETTINGS and self._flags & ACK and conn.settings_fifo:
                if conn.settings_fifo.popleft():  # the ACK of a SETTINGS frame the relay sent: not the server's
                    return 1
            elif ftype == DATA:
                conn.client_data(self._stream, self._flags)
        else:
            if ftype == SETTINGS and not self._flags & ACK:
                if self._left <= MAX_BLOCK:
                    self._collect = bytearray()
                conn.settings_fifo.append(False)
            elif ftype in (HEADERS, DATA) and self._flags & END_STREAM:
                conn.streams.pop(self._stream, None)
        if ftype == RST_STREAM:
            conn.streams.pop(self._stream, None)
        if conn.calls is not None:
            mode = conn.calls.frame_start(self.to_server, ftype, self._flags, self._stream, self._left)
            if mode:
                return mode
        if ftype in self.drop:
            return 1
        if ftype in self.hold:
            return 2
        return 0

    def _frame_done(self) -> None:
        taken = None
        if self._mode:
            if self._mode == HOLD:
                self.held.append(bytes(self._hold_buf))
                self._hold_buf = None
            elif self._mode == TAKE:
                taken, self._hold_buf = bytes(self._hold_buf), None
            self._mode = PASS
        if self._message_stream is not None:
            st, self._message_stream = self._message_stream, None
            payload, self._collect = bytes(self._collect), None
            self.conn.data_messages(st, self.to_server, self._flags, payload)
        elif self._collect is not None:
            payload, self._collect = bytes(self._collect), None
            if self.to_server:
                self.conn.client_headers(self._ftype, self._flags, self._stream, payload)
            else:
                self.conn.server_settings(payload)
        if taken is not None:  # after the block was read: the executor decides with what it carried
            self.conn.calls.took(self, self._ftype, self._flags, self._stream, taken)
        self.started = True


class H2Conn:
    """One connection's HTTP/2 state: its open streams (by the client), the drill's among them."""

    def __init__(self, drill_tenants: frozenset[str]) -> None:
        self.drill_tenants = drill_tenants
        # a passive reader: the client encodes for the server's table size, not ours
        self.scanner = HeaderScanner(KEYS)
        self.blind = False
        self.streams: dict[int, Stream] = {}
        self.highest = 0
        self.drill_count = 0
        self.organic_count = 0
        self.server_max_streams: int | None = None
        #: how many acting toxics count gRPC messages (rst_stream `after_messages`): while above 0, streams
        #: that open have their DATA read for message boundaries
        self.count_messages = 0
        #: SETTINGS frames the client has yet to acknowledge, in order: True where the relay sent it
        self.settings_fifo: deque[bool] = deque()
        self._block = bytearray()
        self._block_stream = 0
        self._block_flags = 0
        #: the call-fault executor (`harness.link.calls.ConnCalls`), when the link carries call faults
        self.calls = None
        self.up = FrameReader(self, to_server=True)
        self.down = FrameReader(self, to_server=False)
        #: called as a client's stream reaches a point: (stream, "headers" | "data" | "end")
        self.on_stream: Callable[[Stream, str], None] | None = None

    def attach_calls(self, calls, keys: frozenset[bytes]) -> None:
        """Carry call faults (before the first byte): `calls` sees every frame, the client's blocks are read for
        `keys` too (every key the gate reads, the method, the deadline)."""
        self.calls = calls
        self.scanner = HeaderScanner(KEYS | keys)

    @property
    def only_drill(self) -> bool:
        """Every stream so far carried the drill tenant (and there was one)."""
        return self.drill_count > 0 and self.organic_count == 0

    def client_headers(self, ftype: int, flags: int, stream: int, payload: bytes) -> None:
        if ftype == HEADERS:
            start, end = 0, len(payload)
            if flags & PADDED and payload:
                start, end = 1, len(payload) - payload[0]
            if flags & PRIORITY_FLAG:
                start += 5
            self._block = bytearray(payload[start:end])
            self._block_stream, self._block_flags = stream, flags
        else:
            self._block += payload
            flags = self._block_flags | (flags & END_HEADERS)
        if not flags & END_HEADERS:
            return
        block, self._block = bytes(self._block), bytearray()
        found: dict[bytes, bytes] = {}
        if not self.blind:
            try:
                found = self.scanner.scan(block)
            except Exception:  # noqa: BLE001 - a block it cannot read (HpackError, or worse): blind from now on
                self.blind = True
        sid = self._block_stream
        if self.calls is not None and sid > self.highest and sid not in self.streams:  # a new stream: judged now
            if self.calls.cut(sid, found, not self.blind and not self.scanner.touched):  # the server never sees it
                self.highest = sid
                return
        if sid in self.streams or sid <= self.highest:  # trailers of a client stream
            st = self.streams.get(sid)
            if st is not None and self._block_flags & END_STREAM:
                self._end(st)
            return
        self._open(sid, not self.blind and tenant_of(found) in self.drill_tenants)

    def _open(self, sid: int, drill: bool) -> None:
        self.highest = sid
        st = Stream(sid, drill)
        if self.count_messages:
            st.messages, st.framing = [0, 0], [[0, b""], [0, b""]]
        self.streams[sid] = st
        if drill:
            self.drill_count += 1
        else:
            self.organic_count += 1
        if self.on_stream:
            self.on_stream(st, "headers")
        if self._block_flags & END_STREAM:
            self._end(st)

    def blind_headers(self, stream: int, flags: int) -> None:
        """A client's HEADERS on a blind connection: a new stream opens as organic (never a drill's)."""
        self._block = bytearray()
        if stream > self.highest:
            self._block_flags = flags
            self._open(stream, False)

    def client_data(self, stream: int, flags: int) -> None:
        st = self.streams.get(stream)
        if st is None:
            return
        if not st.data:
            st.data = True
            if self.on_stream:
                self.on_stream(st, "data")
        if flags & END_STREAM:
            self._end(st)

    def data_messages(self, st: Stream, to_server: bool, flags: int, payload: bytes) -> None:
        """A DATA frame's payload on a counted stream: each gRPC message it ends (a 5-byte prefix, flag and
        length, then the message) counted, and announced as `message_upstream` / `message_downstream`."""
        if flags & PADDED and payload:
            payload = payload[1 : len(payload) - payload[0]]
        d = 0 if to_server else 1
        point = "message_upstream" if to_server else "message_downstream"
        for _end in message_ends(st.framing[d], payload):  # [message bytes still to come, the prefix read so far]
            st.messages[d] += 1
            if self.on_stream:
                self.on_stream(st, point)

    def _end(self, st: Stream) -> None:
        if not st.ended:
            st.ended = True
            if self.on_stream:
                self.on_stream(st, "end")

    def server_settings(self, payload: bytes) -> None:
        for i in range(0, len(payload) - 5, 6):
            key, value = struct.unpack_from(">HI", payload, i)
            if key == SETTINGS_MAX_CONCURRENT_STREAMS:
                self.server_max_streams = value

    def last_stream(self, which: str) -> int:
        """GOAWAY's last stream id: `all`, `current` (the highest the client opened) or `before_in_flight`."""
        if which == "all":
            return MAX_STREAM_ID
        if which == "before_in_flight" and self.streams:
            return max(0, min(self.streams) - 2)
        return self.highest
