"""The drill's per-call faults carried by `drill link` as frame operations, decided by the one pipeline.

One decision pipeline, two executors: a stream the client opens is judged by the same `ServerCore` the
interceptors and `drill proxy` use (gate, hit formula, DRILL_FAULT_MAX_ACTIVE, the emergency stop, the
`drill_fault_*` metrics, audit lines), asked once, at the end of the client's header block; this module performs
what it decides on the frames, where `drill proxy` performs it around grpc.aio handlers:
- abort:CODE / drop:MS at the start: the stream never reaches the server (its HEADERS, CONTINUATION, DATA,
  RST_STREAM, WINDOW_UPDATE dropped: a fault at the link costs the service nothing); the client gets a trailers-only
  answer (`:status` 200, `content-type`, `grpc-status`, `grpc-message`, `x-drill-fault`) at once, or MS later for a
  drop (UNAVAILABLE "injected drop"); with `@headers=sent` response headers first. The client's DATA the link drops
  used its connection window: it is given back (WINDOW_UPDATE on stream 0), else the connection would stall.
- delay:MS: the client's frames pass; the server's frames of that stream each leave MS after they came, in order
  (a delay line: the one response, or every message of a stream, is MS late); other streams pass.
- `@served`: the server answers, then the fault replaces its answer (`ServerCore.answered`): a single response's
  frames are held until its trailers, then dropped (their connection window given back to the server) and the
  fault's answer sent; a response stream's messages pass and its trailers are replaced. A delay holds the trailers
  MS (the call completes MS late). A response bigger than the caller's flow-control window cannot be held whole:
  it waits (the call ends at its deadline, or when the stop releases it).
- the emergency stop releases what is held at once (a drop answers, a delay line empties, an `@served` hold lets the
  server's answer through), as `releasable_sleep` does in process; a caller that leaves (its RST_STREAM) gets
  nothing more.

Why this is safe for HPACK. Header compression state is per connection and direction: every block must reach the
peer in order, or its decoder's dynamic table desyncs (RFC 7541 §2.2, §4.1; RFC 9113 §4.3: a decoding error is a
connection error). Dropping, holding or reordering a block is only safe when it neither changes nor uses that table.
So the link makes every block stand alone: it rewrites each side's SETTINGS so SETTINGS_HEADER_TABLE_SIZE = 0
reaches the other (RFC 9113 §6.5.2: it bounds the table the peer's *encoder* may use toward the sender; absent, it
is 4,096), and each encoder then signals a dynamic table size update to 0 at the start of its next block (RFC 7541
§4.2, §6.3; RFC 9113 §4.3.1) and can never index again: every block decodes from the static table and literals.
A block an encoder sent before the new setting reached it may still use the table (`HeaderScanner.touched`): such a
stream is never cut (the fault passes it, said in the log). The blocks the link writes are literals without
indexing (RFC 7541 §6.2.2), no Huffman: they change no table. Stream ids the server then never sees are legal
(RFC 9113 §5.1.1: a higher id closes the idle streams below it).

Not yet here: `@after=N` / `@read=N` (a hit with them passes, said in the log; `drill proxy` carries them).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time

import grpc

from harness.core import headers as h
from harness.core import scope
from harness.core.faults import Kind, Mode
from harness.core.gate import Outcome
from harness.core.safety import EmergencyStop
from harness.core.settings import FaultSettings
from harness.interceptors._server_pipeline import DEADLINE_SLACK_S, CallPlan, ServerCore, abort_details, marker
from harness.link import h2
from harness.link.hscan import HeaderScanner, HpackError

log = logging.getLogger("drill.link")

#: What the executor reads from a client's header block: every key the gate reads, the method and the deadline
KEYS = frozenset(
    k.encode() for k in (*h.DRILL_KEYS, h.BAGGAGE, h.PREVIOUS_RPC_ATTEMPTS, h.DRILL_PREVIOUS_RPC_ATTEMPTS,
                         h.ORIGIN_DEADLINE, ":path", "grpc-timeout")
)  # fmt: skip
_GATED = tuple(k.encode() for k in h.GATE_KEYS)
_STATUS_BY_VALUE = {code.value[0]: code for code in grpc.StatusCode}
_TIMEOUT_UNIT = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_ENDS = h2.END_STREAM | h2.END_HEADERS
#: A caller's reset this close to its deadline (or after) is its deadline: the link's deadline is the `grpc-timeout`
#: the client wrote, counted from when its HEADERS arrived, so it is late by their transit, and the reset is late by
#: its own; on a loaded box either is milliseconds to tens of them (a grpc server decides with its own timer instead)
LEFT_BY_DEADLINE_S = 0.05


# --- header blocks the link writes: literals without indexing, no Huffman (they change no table) ----------------
def _int7(value: int) -> bytes:
    if value < 0x7F:
        return bytes((value,))
    out, value = bytearray((0x7F,)), value - 0x7F
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: str, value: str) -> bytes:
    """One field as a literal without indexing, new name (RFC 7541 §6.2.2)."""
    n, v = name.encode(), value.encode()
    return b"\x00" + _int7(len(n)) + n + _int7(len(v)) + v


def _percent(text: str) -> str:
    """grpc-message's percent-encoding (gRPC over HTTP/2: bytes outside 0x20-0x7E, and `%`)."""
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b != 0x25 else f"%{b:02X}" for b in text.encode())


