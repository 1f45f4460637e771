"""Toxiproxy's byte toxics as pure timing stages: data in at a time, data out at later times.

A stage belongs to one direction of one connection. `feed(items)` takes `(time, bytes)` items in
order and returns the items it lets through, each at the time it may leave (never earlier than it
came, never before the item ahead of it: a stage keeps the byte order); `eof(t)` says when the
end of the stream may pass. A stage that ends the connection asks for it through `act(time,
action)` (`CLOSE`: a clean close; `RESET`: TCP RST, as Toxiproxy's SO_LINGER 0). Nothing here
touches a socket or a clock, so each definition is tested exactly (tests/link/test_schedule.py);
`harness.link.relay` runs the items on the event loop. Random choices (jitter, slice sizes) come
from the `random.Random` the relay seeds per link seed, toxic and connection: a run replays.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from harness.link.toxics import Toxic

CLOSE = "close"
RESET = "reset"
Item = tuple[float, bytes]
Act = Callable[[float, str], None]


class Stage:
    """A stage that lets everything through at once (the base of the others)."""

    def __init__(self, toxic: Toxic, act: Act, rng: random.Random) -> None:
        self.toxic = toxic
        self.act = act
        self.rng = rng

    def attach(self, now: float) -> None:
        """The toxic starts acting on this connection at `now`."""

    def feed(self, items: list[Item]) -> list[Item]:
        return items

    def eof(self, t: float) -> float:
        return t


class Latency(Stage):
    """Each chunk leaves `latency` ms (± `jitter`, drawn as Go's `Int63n(2j) - j`) after it came, in order."""

    last = 0.0

    def feed(self, items: list[Item]) -> list[Item]:
        base, jitter = self.toxic.attr("latency"), self.toxic.attr("jitter")
        out = []
        for t, data in items:
            delay = base + (self.rng.randrange(2 * jitter) - jitter if jitter > 0 else 0)
            self.last = max(t + delay / 1000.0, self.last)
            out.append((self.last, data))
        return out


class Bandwidth(Stage):
    """At most `rate` KB/s (1,000 bytes): a chunk leaves once the link has had the time to carry it; large
    chunks leave in pieces of 100 ms each, as Toxiproxy sends them."""

    busy = 0.0

    def feed(self, items: list[Item]) -> list[Item]:
        rate = self.toxic.attr("rate") * 1000.0
        if rate <= 0:
            return items
        piece = max(1, int(rate / 10))
        out = []
        for t, data in items:
            for i in range(0, len(data), piece):
                part = data[i : i + piece]
                self.busy = max(t, self.busy) + len(part) / rate
                out.append((self.busy, part))
        return out


class Slicer(Stage):
    """Each chunk cut into slices of about `average_size` bytes (± `size_variation`), `delay` µs apart."""

    last = 0.0

    def _cuts(self, start: int, end: int) -> list[int]:
        avg, var = self.toxic.attr("average_size"), self.toxic.attr("size_variation")
        if (end - start) - avg <= var or avg <= 0:
            return [end]
        mid = start + (end - start) // 2
        if var > 0:
            mid += self.rng.randrange(2 * var) - var
        mid = min(max(mid, start + 1), end - 1)
        return self._cuts(start, mid) + self._cuts(mid, end)

    def feed(self, items: list[Item]) -> list[Item]:
        gap = self.toxic.attr("delay") / 1e6
        out = []
        for t, data in items:
            start, when = 0, max(t, self.last)
            for end in self._cuts(0, len(data)):
                out.append((when, data[start:end]))
                start, when = end, when + gap
            self.last = when - gap
        return out


class LimitData(Stage):
    """`bytes` bytes pass in this direction of the connection, then it is closed: at the chunk that reaches the
    limit, as Toxiproxy's LimitDataToxic closes (with `bytes: 0`, at the first chunk, which passes nothing)."""

    sent = 0
    closed = False

    def feed(self, items: list[Item]) -> list[Item]:
        limit = self.toxic.attr("bytes")
        out = []
        for t, data in items:
            if self.closed:
                break
            part = data[: max(0, limit - self.sent)]
            if part:
                self.sent += len(part)
                out.append((t, part))
            if self.sent >= limit:
                self.closed = True
                self.act(t, CLOSE)
        return out


class Timeout(Stage):
    """Data dropped; the connection closed `timeout` ms after the toxic began to act on it, or (0) kept open
    for as long as the toxic stays: a blackhole. In `kernel` mode the data passes here: the kernel drops the
    connection's packets (harness.link.kernel), and TCP delivers what it held once the toxic is removed."""

    def attach(self, now: float) -> None:
        if self.toxic.attr("timeout") > 0:
            self.act(now + self.toxic.attr("timeout") / 1000.0, CLOSE)

    def feed(self, items: list[Item]) -> list[Item]:
        return items if self.toxic.attr("mode") == "kernel" else []


class ResetPeer(Stage):
    """At the first data after the toxic began to act, that data dropped and, `timeout` ms later, both ends
    reset (TCP RST)."""

    armed = False

    def feed(self, items: list[Item]) -> list[Item]:
        if items and not self.armed:
            self.armed = True
            self.act(items[0][0] + self.toxic.attr("timeout") / 1000.0, RESET)
        return []


class SlowClose(Stage):
    """The end of the stream passes `delay` ms late."""

    def eof(self, t: float) -> float:
        return t + self.toxic.attr("delay") / 1000.0


STAGES: dict[str, type[Stage]] = {
    "latency": Latency, "bandwidth": Bandwidth, "slicer": Slicer, "limit_data": LimitData,
    "timeout": Timeout, "reset_peer": ResetPeer, "slow_close": SlowClose,
}  # fmt: skip
