"""The runner's own scraper: every `/metrics` endpoint once a second, reduced to one snapshot.

Endpoints are fetched concurrently with a bare asyncio HTTP/1.0 GET (127.0.0.1
only, bounded time and size), parsed with prometheus_client's text parser and
reduced by `series.reduce_families`. An endpoint that does not answer is
counted in `errors` and its last values are repeated for that second, so a
missed scrape never looks like a counter reset.

With an `edge` source (the in-runner load's `EdgeCounts`: every call filed under
the whole second it ended in, harness.core.snapshots) samples are whole unix
seconds: each scrape emits one sample per second that ended since the last one,
the edge's counts exact for that second whatever the scrape's delay, and each
hop's counters interpolated to that second between the scrapes around it (as
the Prometheus read-back does). A late tick then loses no second and moves no
call. Without one (a Locust load in its own process), a sample's time is the
scrape's.
"""

from __future__ import annotations

import asyncio
import math
import time
import urllib.parse
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from harness.drills.readings.series import Snapshot, merge, reduce_families

MAX_BODY = 8 * 1024 * 1024


async def fetch(url: str, timeout_s: float = 2.0) -> str:
    """GET a plain-HTTP URL and return the body text."""
    u = urllib.parse.urlsplit(url)
    host, port = u.hostname or "127.0.0.1", u.port or 80

    async def go() -> str:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            path = u.path or "/"
            writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: text/plain\r\n\r\n".encode())
            await writer.drain()
            data = await reader.read(MAX_BODY)
            while len(data) < MAX_BODY:
                more = await reader.read(MAX_BODY - len(data))
                if not more:
                    break
                data += more
        finally:
            writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0]
        if b" 200 " not in status + b" ":
            raise OSError(f"{url}: {status.decode(errors='replace')}")
        return body.decode("utf-8", errors="replace")

    return await asyncio.wait_for(go(), timeout_s)


def reduce_text(text: str, *, config: str | None, service: str | None, edge: bool) -> dict[str, float]:
    return reduce_families(text_string_to_metric_families(text), config=config, service=service, edge=edge)


#: Reads of the baseline and of the final counts: a repeated value there would lose calls from the totals,
#: so a failed endpoint is asked again (each try is bounded by `fetch`'s timeout).
SETTLE_TRIES = 5


