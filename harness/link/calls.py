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
  (a delay line: the one response, or every message of a stream, is MS late); other streams pass, and so do the
  server's WINDOW_UPDATEs on that stream (its credit for the request, never part of its answer).
- `@served`: the server answers, then the fault replaces its answer (`ServerCore.answered`): a single response's
  frames are held until its trailers, then dropped and the fault's answer sent; a response stream's messages pass
  and its trailers are replaced. A delay holds the trailers MS (the call completes MS late). Held DATA are credited
  to the server's connection window as they come (the client's later credit for any the link passes on is kept
  back, `CallOps.debt`), and a response that reaches the caller's stream window goes on: its status is then the
  fault's (`CallOps._hold`).
- `@after=N` / `@read=N`: the stream passes while the pipeline's `Tripwire` counts its messages (the server's for
  `@after`, the client's for `@read`, read from the 5-byte gRPC prefixes in DATA; a frame is cut at the boundary
  when a message ends inside it), and fires after the N-th (for `@read`: once the client's N-th passed, where the
  handler would ask for the next). An abort or a drop then ends the caller's call with the fault's trailers (MS
  later for a drop), resets the stream toward the server (RST_STREAM CANCEL: the handler is cancelled, as by a
  proxy whose caller got its answer) and drops what either side still sends on it, each side's connection window
  given back; a delay holds what follows in the counted direction MS (a delay line).
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
block always goes on to the server, and a fault at the start that hits it resets the stream right behind it
(RST_STREAM CANCEL, as a fault that fires mid-stream) and answers the caller as for a stream cut whole: the
service reads one header block and a reset, and never answers (said once per connection in the log); past the
in-flight limit such a stream is refused the same way (`_refuse`). The blocks
the link writes are literals without indexing (RFC 7541 §6.2.2), no Huffman: they change no table. Stream ids the
server then never sees are legal (RFC 9113 §5.1.1: a higher id closes the idle streams below it).