_STATUS_200 = b"\x88"  # `:status: 200`, static entry 8 (RFC 7541 Appendix A)
_CONTENT_TYPE = literal("content-type", "application/grpc")


def response_headers(mode: str) -> bytes:
    return _STATUS_200 + _CONTENT_TYPE + literal(h.FAULT_MARKER, mode)


def trailers(code: grpc.StatusCode, details: str, mode: str, headers_out: bool) -> bytes:
    """The fault's status as trailers (trailers-only, with `:status` and `content-type`, unless headers went out)."""
    head = b"" if headers_out else _STATUS_200 + _CONTENT_TYPE
    return (head + literal("grpc-status", str(code.value[0])) + literal("grpc-message", _percent(details))
            + literal(h.FAULT_MARKER, mode))  # fmt: skip


def _fragment(ftype: int, flags: int, payload: bytes) -> tuple[bytes, bytes]:
    """(what precedes the block in a HEADERS frame: its priority fields; the block fragment), padding dropped."""
    if ftype != h2.HEADERS:
        return b"", payload
    start, end = 0, len(payload)
    if flags & h2.PADDED and payload:
        start, end = 1, len(payload) - payload[0]
    head = b""
    if flags & h2.PRIORITY_FLAG:
        head, start = payload[start : start + 5], start + 5
    return head, payload[start:end]


def _with_field(frame_bytes: bytes, field: bytes) -> bytes:
    """A HEADERS / CONTINUATION frame that ends its block, with one more field at the block's end (no padding)."""
    ftype, flags, stream = frame_bytes[3], frame_bytes[4], int.from_bytes(frame_bytes[5:9], "big")
    head, block = _fragment(ftype, flags, frame_bytes[9:])
    payload = head + block + field
    if len(payload) > 16384:  # SETTINGS_MAX_FRAME_SIZE's floor: never past what every peer takes
        return frame_bytes
    return h2.frame(ftype, flags & ~h2.PADDED, stream, payload)


def grpc_timeout(value: bytes | None) -> float | None:
    """`grpc-timeout` (digits and a unit) in seconds, or None."""
    if not value or len(value) > 9 or not value[:-1].isdigit():
        return None
    unit = _TIMEOUT_UNIT.get(chr(value[-1]))
    return None if unit is None else int(value[:-1]) * unit


class LinkCalls:
    """The call faults of a link set: one `ServerCore` (one pipeline, one gate, one cap) for every connection.

    `kinds` (`/pkg.Service/Method` → Kind, as `drill proxy --proto` reads them): a method found in none is judged a
    bidi stream, as `drill proxy` judges it (every kind is one on the wire)."""

    def __init__(self, settings: FaultSettings, *, kinds: dict[str, Kind] | None = None, metrics: bool = True,
                 stop: EmergencyStop | None = None) -> None:  # fmt: skip
        self.core = ServerCore(settings, metrics=metrics, stop=stop)
        self.kinds = dict(kinds or {})
        self.conns: set[ConnCalls] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.core.stop.on_trip(self._tripped)

    @property
    def enabled(self) -> bool:
        return self.core.settings.enabled

    def connection(self, conn: h2.H2Conn, loop: asyncio.AbstractEventLoop) -> ConnCalls:
        """Carry call faults on a new connection (before its first byte)."""
        self._loop = loop
        calls = ConnCalls(self, conn, loop)
        conn.attach_calls(calls, KEYS)
        self.conns.add(calls)
        return calls

    def _tripped(self) -> None:  # any thread
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._release_all)

    def _release_all(self) -> None:
        for conn in list(self.conns):
            conn.release_all()


