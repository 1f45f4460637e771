"""One direction of a relayed connection: its source's bytes through the toxics' byte stages to its destination.

Owns the relay's bound on what it buffers (harness.link.relay states the promise): a direction stops reading
its source while its destination's write buffer is past `WRITE_HIGH` or its stages hold more than
`HELD_HIGH` of its bytes, and reads again below `HELD_LOW`; held bytes leave in order, each when its stage
says, and wait while the destination is full, as TCP would. With no stage and nothing queued a chunk is
written at once (the common case: no copy, no timer).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING

from harness.link import h2, schedule

if TYPE_CHECKING:
    from harness.link.relay import Connection, _Side

#: A destination's write buffer past which its source stops being read (bytes)
WRITE_HIGH = 256 * 1024
#: Bytes a toxic may hold in one direction before its source stops being read, and where reading resumes
HELD_HIGH = 1024 * 1024
HELD_LOW = HELD_HIGH // 2
_EOF = object()


class Pipe:
    """One direction of a connection: source side → byte stages → destination side."""

    def __init__(self, conn: Connection, src: _Side, dst: _Side, reader: h2.FrameReader) -> None:
        self.conn = conn
        self.src = src
        self.dst = dst
        self.reader: h2.FrameReader | None = reader
        reader.send = self.push
        self.stages: list[schedule.Stage] = []
        self.queue: deque = deque()
        self.held = 0
        self._timer: asyncio.TimerHandle | None = None
        self._blocked_write = False
        self._blocked_held = False
        self._paused = False
        self.ended = False

    def receive(self, data: bytes) -> None:
        reader = self.reader
        if reader is not None:
            left = reader.preface
            if left and bytes(data[:left]) != h2.PREFACE[len(h2.PREFACE) - left :][: len(data)]:
                self.conn.not_h2()
            else:
                data = reader.feed(data)
        if data:
            self.push(data)

    def push(self, data: bytes) -> None:
        if not self.stages and not self.queue:
            dst = self.dst.transport
            if not dst.is_closing():
                dst.write(data)
            return
        items = [(self.conn.loop.time(), data)]
        for stage in self.stages:
            items = stage.feed(items)
        for due, chunk in items:
            self._enqueue(due, chunk)

    def eof(self) -> None:
        t = self.conn.loop.time()
        for stage in self.stages:
            t = stage.eof(t)
        self._enqueue(t, _EOF)

    def _enqueue(self, due: float, item) -> None:
        if self.queue:
            due = max(due, self.queue[-1][0])
        self.queue.append((due, item))
        if item is not _EOF:
            self.held += len(item)
            self.conn.link.metrics.held(len(item))
            if self.held > HELD_HIGH and not self._blocked_held:
                self.set_blocked(held=True)
        if len(self.queue) == 1:
            self._drain()

    def _drain(self) -> None:
        self._timer = None
        loop = self.conn.loop
        now = loop.time()
        queue = self.queue
        while queue and queue[0][0] <= now + 0.0002 and not self._blocked_write:
            _due, item = queue.popleft()
            if item is _EOF:
                self.ended = True
                dst = self.dst.transport
                if dst is not None and not self.dst.closed and not dst.is_closing() and dst.can_write_eof():
                    try:
                        dst.write_eof()
                    except OSError:  # the peer is gone already: its own connection_lost ends the connection
                        pass
                self.conn.maybe_done()
                continue
            self.held -= len(item)
            self.conn.link.metrics.held(-len(item))
            if not self.dst.closed and not self.dst.transport.is_closing():
                self.dst.transport.write(item)
        if queue and not self._blocked_write:  # else the destination's resume_writing drains it
            self._timer = loop.call_at(queue[0][0], self._drain)
        if self._blocked_held and self.held < HELD_LOW:
            self.set_blocked(held=False)

    def flush(self) -> None:
        """Everything held goes now, in order (a toxic was removed)."""
        if self._timer is not None:
            self._timer.cancel()
        self.queue = deque((0.0, item) for _due, item in self.queue)
        if self.queue:
            self._drain()

    def set_blocked(self, write: bool | None = None, held: bool | None = None) -> None:
        if write is not None:
            self._blocked_write = write
        if held is not None:
            self._blocked_held = held
        if write is False and self.queue and self._timer is None:
            self._drain()
        pause = self._blocked_write or self._blocked_held
        src = self.src.transport
        if pause != self._paused and src is not None and not self.src.closed and not src.is_closing():
            self._paused = pause
            (src.pause_reading if pause else src.resume_reading)()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.held:
            self.conn.link.metrics.held(-self.held)
            self.held = 0
        self.queue.clear()
