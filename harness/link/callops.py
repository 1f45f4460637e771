"""The frame operations of a call fault on a link: the state of one faulted stream (`Call`) and what acts on its
frames (`CallOps`): the fault's own answer, a drop's wait, the delay line, the held response, the pipeline's
Tripwire fed with the messages the link reads. `harness.link.calls` decides when (its `ConnCalls` is a `CallOps`);
every block written here changes no HPACK table (`harness.link.hblock`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import grpc

from harness.core import scope
from harness.core.faults import Mode
from harness.interceptors._fault_steps import Step
from harness.interceptors._server_pipeline import CallPlan, abort_details, marker
from harness.link import h2
from harness.link import hblock as hb
from harness.link.toxics import H2_CODES

if TYPE_CHECKING:
    from harness.interceptors._server_pipeline import ServerCore

_ENDS = h2.END_STREAM | h2.END_HEADERS
#: the RST_STREAM code (RFC 9113 §7) the link ends a stream toward the server with (the table: `toxics.H2_CODES`)
CANCEL = H2_CODES["CANCEL"]
#: How long a stream the link reset toward the server keeps dropping the server's frames on it: those the server sent
#: before it read the reset are on the wire, a round trip on any network a drill runs on
SINK_S = 10.0


class Call:
    """A stream the pipeline decided to fault: its plan, and what the link holds or waits for."""

    __slots__ = ("sid", "plan", "t0", "cut", "sink", "delay", "up", "served", "hold", "done", "client_ended", "timer",
                 "line", "held", "held_bytes", "released", "headers_out", "server_headers", "trailers", "block", "trip",
                 "framing", "kept", "reset_behind", "refused_behind")  # fmt: skip

    def __init__(self, sid: int, plan: CallPlan, t0: float) -> None:
        self.sid, self.plan, self.t0 = sid, plan, t0
        self.cut = False  # the client's frames never reach the server (a fault at the start, or one that fired)
        self.sink = False  # the server's frames never reach the client (a fault that fired mid-stream)
        self.delay = 0.0  # seconds each frame of the delayed direction waits
        self.up = False  # the delayed direction is the client's (`@read` delay), else the server's
        self.served = False  # the server's trailers are taken: the fault acts there (`@served`), or they pass
        self.hold = False  # a single response held until its trailers (`@served`)
        self.done = False  # the call is recorded (`ServerCore.end`)
        self.client_ended = False  # the client's END_STREAM or RST_STREAM came: nothing more of it to drop
        #: a fault at the start on a block that used the HPACK table: the block goes on, the stream is reset behind it
        self.reset_behind = False
        self.refused_behind = False  # refused by the in-flight limit, its block the server's to read (`_refuse`)
        self.timer: asyncio.TimerHandle | None = None
        #: the delay line: (when it leaves, the frame, the call's status when it is the last)
        self.line: list[tuple[float, bytes, grpc.StatusCode | None]] = []
        self.held: list[bytes] = []
        self.held_bytes = 0  # the DATA held (`hold`), which the link has credited to the server's connection window
        self.released = False  # the held response went on (past the caller's stream window, or at the stop)
        self.headers_out = False  # response headers reached the client (the fault's answer is then trailers)
        self.server_headers = False  # the server's response headers came
        self.trailers = False  # the server's block being read is its trailers
        self.block: list[bytes] = []  # the server's trailers, frame by frame, until their block ends
        self.trip = None  # the pipeline's Tripwire (`@after` / `@read`) until it fired
        self.framing = [0, b""]  # the counted direction's place in its messages (`h2.message_ends`)
        self.kept = b""  # the service's own trailers an `@served` fault's answer carries (`hblock.kept_trailers`)


class CallOps:
    """What acts on a connection's faulted streams' frames; the connection's `ConnCalls` supplies `conn` (its HTTP/2
    view, whose readers `inject`), `loop`, `core` (the pipeline), `calls` (its faulted streams) and `release`."""

    conn: h2.H2Conn
    loop: asyncio.AbstractEventLoop
    core: ServerCore
    calls: dict[int, Call]
    #: connection window the link credited the server for held DATA it then passed on, which the client will credit
    #: again once it reads them: that much of the client's own connection WINDOW_UPDATEs is kept back
    debt: int
    #: the server's PING ACKs waiting behind the delay lines: (when each leaves, the frame)
    acks: list[tuple[float, bytes]]
    ack_timer: asyncio.TimerHandle | None

    def release(self, call: Call) -> None:  # pragma: no cover - the connection's
        raise NotImplementedError

    def _count(self, call: Call, reader: h2.FrameReader, data: bytes) -> None:
        """A DATA frame of the counted direction (`@after`: the server's, `@read`: the client's): it passes, each
        message it ends told to the tripwire; where the tripwire fires, the frame is cut there and the fault acts."""
        payload, flags, trip = hb.data_payload(data), data[4], call.trip
        for end in h2.message_ends(call.framing, payload):
            if trip.reads:
                trip.read()
                steps = trip.before_read()  # the handler asks for the next message once this one is in
            else:
                steps = trip.sent()
            if steps:  # (none once the stop has tripped: the tripwire never fires then, the stream passes)
                call.trip = None
                rest = payload[end:]
                padding = len(data) - 9 - len(payload)
                if rest or padding:  # the boundary inside the frame (or padding, which is dropped): cut there
                    data = h2.frame(h2.DATA, flags & ~(h2.PADDED | h2.END_STREAM) if rest else flags & ~h2.PADDED,
                                    call.sid, payload[:end])  # fmt: skip
                    if padding:  # its sender's window back
                        (self.conn.down if reader.to_server else self.conn.up).inject(hb.window_update(padding))
                reader.inject(data)
                self._fire(call, steps, reader.to_server, rest, flags)
                return
        reader.inject(data)

    def _fire(self, call: Call, steps: tuple, to_server: bool, rest: bytes, flags: int) -> None:
        """A mid-stream fault acts: `steps` as the pipeline's Tripwire answered them; `rest` the counted direction's
        data past the boundary."""
        plan = call.plan
        if Step.HEADERS in steps and not call.server_headers and not call.headers_out:
            self._headers(call)
        call.headers_out = call.headers_out or call.server_headers
        rest_frame = h2.frame(h2.DATA, flags & ~h2.PADDED, call.sid, rest) if rest else b""
        if plan.decision.mode is Mode.DELAY:
            call.delay, call.up = self.core.wait_s(plan), to_server
            if rest_frame:
                self._line(call, rest_frame, None)
            return
        # the service's side ends (as a proxy cancels its upstream call); what either side sends later is dropped
        self.conn.up.inject(h2.rst_stream(call.sid, CANCEL))
        if rest:  # the data past the boundary was read by the link only: its sender's window back
            (self.conn.down if to_server else self.conn.up).inject(hb.window_update(len(rest)))
        call.cut = call.sink = True
        if flags & h2.END_STREAM and to_server:
            call.client_ended = True
        self.loop.call_later(SINK_S, self._forget, call)
        if plan.decision.mode is Mode.ABORT:
            self._answer(call)
        else:
            self._wait(call, self.core.wait_s(plan))

    def _forget(self, call: Call) -> None:
        if self.calls.get(call.sid) is call and call.done:
            del self.calls[call.sid]

    def _delayed(self, call: Call, data: bytes) -> None:
        """A frame of a delayed direction: into the line; the server's trailers marked and their status read."""
        ftype, flags = data[3], data[4]
        ends = None
        if ftype == h2.RST_STREAM:
            ends = grpc.StatusCode.CANCELLED
        elif ftype == h2.DATA and flags & h2.END_STREAM and not call.up:
            ends = grpc.StatusCode.UNKNOWN  # ended without trailers
        elif ftype == h2.HEADERS and flags & h2.END_STREAM or call.trailers and ftype == h2.CONTINUATION:
            call.trailers = True
            call.block.append(data)
            if not flags & h2.END_HEADERS:
                return
            block, call.block = call.block, []
            ends = hb.status(block)
            block[-1] = self._marked(call, block[-1])
            for frame_bytes in block[:-1]:
                self._line(call, frame_bytes, None)
            data = block[-1]
        self._line(call, data, ends)

    def _line(self, call: Call, data: bytes, ends: grpc.StatusCode | None) -> None:
        """`data` leaves `delay` after it came, and after the frame before it."""
        due = self.loop.time() + call.delay
        if call.line:
            due = max(due, call.line[-1][0])
        call.line.append((due, data, ends))
        if call.timer is None:
            call.timer = self.loop.call_at(due, self._drain, call)

    def _drain(self, call: Call, everything: bool = False) -> None:
        call.timer = None
        now = self.loop.time()
        reader = self.conn.up if call.up else self.conn.down
        while call.line and (everything or call.line[0][0] <= now + 0.0002):
            _due, data, ends = call.line.pop(0)
            reader.inject(data)
            if ends is not None:
                self._finish(call, ends)
        if call.line:
            call.timer = self.loop.call_at(call.line[0][0], self._drain, call)

    def _delaying(self) -> bool:
        """Whether a delay line holds server frames now."""
        return any(c.line and not c.up for c in self.calls.values())

    def _ack(self, data: bytes) -> None:
        """A server's PING ACK leaves after every server frame a delay line held before it came, as TCP would keep
        it behind them. Let through at once, it would reach the client ahead of the data the server sent first; the
        client (grpc-go's BDP estimator) pings again when that data lands, and the server, which has sent nothing
        since, counts a ping with no data between as abuse: past two it ends the connection (GOAWAY
        ENHANCE_YOUR_CALM `too_many_pings`), failing every call on it. In order, each ping answers data the
        server sent after the last one, as without the link."""
        due = max((c.line[-1][0] for c in self.calls.values() if c.line and not c.up), default=0.0)
        if self.acks:
            due = max(due, self.acks[-1][0])
        self.acks.append((due, data))
        if self.ack_timer is None:
            self.ack_timer = self.loop.call_at(self.acks[0][0], self._acks_due)

    def _acks_due(self) -> None:
        self.ack_timer = None
        now = self.loop.time()
        for call in list(self.calls.values()):  # the frames due by now first, whichever timer fires first
            if call.line and not call.up and call.line[0][0] <= now + 0.0002:
                if call.timer is not None:
                    call.timer.cancel()
                self._drain(call)
        while self.acks and self.acks[0][0] <= now + 0.0002:
            self.conn.down.inject(self.acks.pop(0)[1])
        if self.acks:
            self.ack_timer = self.loop.call_at(self.acks[0][0], self._acks_due)

    def _hold(self, call: Call, data: bytes, stream_window: int) -> None:
        """A frame of a single response `@served` holds: its DATA credited to the server's connection window at once
        (many calls held on one connection must not stall it, organic streams with them); once the held DATA reach
        the caller's stream window (`stream_window`), the server could send no more: the response goes on, and the
        fault will replace its status (the caller gets the message, then the fault)."""
        call.held.append(data)
        if data[3] == h2.DATA and len(data) > 9:
            self.conn.up.inject(hb.window_update(len(data) - 9))
            call.held_bytes += len(data) - 9
            if call.held_bytes >= stream_window:
                call.hold = False
                self._pass_held(call)

    def _pass_held(self, call: Call, *more: bytes) -> None:
        held, call.held = call.held, []
        if held:
            call.released = True
            self.debt += call.held_bytes  # credited once by the link: the client's credit for them is kept back
            call.held_bytes = 0
        for data in (*held, *more):
            self.conn.down.inject(data)

    def _drop_held(self, call: Call) -> None:
        """The held response is dropped: its connection window was credited when it was held; nothing more."""
        call.held, call.held_bytes = [], 0

    def _headers(self, call: Call) -> None:
        call.headers_out = True
        mode = call.plan.decision.mode.value
        self.conn.down.inject(h2.frame(h2.HEADERS, h2.END_HEADERS, call.sid, hb.response_headers(mode)))

    def _answer(self, call: Call) -> None:
        """The fault's status to the client (trailers-only unless response headers went out); the call recorded."""
        call.timer = None
        if call.done:
            return
        code_name, details = abort_details(call.plan.decision)
        code = grpc.StatusCode[code_name]
        block = hb.trailers(code, details, call.plan.decision.mode.value, call.headers_out, call.kept)
        self.conn.down.inject(h2.frame(h2.HEADERS, _ENDS, call.sid, block))
        self._finish(call, code)

    def _wait(self, call: Call, seconds: float) -> None:
        """A drop's wait, then its answer; the stop ends it at once."""
        call.timer = self.loop.call_later(seconds, self._answer, call)
        if self.core.stop.check():
            self.release(call)

    def _marked(self, call: Call, data: bytes) -> bytes:
        pair = marker(call.plan)
        return hb.with_field(data, hb.literal(*pair)) if pair is not None else data

    def _finish(self, call: Call, code: grpc.StatusCode) -> None:
        if call.done:
            return
        call.done = True
        self.core.end(call.plan, scope.enter(call.plan.scope), code, call.t0)  # `end` leaves the scope it is given
        if not (call.cut and not call.client_ended) and not call.sink:
            self.calls.pop(call.sid, None)