class _Call:
    """A stream the pipeline decided to fault: its plan, and what the link holds or waits for."""

    __slots__ = ("sid", "plan", "t0", "cut", "delay", "served", "hold", "done", "client_ended", "timer", "line",
                 "held", "headers_out", "server_headers", "trailers", "block")  # fmt: skip

    def __init__(self, sid: int, plan: CallPlan, t0: float) -> None:
        self.sid, self.plan, self.t0 = sid, plan, t0
        self.cut = False  # the server never sees the stream (abort/drop at the start)
        self.delay = 0.0  # seconds each server frame waits (a delay; the trailers of an `@served` delay)
        self.served = False  # the server's trailers are taken: the fault acts there (`@served`), or they pass
        self.hold = False  # a single response held until its trailers (`@served`)
        self.done = False  # the call is recorded (`ServerCore.end`)
        self.client_ended = False  # the client's END_STREAM or RST_STREAM came: nothing more of it to drop
        self.timer: asyncio.TimerHandle | None = None
        #: the delay line: (when it leaves, the frame, the call's status when it is the last)
        self.line: list[tuple[float, bytes, grpc.StatusCode | None]] = []
        self.held: list[bytes] = []
        self.headers_out = False  # response headers reached the client (the fault's answer is then trailers)
        self.server_headers = False  # the server's response headers came
        self.trailers = False  # the server's block being read is its trailers
        self.block: list[bytes] = []  # the server's trailers, frame by frame, until their block ends


