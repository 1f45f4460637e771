"""The HTTP/2 toxics as effects on one connection's frames: what each does when it begins and ends.

A byte toxic is a timing stage (`harness.link.schedule`); an HTTP/2 toxic acts on frames, through the
connection's `H2Conn` and its two readers (`harness.link.h2`):
- `goaway`: one GOAWAY to the client, once the connection has opened `after_streams` streams (at once on
  a connection that has; default 1, so a new connection serves one stream first, as under a maximum age);
  the client drains the streams up to its last stream id and opens a new connection for new calls; the
  server is not told.
- `rst_stream`: each drill-tagged stream, past the first `after_streams` and up to `limit`, reset at `at`
  (its headers, its first DATA, its end), or with `after_messages` k once its k-th gRPC message of the
  toxic's direction passed (at the end of the DATA frame that ends it; streams opened while the toxic acts,
  whose messages were counted from their first byte): RST_STREAM `code` to the client and CANCEL to the server.
  Organic streams on the same connection pass untouched.
- `ping_blackhole`: PING frames (and their ACKs) of its direction dropped; all else passes.
- `max_streams`: SETTINGS_MAX_CONCURRENT_STREAMS `streams` sent to the client (the server's own value
  sent back when it ends); the client's ACK of it is kept from the server, which never sent it.
- `window_stall`: WINDOW_UPDATE frames of its direction withheld, and sent on when it ends.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.link import h2
from harness.link.toxics import H2_CODES, Toxic


class Effect:
    """An HTTP/2 toxic acting on one connection."""

    def __init__(self, toxic: Toxic, conn: h2.H2Conn, count: Callable[[str], None]) -> None:
        self.toxic = toxic
        self.conn = conn
        self.count = count  # count("stream_reset"), for the link's metrics

    @property
    def reader(self) -> h2.FrameReader:
        return self.conn.up if self.toxic.upstream else self.conn.down

    def begin(self) -> None:
        """The toxic starts acting on this connection."""

    def end(self) -> None:
        """The toxic stops acting on this connection (removed, or the one-way stop)."""

    def on_stream(self, stream: h2.Stream, point: str) -> None:
        """A client's stream reached `point` (`headers`, `data`, `end`)."""


class GoAway(Effect):
    sent = False

    def begin(self) -> None:
        self._maybe()

    def on_stream(self, stream: h2.Stream, point: str) -> None:
        if point == "headers":
            self._maybe()

    def _maybe(self) -> None:
        conn = self.conn
        if self.sent or conn.drill_count + conn.organic_count < self.toxic.attr("after_streams"):
            return
        self.sent = True
        last = conn.last_stream(self.toxic.attr("last_stream"))
        conn.down.inject(h2.goaway(last, H2_CODES[self.toxic.attr("code")], self.toxic.attr("debug").encode()))


class RstStream(Effect):
    seen = 0
    reset = 0

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.passed: set[int] = set()  # drill streams among the first `after_streams` (still open, unless counting)
        self.messages = self.toxic.attr("after_messages")
        self.point = f"message_{self.toxic.stream}" if self.messages else self.toxic.attr("at")
        self.side = 0 if self.toxic.upstream else 1

    def begin(self) -> None:
        if self.messages:
            self.conn.count_messages += 1

    def end(self) -> None:
        if self.messages:
            self.conn.count_messages -= 1

    def on_stream(self, stream: h2.Stream, point: str) -> None:
        if not stream.drill:
            return
        if point == "headers":
            self.seen += 1
            if self.seen <= self.toxic.attr("after_streams"):
                self.passed.add(stream.id)
        if stream.id in self.passed:
            if point == "end" and not self.messages:  # counting: its server's messages are still to come
                self.passed.discard(stream.id)
            return
        if point != self.point:
            return
        if self.messages and stream.messages[self.side] != self.messages:
            return
        limit = self.toxic.attr("limit")
        if limit and self.reset >= limit:
            return
        self.reset += 1
        self.conn.up.inject(h2.rst_stream(stream.id, H2_CODES["CANCEL"]))
        self.conn.down.inject(h2.rst_stream(stream.id, H2_CODES[self.toxic.attr("code")]))
        self.conn.streams.pop(stream.id, None)
        self.count("stream_reset")


class PingBlackhole(Effect):
    def begin(self) -> None:
        self.reader.drop = self.reader.drop | {h2.PING}

    def end(self) -> None:
        self.reader.drop = self.reader.drop - {h2.PING}


class WindowStall(Effect):
    def begin(self) -> None:
        self.reader.hold = self.reader.hold | {h2.WINDOW_UPDATE}

    def end(self) -> None:
        self.reader.hold = self.reader.hold - {h2.WINDOW_UPDATE}
        self.reader.release_held()


class MaxStreams(Effect):
    def _send(self, value: int) -> None:
        fifo = self.conn.settings_fifo
        self.conn.down.inject(h2.settings({h2.SETTINGS_MAX_CONCURRENT_STREAMS: value}), lambda: fifo.append(True))

    def begin(self) -> None:
        self._send(self.toxic.attr("streams"))

    def end(self) -> None:
        server = self.conn.server_max_streams
        self._send(h2.MAX_STREAM_ID if server is None else server)


EFFECTS: dict[str, type[Effect]] = {
    "goaway": GoAway, "rst_stream": RstStream, "ping_blackhole": PingBlackhole,
    "window_stall": WindowStall, "max_streams": MaxStreams,
}  # fmt: skip
