"""The data plane: one link relays each accepted connection to its upstream, byte for byte.

Promises (each tested in tests/link/):
- Bytes pass unchanged and in order in both directions while no toxic acts (pass-through exactness).
- Nothing buffers without bound: a direction's reading pauses while its destination's write buffer is
  past `WRITE_HIGH` or a toxic holds more than `HELD_HIGH` of its bytes, and held bytes wait while the
  destination is full, as TCP would, so a slow reader slows the writer (each direction: `harness.link.pipe`).
  The client is not read before the upstream connection is made.
- Each connection's HTTP/2 frames are read as they pass (`harness.link.h2`): its streams, and which
  carry the drill tenant. A connection that is not HTTP/2 is relayed all the same (frames never parsed
  past the first bytes that are not a client preface).
- A toxic acts on a connection when the link's seeded draw picks it (`harness.link.draw`, by the
  connection's order on the link) and the link set's cap on faulted connections has room; it acts from
  when it is set (on open connections too; with `after_streams` N, from the connection's N+1-th stream's
  HEADERS on) until it is removed; each connection it began on is recorded (`Link.began`,
  `harness.link.ledger`). Removing it lets held bytes go at once
  (as Toxiproxy does); bytes a `timeout` dropped stay dropped. A kernel-mode `timeout` drops the
  connection's packets in the kernel instead (`harness.link.kernel`) from when it begins on a connection
  until it stops there (removed, or the connection closed).
- End of stream is passed on as a half-close (the other direction goes on); a reset is passed on as one.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
from collections.abc import Callable

from harness.link import draw, effects, h2, kernel, schedule
from harness.link.pipe import HELD_HIGH as HELD_HIGH  # re-exported: the bounds are the relay's promise
from harness.link.pipe import WRITE_HIGH, Pipe
from harness.link.toxics import CONNECT_TYPES, H2_TYPES, Toxic

log = logging.getLogger("drill.link")

#: toxics whose `after_streams` their effect counts itself (harness.link.effects)
_OWN_AFTER = frozenset({"goaway", "rst_stream"})
_LINGER0 = struct.pack("ii", 1, 0)


class _Side(asyncio.Protocol):
    """One socket of a connection (the client's or the upstream's)."""

    def __init__(self, conn: Connection, client: bool) -> None:
        self.conn = conn
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH)
        if self.client:
            self.conn.client_made()

    def data_received(self, data: bytes) -> None:
        if self.client and self.conn.early is not None:  # before the upstream is there (uvloop reads at once)
            self.conn.early.append(data)
            self.transport.pause_reading()
            return
        (self.conn.up if self.client else self.conn.down).receive(data)

    def eof_received(self) -> bool:
        (self.conn.up if self.client else self.conn.down).eof()
        return True  # half-close: the other direction goes on

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.conn.lost(self, exc)

    def pause_writing(self) -> None:
        (self.conn.down if self.client else self.conn.up).set_blocked(write=True)

    def resume_writing(self) -> None:
        (self.conn.down if self.client else self.conn.up).set_blocked(write=False)

    def reset(self) -> None:
        if self.transport is not None and not self.closed:
            sock = self.transport.get_extra_info("socket")
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER0)
            except OSError:
                pass
            self.transport.abort()


class _Acting:
    """A toxic acting on one connection: its byte stage or its HTTP/2 effect, and its pending actions."""

    def __init__(self, toxic: Toxic) -> None:
        self.toxic = toxic
        self.stage: schedule.Stage | None = None
        self.effect: effects.Effect | None = None
        self.handles: list[asyncio.TimerHandle] = []
        self.kernel: kernel.Tuple | None = None  # the 5-tuple whose packets the kernel drops (kernel mode)


class Connection:
    """One accepted connection and its upstream connection."""

    def __init__(self, link, index: int) -> None:
        self.link = link
        self.index = index
        self.loop = link.loop
        self.client = _Side(self, client=True)
        self.server = _Side(self, client=False)
        self.h2 = h2.H2Conn(link.drill_tenants)
        self.h2.on_stream = self._on_stream
        calls = link.links.calls
        #: the drill's per-call faults on this connection (`harness.link.calls`), when the link set carries them
        self.calls = calls.connection(self.h2, self.loop) if calls is not None and calls.enabled else None
        self.up = Pipe(self, self.client, self.server, self.h2.up)
        self.down = Pipe(self, self.server, self.client, self.h2.down)
        self.acting: dict[str, _Acting] = {}
        self.faulted = False  # holds one of the link set's faulted-connection slots
        #: what the client sent before the upstream connection was made (None once it is)
        self.early: list[bytes] | None = []
        self.done = False
        self.hung = False
        #: `drill_only` toxics drawn for this connection, waiting for its first drill stream
        self.waiting: dict[str, Toxic] = {}
        #: toxics drawn for this connection whose `after_streams` it has not opened yet
        self.deferred: dict[str, Toxic] = {}

    # --- lifecycle ---
    def client_made(self) -> None:
        self.client.transport.pause_reading()  # not read before the upstream is there
        for toxic in self.link.toxics.values():
            if toxic.type in CONNECT_TYPES and self._drawn(toxic) and self._take_slot():
                self.link.metrics.faulted(toxic.type)
                self.link.began(toxic.name, self)
                if toxic.attr("mode") == "refuse":
                    self.client.reset()
                    return
                self.hung = True  # accepted, never answered: not read, no upstream
                return
        self.loop.create_task(self._connect())

    async def _connect(self) -> None:
        host, port = self.link.upstream_addr
        try:
            await self.loop.create_connection(lambda: self.server, host, port)
        except OSError as exc:
            log.info("link %s: upstream %s:%s refused a connection (%s)", self.link.name, host, port, exc)
            self.client.reset()  # as the upstream did: the caller sees the connection fail
            return
        if self.client.closed:
            self.server.transport.close()
            return
        for toxic in self.link.toxics.values():
            self.toxic_set(toxic)
        early, self.early = self.early, None
        for data in early:
            self.up.receive(data)
        self.client.transport.resume_reading()

    def lost(self, side: _Side, exc) -> None:
        other = self.server if side is self.client else self.client
        if not other.closed and other.transport is not None:
            if exc is not None:  # reset on one side: reset on the other
                other.reset()
            else:
                # what was already handed to the other side's transport goes first
                pipe = self.up if side is self.client else self.down
                pipe.flush()
                other.transport.close()
        if self.client.closed and (self.server.closed or self.server.transport is None):
            self._finish()

    def maybe_done(self) -> None:
        if self.up.ended and self.down.ended:
            for side in (self.client, self.server):
                if side.transport is not None and not side.closed:
                    side.transport.close()

    def not_h2(self) -> None:
        """The client did not start with HTTP/2's preface: relay bytes, read no frames."""
        self.up.reader = self.down.reader = None

    def _finish(self) -> None:
        if self.done:
            return
        self.done = True
        for name in list(self.acting):
            self._stop_acting(name, flush=False)
        if self.calls is not None:
            self.calls.close()
        self.up.close()
        self.down.close()
        self._release_slot()
        self.link.forget(self)

    def drain(self) -> None:
        """Tell the client to open no new stream here: GOAWAY NO_ERROR naming the last stream it opened (RFC 9113
        §6.8, a graceful shutdown); the streams in flight go on, and so does the connection until `close`."""
        if not self.done and not self.hung:
            self.h2.down.inject(h2.goaway(self.h2.last_stream("current"), 0, b"draining"))

    @property
    def streams_in_flight(self) -> int:
        return 0 if self.done else len(self.h2.streams)

    def close(self) -> None:
        for side in (self.client, self.server):
            if side.transport is not None and not side.closed:
                side.transport.close()

    def reset(self) -> None:
        self.client.reset()
        self.server.reset()

    # --- toxics ---
    def _drawn(self, toxic: Toxic) -> bool:
        """The seeded draw picked this connection for `toxic`."""
        return draw.connection_hit(self.link.seed, toxic.name, self.index, toxic.toxicity)

    def _take_slot(self) -> bool:
        """One of the link set's faulted-connection slots for this connection (kept while a toxic acts)."""
        if not self.faulted:
            if not self.link.slots.acquire():
                return False
            self.faulted = True
        return True

    def _release_slot(self) -> None:
        if self.faulted:
            self.faulted = False
            self.link.slots.release()

    def toxic_set(self, toxic: Toxic) -> None:
        """`toxic` was set on the link (or this connection just opened): act if drawn."""
        if self.done or self.hung or toxic.type in CONNECT_TYPES or self.server.transport is None:
            return
        self.waiting.pop(toxic.name, None)
        self.deferred.pop(toxic.name, None)
        if toxic.name in self.acting:  # an update: the new attributes from now on
            self._stop_acting(toxic.name, flush=True)
        elif not self._drawn(toxic):
            return
        if self._streams_to_come(toxic):
            self.deferred[toxic.name] = toxic  # acts from the connection's N+1-th stream on (`_on_stream`)
            if not self.acting:
                self._release_slot()
            return
        self._gate(toxic)

    def _streams_to_come(self, toxic: Toxic, opening: int = 0) -> bool:
        """`toxic` waits for more streams on this connection (its `after_streams`) before it acts: it acts once
        the connection opened that many before the stream `opening` now (1 at a stream's HEADERS, else 0)."""
        if toxic.type in _OWN_AFTER:
            return False  # goaway and rst_stream count streams themselves
        return self.h2.drill_count + self.h2.organic_count - opening < toxic.attributes.get("after_streams", 0)

    def _gate(self, toxic: Toxic) -> None:
        """A drawn toxic acts now, or (drill_only) waits for this connection's first drill stream."""
        if toxic.drill_only and not self.h2.only_drill:
            if self.h2.organic_count == 0 and self.up.reader is not None:
                self.waiting[toxic.name] = toxic  # acts from the first drill stream, while only drill streams come
            if not self.acting:
                self._release_slot()
            return
        self._begin(toxic)

    def _begin(self, toxic: Toxic) -> None:
        if not self._take_slot():
            return
        acting = _Acting(toxic)
        self.acting[toxic.name] = acting
        self.link.metrics.faulted(toxic.type)
        self.link.began(toxic.name, self)
        if toxic.type in H2_TYPES:
            if self.up.reader is None:
                return  # not HTTP/2: nothing to act on
            acting.effect = effects.EFFECTS[toxic.type](toxic, self.h2, self.link.metrics.count)
            acting.effect.begin()
            return
        if toxic.mode == "kernel":
            self._kernel_drop(acting)
        seed = f"{self.link.seed}/{toxic.name}/{self.index}"
        stage = schedule.STAGES[toxic.type](toxic, lambda when, action: self._act(acting, when, action),
                                            random.Random(seed))  # fmt: skip
        acting.stage = stage
        pipe = self.up if toxic.upstream else self.down
        pipe.flush()
        pipe.stages = [*pipe.stages, stage]
        stage.attach(self.loop.time())

    def _kernel_drop(self, acting: _Acting) -> None:
        """The kernel drops this connection's packets while `acting` acts (a kernel-mode `timeout`)."""
        transport = self.client.transport
        peer, local = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
        if not peer or not local:
            return  # closing already: nothing to drop
        acting.kernel = kernel.five_tuple(peer, local)
        self.link.kernel_drops().drop(acting.kernel)
        self.link.metrics.kernel_drops(1)

    def toxic_removed(self, name: str) -> None:
        self.waiting.pop(name, None)
        self.deferred.pop(name, None)
        if name in self.acting:
            self._stop_acting(name, flush=True)
            if not self.acting:
                self._release_slot()

    def _stop_acting(self, name: str, flush: bool) -> None:
        acting = self.acting.pop(name)
        for handle in acting.handles:
            handle.cancel()
        if acting.effect is not None:
            acting.effect.end()
        if acting.kernel is not None:
            self.link.kernel_drops().release(acting.kernel)
            self.link.metrics.kernel_drops(-1)
        if acting.stage is not None:
            pipe = self.up if acting.toxic.upstream else self.down
            pipe.stages = [s for s in pipe.stages if s is not acting.stage]
            if flush:
                pipe.flush()

    def _act(self, acting: _Acting, when: float, action: str) -> None:
        fn: Callable[[], None] = self.reset if action == schedule.RESET else self.close
        acting.handles.append(self.loop.call_at(when, fn))

    def _on_stream(self, stream: h2.Stream, point: str) -> None:
        if point == "headers":
            if not stream.drill:  # an organic stream: `drill_only` toxics leave this connection for good
                self.waiting.clear()
                for name in [n for n, a in self.acting.items() if a.toxic.drill_only]:
                    self._stop_acting(name, flush=True)
                if not self.acting:
                    self._release_slot()
            elif self.waiting and self.h2.only_drill:
                waiting, self.waiting = self.waiting, {}
                for toxic in waiting.values():
                    self._begin(toxic)
            if self.deferred:  # this stream may be the N+1-th a toxic waited for: it acts from its HEADERS on
                for name, toxic in list(self.deferred.items()):
                    if not self._streams_to_come(toxic, opening=1):
                        del self.deferred[name]
                        self._gate(toxic)
        for acting in list(self.acting.values()):
            if acting.effect is not None:
                acting.effect.on_stream(stream, point)