class ConnCalls:
    """One connection's call faults: asked about every frame as it starts (`frame_start`), handed the frames it
    takes (`took`), told of each new client stream (`cut`). A call stays in `calls` until it is recorded, and a cut
    one until the client's side of it ended too (its late frames are dropped, never reach the server)."""

    def __init__(self, owner: LinkCalls, conn: h2.H2Conn, loop: asyncio.AbstractEventLoop) -> None:
        self.owner, self.core, self.conn, self.loop = owner, owner.core, conn, loop
        self.calls: dict[int, _Call] = {}
        self._block: list[bytes] = []  # the client's header block, frame by frame, until it ends
        self._block_sid = 0
        self._settings = [False, False]  # each side's first SETTINGS seen (from the server, from the client)
        self._warned = False

    # --- the reader's questions ------------------------------------------------------------------------------
    def frame_start(self, to_server: bool, ftype: int, flags: int, sid: int, length: int) -> int:
        if ftype == h2.SETTINGS:
            return h2.PASS if flags & h2.ACK else h2.TAKE
        if not sid:
            return h2.PASS
        if to_server:
            if ftype in (h2.HEADERS, h2.CONTINUATION):
                return h2.PASS if self.conn.blind and not self._block else h2.TAKE
            call = self.calls.get(sid)
            if call is None:
                return h2.PASS
            if call.cut:
                if ftype == h2.DATA and length:
                    self.conn.down.inject(_window_update(length))  # its connection window, given back
                if ftype == h2.RST_STREAM and not call.done:
                    self._left(call)
                if ftype == h2.RST_STREAM or ftype == h2.DATA and flags & h2.END_STREAM:
                    self._client_ended(call)
                return h2.DROP
            if ftype == h2.RST_STREAM:
                self._left(call)  # forwarded: the server's handler is cancelled, as by a caller that leaves
            return h2.PASS
        call = self.calls.get(sid)
        if call is None:
            return h2.PASS
        if call.delay and not call.served:
            return h2.TAKE  # the delay line
        if call.trailers or ftype == h2.RST_STREAM:
            return h2.TAKE
        if ftype == h2.HEADERS:
            if flags & h2.END_STREAM or call.server_headers:  # its trailers (or a trailers-only answer)
                call.trailers = True
                return h2.TAKE
            call.server_headers = True
        return h2.TAKE if call.hold else h2.PASS

    def took(self, reader: h2.FrameReader, ftype: int, flags: int, sid: int, data: bytes) -> None:
        if ftype == h2.SETTINGS:
            reader.inject(self._settings_rewritten(reader.to_server, data))
        elif reader.to_server:
            self._client_block(reader, ftype, flags, data)
        else:
            call = self.calls.get(sid)
            if call is None:
                reader.inject(data)
            elif call.delay and not call.served:
                self._delayed(call, data)
            elif call.trailers or ftype == h2.RST_STREAM:
                self._server_end(call, data)
            else:
                call.held.append(data)

    def cut(self, sid: int, found: dict[bytes, bytes], standalone: bool) -> bool:
        """A client's new stream: asks the pipeline once; True when the server must never see it."""
        if not any(k in found for k in _GATED):
            return False  # organic: no gate, as without call faults
        path = found.get(b":path", b"").decode("utf-8", "replace")
        md = tuple((k.decode(), v.decode("utf-8", "replace")) for k, v in found.items() if k[:1] != b":")
        kind = self.owner.kinds.get(path, Kind.BIDI_STREAMING)
        core = self.core
        plan = core.plan(path, md, None, kind)
        d = plan.decision
        if d.outcome is not Outcome.HIT:
            return False  # counted (and a refusal audited) by `plan`
        directive = d.directive
        cuts = d.mode is not Mode.DELAY and not directive.served
        if directive.after or directive.read or (cuts and not standalone):
            if not self._warned:
                self._warned = True
                why = ("@after/@read is not carried by the link yet" if directive.after or directive.read else
                       "its header block used the HPACK dynamic table (sent before SETTINGS_HEADER_TABLE_SIZE=0 "
                       "reached the client)")  # fmt: skip
                log.warning("link: a fault hit %s passed untouched: %s (said once per connection)", path, why)
            return False
        t0, token = core.begin(plan, grpc_timeout(found.get(b"grpc-timeout")), md)
        scope.leave(token)  # no task of ours runs the call: the scope is not left entered in the loop's context
        call = _Call(sid, plan, t0)
        self.calls[sid] = call
        if plan.decision.outcome is not Outcome.HIT:  # the stop or the cap: passes, recorded at its end
            call.served = True
            return False
        if directive.served:
            call.served = True
            call.hold = not kind.response_streaming and d.mode is not Mode.DELAY
            if d.mode is Mode.DELAY:
                call.delay = d.delay_ms / 1000.0
            return False
        if d.mode is Mode.DELAY:
            call.delay = core.wait_s(plan)
            return False
        call.cut = True
        call.client_ended = bool(self.conn._block_flags & h2.END_STREAM)
        if directive.headers_sent:
            self._headers(call)
        if d.mode is Mode.ABORT:
            self._answer(call)
        else:
            self._wait(call, core.wait_s(plan))
        return True

    # --- what the link does ----------------------------------------------------------------------------------
    def _settings_rewritten(self, to_server: bool, data: bytes) -> bytes:
        """A side's SETTINGS with SETTINGS_HEADER_TABLE_SIZE = 0 (inserted into its first: the default is 4,096)."""
        payload = data[9:]
        pairs = [struct.unpack_from(">HI", payload, i) for i in range(0, len(payload) - 5, 6)]
        out = [(k, 0 if k == h2.SETTINGS_HEADER_TABLE_SIZE else v) for k, v in pairs]
        if not self._settings[to_server] and all(k != h2.SETTINGS_HEADER_TABLE_SIZE for k, _ in pairs):
            out.append((h2.SETTINGS_HEADER_TABLE_SIZE, 0))
        self._settings[to_server] = True
        return h2.frame(h2.SETTINGS, data[4], 0, b"".join(struct.pack(">HI", k, v) for k, v in out))

    def _client_block(self, reader: h2.FrameReader, ftype: int, flags: int, data: bytes) -> None:
        """A client's header block goes on whole once read (`cut` has judged a new stream by then), or not at all."""
        if ftype == h2.HEADERS:
            self._block, self._block_sid = [], int.from_bytes(data[5:9], "big") & h2.MAX_STREAM_ID
        self._block.append(data)
        if not flags & h2.END_HEADERS:
            return
        frames, self._block = self._block, []
        call = self.calls.get(self._block_sid)
        if call is not None and call.cut:  # never reaches the server (trailers of a cut stream too)
            if frames[0][4] & h2.END_STREAM:
                self._client_ended(call)
            return
        for frame_bytes in frames:
            reader.inject(frame_bytes)

    def _delayed(self, call: _Call, data: bytes) -> None:
        """A server frame of a delayed stream: into the line, its trailers marked, its status read."""
        ftype, flags = data[3], data[4]
        ends = None
        if ftype == h2.RST_STREAM:
            ends = grpc.StatusCode.CANCELLED
        elif ftype == h2.DATA and flags & h2.END_STREAM:
            ends = grpc.StatusCode.UNKNOWN  # ended without trailers
        elif ftype == h2.HEADERS and flags & h2.END_STREAM or call.trailers and ftype == h2.CONTINUATION:
            call.trailers = True
            call.block.append(data)
            if not flags & h2.END_HEADERS:
                return
            block, call.block = call.block, []
            ends = _status(block)
            block[-1] = self._marked(call, block[-1])
            for frame_bytes in block[:-1]:
                self._line(call, frame_bytes, None)
            data = block[-1]
        self._line(call, data, ends)

    def _line(self, call: _Call, data: bytes, ends: grpc.StatusCode | None) -> None:
        """`data` leaves `delay` after it came, and after the frame before it."""
        due = self.loop.time() + call.delay
        if call.line:
            due = max(due, call.line[-1][0])
        call.line.append((due, data, ends))
        if call.timer is None:
            call.timer = self.loop.call_at(due, self._drain, call)

    def _drain(self, call: _Call, everything: bool = False) -> None:
        call.timer = None
        now = self.loop.time()
        while call.line and (everything or call.line[0][0] <= now + 0.0002):
            _due, data, ends = call.line.pop(0)
            self.conn.down.inject(data)
            if ends is not None:
                self._finish(call, ends)
        if call.line:
            call.timer = self.loop.call_at(call.line[0][0], self._drain, call)

    def _server_end(self, call: _Call, data: bytes) -> None:
        """The server's trailers (or its reset) on an `@served` call: the fault acts now, or its answer passes."""
        if data[3] == h2.RST_STREAM:
            call.hold = False
            self._pass_held(call, data)
            self._finish(call, grpc.StatusCode.CANCELLED)
            return
        call.block.append(data)
        if not data[4] & h2.END_HEADERS:
            return
        block, call.block = call.block, []
        plan = call.plan
        if plan.decision.outcome is not Outcome.HIT or not self.core.answered(plan):
            call.hold = False
            self._pass_held(call, *block)  # the stop tripped while the service worked: its answer untouched
            self._finish(call, _status(block))
            return
        mode = plan.decision.mode
        if mode is Mode.DELAY:  # its answer MS late (the trailers: a call completes with them), marked
            call.served = False
            self._pass_held(call)
            block[-1] = self._marked(call, block[-1])
            status = _status(block)
            for i, frame_bytes in enumerate(block):
                self._line(call, frame_bytes, status if i == len(block) - 1 else None)
            return
        call.hold = False
        self._drop_held(call)
        call.headers_out = call.server_headers and plan.kind.response_streaming
        if plan.decision.directive.headers_sent and not call.headers_out:
            self._headers(call)
        if mode is Mode.ABORT:
            self._answer(call)
        else:
            self._wait(call, self.core.wait_s(plan))

    def _pass_held(self, call: _Call, *more: bytes) -> None:
        held, call.held = call.held, []
        for data in (*held, *more):
            self.conn.down.inject(data)

    def _drop_held(self, call: _Call) -> None:
        held, call.held = call.held, []
        credit = sum(len(f) - 9 for f in held if f[3] == h2.DATA)
        if credit:
            self.conn.up.inject(_window_update(credit))  # the server's connection window, given back

    def _headers(self, call: _Call) -> None:
        call.headers_out = True
        mode = call.plan.decision.mode.value
        self.conn.down.inject(h2.frame(h2.HEADERS, h2.END_HEADERS, call.sid, response_headers(mode)))

    def _answer(self, call: _Call) -> None:
        """The fault's status to the client (trailers-only unless response headers went out); the call recorded."""
        call.timer = None
        if call.done:
            return
        code_name, details = abort_details(call.plan.decision)
        code = grpc.StatusCode[code_name]
        block = trailers(code, details, call.plan.decision.mode.value, call.headers_out)
        self.conn.down.inject(h2.frame(h2.HEADERS, _ENDS, call.sid, block))
        self._finish(call, code)

    def _wait(self, call: _Call, seconds: float) -> None:
        """A drop's wait, then its answer; the stop ends it at once."""
        call.timer = self.loop.call_later(seconds, self._answer, call)
        if self.core.stop.check():
            self.release(call)

    def _marked(self, call: _Call, data: bytes) -> bytes:
        pair = marker(call.plan)
        return _with_field(data, literal(*pair)) if pair is not None else data

    def _left(self, call: _Call) -> None:
        """The caller reset the stream: nothing more is sent to it; what was held is dropped."""
        if call.timer is not None:
            call.timer.cancel()
            call.timer = None
        line, call.line = call.line, []
        credit = sum(len(f) - 9 for _due, f, _ends in line if f[3] == h2.DATA)
        if credit:
            self.conn.up.inject(_window_update(credit))
        self._drop_held(call)
        deadline = call.plan.deadline
        late = deadline is not None and time.monotonic() >= deadline - max(DEADLINE_SLACK_S, LEFT_BY_DEADLINE_S)
        self._finish(call, grpc.StatusCode.DEADLINE_EXCEEDED if late else grpc.StatusCode.CANCELLED)
        self._client_ended(call)

    def _client_ended(self, call: _Call) -> None:
        call.client_ended = True
        if call.done:
            self.calls.pop(call.sid, None)

    def _finish(self, call: _Call, code: grpc.StatusCode) -> None:
        if call.done:
            return
        call.done = True
        self.core.end(call.plan, scope.enter(call.plan.scope), code, call.t0)  # `end` leaves the scope it is given
        if not call.cut or call.client_ended:
            self.calls.pop(call.sid, None)

    # --- the stop, the end of the connection -----------------------------------------------------------------
    def release(self, call: _Call) -> None:
        """The emergency stop: what this call waits for happens now (a drop answers, a delay's frames go, a held
        answer passes)."""
        if call.done:
            return
        call.delay = 0.0
        if call.line:
            if call.timer is not None:
                call.timer.cancel()
            self._drain(call, everything=True)
        elif call.timer is not None:  # a drop's wait
            call.timer.cancel()
            self._answer(call)
        elif call.hold:
            call.hold = False
            self._pass_held(call)

    def release_all(self) -> None:
        for call in list(self.calls.values()):
            self.release(call)

    def close(self) -> None:
        """The connection ended: every call not yet recorded is, as cancelled (its caller is gone)."""
        self.owner.conns.discard(self)
        for call in list(self.calls.values()):
            if call.timer is not None:
                call.timer.cancel()
            call.line, call.held = [], []
            self._finish(call, grpc.StatusCode.CANCELLED)
        self.calls.clear()


def _status(block: list[bytes]) -> grpc.StatusCode:
    """The grpc-status of the server's trailers, frame by frame (its blocks stand alone: read with a fresh table)."""
    fragment = b"".join(_fragment(f[3], f[4], f[9:])[1] for f in block)
    try:
        value = HeaderScanner(frozenset({b"grpc-status"})).scan(fragment).get(b"grpc-status", b"")
    except HpackError:
        return grpc.StatusCode.UNKNOWN
    return _STATUS_BY_VALUE.get(int(value), grpc.StatusCode.UNKNOWN) if value.isdigit() else grpc.StatusCode.UNKNOWN


def _window_update(n: int) -> bytes:
    return h2.frame(h2.WINDOW_UPDATE, 0, 0, struct.pack(">I", n & h2.MAX_STREAM_ID))