class Scraper:
    """Collects `(t, snapshot)` samples, t in seconds since `t0` (monotonic; with an edge source, the whole
    unix second s is t = s − wall0).

    `endpoints()` returns (service, URL) pairs; service None or "loadgen" marks the load driver, the only
    endpoint whose client series are the edge's. `edge(second)` (optional) returns the edge's exact snapshot
    as of a whole unix second that has ended.
    """

    def __init__(
        self,
        endpoints: Callable[[], list[tuple[str | None, str]]],
        *,
        config: str | None,
        edge: Callable[[int], Snapshot] | None = None,
        t0: float | None = None,
        interval_s: float = 1.0,
    ) -> None:
        self.endpoints = endpoints
        self.config = config
        self.edge = edge
        self.t0 = time.monotonic() if t0 is None else t0
        #: wall-clock time at t0: the whole unix second s is the sample time s − wall0
        self.wall0 = time.time() - (time.monotonic() - self.t0)
        self.interval_s = interval_s
        self.samples: list[tuple[float, Snapshot]] = []
        self.errors = 0
        #: seconds emitted by a later scrape than their own (a late tick): their hop values are interpolated
        self.caught_up = 0
        self._last: dict[str, dict[str, float]] = {}
        self._prev_hops: tuple[float, Snapshot] | None = None
        self._next_second: int | None = None
        self._primed = False

    async def prime(self) -> None:
        """Read the hops before the load starts: their values at the load's first second (the baseline)."""
        self._prev_hops = (time.time(), await self._scrape_hops(tries=SETTLE_TRIES))
        self._primed = True

    def begin_at(self, second: float) -> None:
        """With an edge source: emit every second from this one (the load's first: the baseline) on, however
        late the first scrape comes."""
        self._next_second = int(second)

    async def settle(self) -> None:
        """After the load's last call: read the hops, then once more in the next whole second, so the last
        seconds' hop values are the final counts themselves (between two equal reads nothing is estimated)."""
        if self.edge is None:
            await self.scrape_once()
            return
        self._prev_hops = (time.time(), await self._scrape_hops(tries=SETTLE_TRIES))
        await asyncio.sleep(max(0.0, math.floor(time.time()) + 1.0 + 0.05 - time.time()))
        await self.scrape_once(tries=SETTLE_TRIES)

    def mono(self, unix: float) -> float:
        """The monotonic time of a unix time, on this scraper's clock pair."""
        return self.t0 + (unix - self.wall0)

    async def _scrape_hops(self, *, tries: int = 1) -> Snapshot:
        """Every endpoint once (`tries` > 1: again, up to that many times, while any failed)."""
        eps = [(svc, url) for svc, url in self.endpoints() if self.edge is None or svc not in (None, "loadgen")]
        results = await asyncio.gather(*(fetch(url) for _, url in eps), return_exceptions=True)
        for _ in range(tries - 1):
            failed = [i for i, res in enumerate(results) if isinstance(res, BaseException)]
            if not failed:
                break
            await asyncio.sleep(0.25)
            again = await asyncio.gather(*(fetch(eps[i][1]) for i in failed), return_exceptions=True)
            for i, res in zip(failed, again, strict=True):
                results[i] = res
        snaps = []
        for (service, url), res in zip(eps, results, strict=True):
            if isinstance(res, BaseException):
                # a missed scrape repeats the endpoint's last values: counters must not look reset
                self.errors += 1
                if url in self._last:
                    snaps.append(self._last[url])
                continue
            edge = service is None or service == "loadgen"
            snap = reduce_text(res, config=self.config, service=service, edge=edge)
            self._last[url] = snap
            snaps.append(snap)
        return merge(snaps)

    async def scrape_once(self, *, tries: int = 1) -> tuple[float, Snapshot]:
        if self.edge is None:
            t = time.monotonic() - self.t0
            sample = (round(t, 3), await self._scrape_hops(tries=tries))
            self.samples.append(sample)
            return sample
        hops = await self._scrape_hops(tries=tries)
        now = time.time()
        last = math.floor(now)
        first = last if self._next_second is None else self._next_second
        for second in range(first, last + 1):
            if second < last:
                self.caught_up += 1
            if self._primed and not self.samples:  # the baseline: the hops as read before the first call
                at = self._prev_hops[1]
            else:
                at = _interpolate(self._prev_hops, (now, hops), second)
            snap = merge([at, self.edge(second)])
            self.samples.append((round(second - self.wall0, 3), snap))
        self._next_second = max(first, last + 1)
        self._prev_hops = (now, hops)
        return self.samples[-1]

    async def run(
        self, until: Callable[[], bool], on_sample: Callable[[], None] | None = None, *, anchor: float | None = None
    ) -> None:
        """Scrape on a fixed 1-s grid until `until()` is true (checked each tick).

        `anchor` (monotonic seconds) puts the grid on anchor + k·interval: the runner anchors it just after
        the load's first whole second, so each phase boundary is a sample time and every second (t−1, t]
        lies in one phase. `drill analyze --prometheus` builds its grid on the fault-on time the same way,
        so both read the same seconds.
        """
        now = time.monotonic()
        if anchor is None:
            next_at = now
        elif now <= anchor:
            next_at = anchor
        else:
            next_at = anchor + math.ceil((now - anchor) / self.interval_s) * self.interval_s
        await asyncio.sleep(max(0.0, next_at - now))
        while not until():
            await self.scrape_once()
            if on_sample is not None:
                on_sample()
            next_at += self.interval_s
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))


def _interpolate(prev: tuple[float, Snapshot] | None, cur: tuple[float, Snapshot], at: float) -> Snapshot:
    """Hop values at unix time `at`, between two scrapes (counters linear, gauges the later value)."""
    if prev is None or cur[0] <= prev[0]:
        return cur[1]
    (t0, a), (t1, b) = prev, cur
    f = min(1.0, max(0.0, (at - t0) / (t1 - t0)))
    out: Snapshot = {}
    for key, v in b.items():
        old = a.get(key)
        out[key] = v if key.is_gauge or old is None or v < old else old + (v - old) * f
    return out