After the link ends a stream toward the caller it keeps dropping the server's late frames on it: a frame after
END_STREAM is a connection error for the client (RFC 9113 §5.1, "closed"), so none may leak through. Such a stream
is forgotten `callops.SINK_S` after the reset the link sent the server (which sends nothing on it once it read it).
"""

from __future__ import annotations

import asyncio
import logging
import time

import grpc

from harness.core import headers as h
from harness.core import scope
from harness.core.faults import Kind, Mode
from harness.core.gate import Outcome
from harness.core.metrics import is_infrastructure
from harness.core.safety import EmergencyStop
from harness.core.settings import FaultSettings
from harness.core.tracing import propagation_keys
from harness.interceptors._fault_steps import Step
from harness.interceptors._server_pipeline import DEADLINE_SLACK_S, ServerCore
from harness.link import h2
from harness.link import hblock as hb
from harness.link.callops import CANCEL, SINK_S, Call, CallOps

log = logging.getLogger("drill.link")

#: What the executor reads from a client's header block: every key the gate reads, the method and the deadline
KEYS = frozenset(
    k.encode() for k in (*h.DRILL_KEYS, h.BAGGAGE, h.PREVIOUS_RPC_ATTEMPTS, h.DRILL_PREVIOUS_RPC_ATTEMPTS,
                         h.ORIGIN_DEADLINE, ":path", "grpc-timeout")
)  # fmt: skip
_FAULT, _BAGGAGE = h.FAULT.encode(), h.BAGGAGE.encode()
#: A caller's reset this close to its deadline (or after) is its deadline: the link's deadline is the `grpc-timeout`
#: the client wrote, counted from when its HEADERS arrived, so it is late by their transit, and the reset is late by
#: its own; on a loaded box either is milliseconds to tens of them (a grpc server decides with its own timer instead)
LEFT_BY_DEADLINE_S = 0.05


class LinkCalls:
    """The call faults of a link set: one `ServerCore` (one pipeline, one gate, one cap) for every connection.

    `kinds` (`/pkg.Service/Method` → Kind, as `drill proxy --proto` reads them): a method found in none is judged a
    bidi stream, as `drill proxy` judges it (every kind is one on the wire)."""

    def __init__(self, settings: FaultSettings, *, kinds: dict[str, Kind] | None = None, metrics: bool = True,
                 stop: EmergencyStop | None = None, hop: bool = False, tracer=None) -> None:  # fmt: skip
        #: `tracer`: each call the pipeline begins is a SERVER span, as in process (`ServerCore.begin`), child of the
        #: caller's context: its blocks are read for the propagation keys too (`traceparent`, `tracestate`)
        self.core = ServerCore(settings, metrics=metrics, stop=stop, tracer=tracer)
        self.keys = KEYS if tracer is None else KEYS | {k.encode() for k in propagation_keys()}
        self.kinds = dict(kinds or {})
        #: a hop (`drill proxy --plane link`): every stream is a call the pipeline records, as `drill proxy` records
        #: each call it forwards (organic ones too: started, finished with the server's grpc-status, latency), and
        #: past `settings.max_in_flight` calls in flight (0: none) a new one is refused at once, never forwarded
        self.hop = hop
        self.limit = settings.max_in_flight if hop else 0
        self.in_flight = 0
        self.conns: set[ConnCalls] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.core.stop.on_trip(self._tripped)

    @property
    def enabled(self) -> bool:
        """Whether connections carry this executor: with faults on, and on a hop always (its readings and its
        in-flight limit do not wait for the fault switch)."""
        return self.hop or self.core.settings.enabled

    def connection(self, conn: h2.H2Conn, loop: asyncio.AbstractEventLoop) -> ConnCalls:
        """Carry call faults on a new connection (before its first byte)."""
        self._loop = loop
        calls = ConnCalls(self, conn, loop)
        conn.attach_calls(calls, self.keys)
        self.conns.add(calls)
        return calls

    def _tripped(self) -> None:  # any thread
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._release_all)

    def _release_all(self) -> None:
        for conn in list(self.conns):
            conn.release_all()


class ConnCalls(CallOps):
    """One connection's call faults: asked about every frame as it starts (`frame_start`), handed the frames it
    takes (`took`), told of each new client stream (`cut`). A call stays in `calls` until it is recorded, a cut one
    until the client's side of it ended too (its late frames are dropped, never reach the server), a sink one
    `callops.SINK_S` longer."""

    def __init__(self, owner: LinkCalls, conn: h2.H2Conn, loop: asyncio.AbstractEventLoop) -> None:
        self.owner, self.core, self.conn, self.loop = owner, owner.core, conn, loop
        self.calls: dict[int, Call] = {}
        self._block: list[bytes] = []  # the client's header block, frame by frame, until it ends
        self._block_sid = 0
        self._settings = [False, False]  # each side's first SETTINGS seen (from the server, from the client)
        self.debt = 0
        self.acks: list[tuple[float, bytes]] = []  # the server's PING ACKs kept behind the delay lines (`_ack`)
        self.ack_timer: asyncio.TimerHandle | None = None
        self.stream_window = 65535  # the client's SETTINGS_INITIAL_WINDOW_SIZE (RFC 9113 §6.5.2: 65,535 by default)
        self._warned = False

    # --- the reader's questions ------------------------------------------------------------------------------
    def frame_start(self, to_server: bool, ftype: int, flags: int, sid: int, length: int) -> int:
        if ftype == h2.SETTINGS:
            return h2.PASS if flags & h2.ACK else h2.TAKE
        if not sid:
            if ftype == h2.PING and not to_server and flags & h2.ACK and (self.acks or self._delaying()):
                return h2.TAKE  # kept behind the server frames the delay lines hold (`CallOps._ack`)
            return h2.TAKE if to_server and ftype == h2.WINDOW_UPDATE and self.debt else h2.PASS
        if to_server:
            if ftype in (h2.HEADERS, h2.CONTINUATION):
                return h2.PASS if self.conn.blind and not self._block else h2.TAKE
            call = self.calls.get(sid)
            if call is None:
                return h2.PASS
            if call.cut:
                if ftype == h2.DATA and length:
                    self.conn.down.inject(hb.window_update(length))  # its connection window, given back
                if ftype == h2.RST_STREAM and not call.done:
                    self._left(call)
                if ftype == h2.RST_STREAM or ftype == h2.DATA and flags & h2.END_STREAM:
                    self._client_ended(call)
                return h2.DROP
            if ftype == h2.RST_STREAM:
                self._left(call)  # forwarded: the server's handler is cancelled, as by a caller that leaves
                return h2.PASS
            if ftype == h2.DATA and (call.trip is not None and call.trip.reads or call.up and call.delay):
                return h2.TAKE  # counted (`@read`), or delayed
            return h2.PASS
        call = self.calls.get(sid)
        if call is None:
            return h2.PASS
        if call.sink:
            if ftype == h2.DATA and length:
                self.conn.up.inject(hb.window_update(length))  # the server's connection window, given back
            return h2.DROP
        if ftype == h2.WINDOW_UPDATE:
            return h2.PASS  # the server's credit for the client's request, not its answer: never held
        if call.delay and not call.served and not call.up:
            return h2.TAKE  # the delay line
        if call.trailers or ftype == h2.RST_STREAM:
            return h2.TAKE
        if ftype == h2.HEADERS:
            if flags & h2.END_STREAM or call.server_headers:  # its trailers (or a trailers-only answer)
                call.trailers = True
                return h2.TAKE
            call.server_headers = True
        if ftype == h2.DATA and call.trip is not None and not call.trip.reads:
            return h2.TAKE  # counted (`@after`)
        return h2.TAKE if call.hold else h2.PASS

    def took(self, reader: h2.FrameReader, ftype: int, flags: int, sid: int, data: bytes) -> None:
        if ftype == h2.SETTINGS:
            reader.inject(hb.settings_table_zero(data, not self._settings[reader.to_server]))
            self._settings[reader.to_server] = True
            if reader.to_server:
                self.stream_window = hb.initial_window(data, self.stream_window)
            return
        if ftype == h2.PING:
            self._ack(data)
            return
        if not sid:  # the client's connection WINDOW_UPDATE while the link owes it: the debt kept back first
            increment = int.from_bytes(data[9:13], "big") & h2.MAX_STREAM_ID
            kept = min(increment, self.debt)
            self.debt -= kept
            if increment > kept:
                reader.inject(hb.window_update(increment - kept))
            return
        if reader.to_server and ftype in (h2.HEADERS, h2.CONTINUATION):
            self._client_block(reader, ftype, flags, data)
            return
        call = self.calls.get(sid)
        if call is None:
            reader.inject(data)
        elif ftype == h2.DATA and call.trip is not None and call.trip.reads == reader.to_server:
            self._count(call, reader, data)
        elif call.delay and not call.served and call.up == reader.to_server:
            self._delayed(call, data)
        elif call.trailers or ftype == h2.RST_STREAM:
            self._server_end(call, data)
        else:
            self._hold(call, data, self.stream_window)

    def cut(self, sid: int, found: dict[bytes, bytes], standalone: bool) -> bool:
        """A client's new stream: asks the pipeline once; True when the server must never see it."""
        owner = self.owner
        if not owner.hop and _FAULT not in found and _BAGGAGE not in found:
            return False  # no directive can be there: the gate would pass it (`FaultGate._decide`), uncounted
        path = found.get(b":path", b"").decode("utf-8", "replace")
        md = tuple((k.decode(), v.decode("utf-8", "replace")) for k, v in found.items() if k[:1] != b":")
        if owner.hop and is_infrastructure(path):
            return False  # health and reflection: neither faulted, recorded nor refused, as the interceptors leave them
        kind = owner.kinds.get(path, Kind.BIDI_STREAMING)
        core = self.core
        if owner.limit and owner.in_flight >= owner.limit:
            self._refuse(sid, path, md, kind, standalone)
            return standalone  # a block that used the HPACK table goes on to the server, the stream reset behind it
        plan = core.plan(path, md, None, kind)
        d = plan.decision
        if d.outcome is not Outcome.HIT:
            return self._passes(sid, plan, found, md)  # counted (and a refusal audited) by `plan`
        directive = d.directive
        at_start = not (directive.served or directive.after or directive.read)
        call = self._begin(sid, plan, found, md)
        if at_start and d.mode is not Mode.DELAY and not standalone and plan.decision.outcome is Outcome.HIT:
            # its block used the HPACK table, so the server must read it: it goes on whole (`_client_block`) and the
            # stream is reset right behind it, before the service can answer; the caller gets the fault as from a
            # stream the server never saw
            if not self._warned:
                self._warned = True
                log.warning("link: a fault hit %s on a header block that used the HPACK dynamic table (sent before "
                            "SETTINGS_HEADER_TABLE_SIZE=0 reached the client): the block went on to the service and "
                            "the stream was reset right behind it (said once per connection)", path)  # fmt: skip
            call.reset_behind = True
            return False
        if plan.decision.outcome is not Outcome.HIT:  # the stop or the cap: passes, recorded at its end
            return False
        if plan.trip is not None:
            call.trip = plan.trip
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

    def _begin(self, sid: int, plan, found: dict[bytes, bytes], md: tuple) -> Call:
        t0, token = self.core.begin(plan, hb.grpc_timeout(found.get(b"grpc-timeout")), md)
        scope.leave(token)  # no task of ours runs the call: the scope is not left entered in the loop's context
        call = Call(sid, plan, t0)
        self.calls[sid] = call
        self.owner.in_flight += 1
        return call

    def _passes(self, sid: int, plan, found: dict[bytes, bytes], md: tuple) -> bool:
        """A stream the pipeline does not fault: on a hop it is still a call, recorded at its end (the server's
        grpc-status in its trailers, read by `_server_end`; its reset; the caller's); else untouched, unrecorded."""
        if self.owner.hop:
            self._begin(sid, plan, found, md)
        return False

    def _refuse(self, sid: int, path: str, md: tuple, kind: Kind, standalone: bool = True) -> None:
        """The in-flight limit: RESOURCE_EXHAUSTED at once, counted and audited as `drill proxy` counts a refusal
        (`ServerCore.refuse`); the client's later frames on the stream are dropped. The server never sees the stream,
        unless its header block used the HPACK table (a connection's first blocks): that block must reach the
        server's decoder, so it goes on with RST_STREAM CANCEL right behind it (`_client_block`), before any of
        the request's messages, and whatever the server sends on it is dropped."""
        self.core.refuse(path, md, kind=kind)
        flight = self.core.flight
        self.conn.down.inject(h2.frame(h2.HEADERS, h2.END_STREAM | h2.END_HEADERS, sid,
                                       hb.refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, flight.details)))  # fmt: skip
        if not standalone or not self.conn._block_flags & h2.END_STREAM:
            call = Call(sid, None, 0.0)
            call.cut = call.done = True
            call.refused_behind = not standalone
            self.calls[sid] = call

    def _finish(self, call: Call, code: grpc.StatusCode) -> None:
        if not call.done:
            self.owner.in_flight -= 1
        super()._finish(call, code)

    # --- what the link does ----------------------------------------------------------------------------------
    def _client_block(self, reader: h2.FrameReader, ftype: int, flags: int, data: bytes) -> None:
        """A client's header block goes on whole once read (`cut` has judged a new stream by then), or not at all."""
        if ftype == h2.HEADERS:
            self._block, self._block_sid = [], int.from_bytes(data[5:9], "big") & h2.MAX_STREAM_ID
        self._block.append(data)
        if not flags & h2.END_HEADERS:
            return
        frames, self._block = self._block, []
        call = self.calls.get(self._block_sid)
        if call is not None and call.refused_behind:  # the block is the server's to read; the stream is not
            call.refused_behind = False
            for frame_bytes in frames:
                reader.inject(frame_bytes)
            self.conn.up.inject(h2.rst_stream(call.sid, CANCEL))
            call.sink = True  # what the server sends on it is dropped, its window given back
            call.client_ended = bool(frames[0][4] & h2.END_STREAM)
            self.loop.call_later(SINK_S, self._forget, call)
            return
        if call is not None and call.cut:  # never reaches the server (trailers of a cut stream too)
            if frames[0][4] & h2.END_STREAM:
                self._client_ended(call)
            return
        for frame_bytes in frames:
            reader.inject(frame_bytes)
        if call is not None and call.reset_behind:  # the block is the server's to read; the stream is not
            call.reset_behind = False
            self._fire(call, (Step.HEADERS,) if call.plan.decision.directive.headers_sent else (), True, b"",
                       frames[0][4])  # fmt: skip

    def _server_end(self, call: Call, data: bytes) -> None:
        """The server's trailers (or its reset): an `@served` fault acts now; any other call's answer passes."""
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
        if not call.served or plan.decision.outcome is not Outcome.HIT or not self.core.answered(plan):
            call.hold = False
            block[-1] = self._marked(call, block[-1])  # a mid-stream delay that fired is marked
            self._pass_held(call, *block)  # (an `@served` fault the stop kept from acting: the answer untouched)
            self._finish(call, hb.status(block))
            return
        mode = plan.decision.mode
        if mode is Mode.DELAY:  # its answer MS late (the trailers: a call completes with them), marked
            call.served = False
            self._pass_held(call)
            block[-1] = self._marked(call, block[-1])
            code = hb.status(block)
            for i, frame_bytes in enumerate(block):
                self._line(call, frame_bytes, code if i == len(block) - 1 else None)
            return
        call.hold = False
        self._drop_held(call)
        call.kept = hb.kept_trailers(block)  # the service's trailers stay, beside the fault's status (as in process)
        call.headers_out = call.server_headers and (plan.kind.response_streaming or call.released)
        if plan.decision.directive.headers_sent and not call.headers_out:
            self._headers(call)
        if mode is Mode.ABORT:
            self._answer(call)
        else:
            self._wait(call, self.core.wait_s(plan))

    def _left(self, call: Call) -> None:
        """The caller reset the stream: nothing more is sent to it; what was held is dropped."""
        if call.timer is not None:
            call.timer.cancel()
            call.timer = None
        line, call.line = call.line, []
        credit = sum(len(f) - 9 for _due, f, _ends in line if f[3] == h2.DATA)
        if credit:  # held frames of the delayed direction: its sender's window back
            (self.conn.down if call.up else self.conn.up).inject(hb.window_update(credit))
        self._drop_held(call)
        deadline = call.plan.deadline
        late = deadline is not None and time.monotonic() >= deadline - max(DEADLINE_SLACK_S, LEFT_BY_DEADLINE_S)
        self._finish(call, grpc.StatusCode.DEADLINE_EXCEEDED if late else grpc.StatusCode.CANCELLED)
        self._client_ended(call)

    def _client_ended(self, call: Call) -> None:
        call.client_ended = True
        if call.done and not call.sink:
            self.calls.pop(call.sid, None)

    # --- the stop, the end of the connection -----------------------------------------------------------------
    def release(self, call: Call) -> None:
        """The emergency stop: what this call waits for happens now (a drop answers, a delay's frames go, a held
        answer passes; a tripwire that has not fired never will)."""
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
        if self.ack_timer is not None:  # the lines are out: the ACKs kept behind them go too
            self.ack_timer.cancel()
            self.ack_timer = None
        while self.acks:
            self.conn.down.inject(self.acks.pop(0)[1])

    def close(self) -> None:
        """The connection ended: every call not yet recorded is, as cancelled (its caller is gone)."""
        self.owner.conns.discard(self)
        if self.ack_timer is not None:
            self.ack_timer.cancel()
        for call in list(self.calls.values()):
            if call.timer is not None:
                call.timer.cancel()
            call.line, call.held = [], []
            self._finish(call, grpc.StatusCode.CANCELLED)
        self.calls.clear()
