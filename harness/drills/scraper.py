"""The runner's own scraper: every `/metrics` endpoint once a second, reduced to one snapshot.

Endpoints are fetched concurrently with a bare asyncio HTTP/1.0 GET (127.0.0.1
only, bounded time and size), parsed with prometheus_client's text parser and
reduced by `series.reduce_families`. An endpoint that does not answer is
counted in `errors` and its last values are repeated for that second, so a
missed scrape never looks like a counter reset.
"""

from __future__ import annotations

import asyncio
import math
import time
import urllib.parse
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from harness.drills.series import Snapshot, merge, reduce_families

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


class Scraper:
    """Collects `(t, snapshot)` samples, t in seconds since `t0` (monotonic).

    `endpoints()` returns (service, URL) pairs; service None or "loadgen" marks the
    load driver, the only endpoint whose client series are the edge's.
    """

    def __init__(
        self,
        endpoints: Callable[[], list[tuple[str | None, str]]],
        *,
        config: str | None,
        t0: float | None = None,
        interval_s: float = 1.0,
    ) -> None:
        self.endpoints = endpoints
        self.config = config
        self.t0 = time.monotonic() if t0 is None else t0
        self.interval_s = interval_s
        self.samples: list[tuple[float, Snapshot]] = []
        self.errors = 0
        self._last: dict[str, dict[str, float]] = {}

    async def scrape_once(self) -> tuple[float, dict[str, float]]:
        eps = self.endpoints()
        t = time.monotonic() - self.t0
        results = await asyncio.gather(*(fetch(url) for _, url in eps), return_exceptions=True)
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
        sample = (round(t, 3), merge(snaps))
        self.samples.append(sample)
        return sample

    async def run(
        self, until: Callable[[], bool], on_sample: Callable[[], None] | None = None, *, anchor: float | None = None
    ) -> None:
        """Scrape on a fixed 1-s grid until `until()` is true (checked each tick).

        `anchor` (monotonic seconds) puts the grid on anchor + k·interval: the runner anchors it
        at the load's start, so each phase boundary is a sample time and every second (t−1, t]
        lies in one phase. `drill analyze --prometheus` builds its grid on the fault-on time the
        same way, so both read the same seconds.
        """
        now = time.monotonic()
        next_at = now if anchor is None else anchor + math.ceil((now - anchor) / self.interval_s) * self.interval_s
        await asyncio.sleep(max(0.0, next_at - now))
        while not until():
            await self.scrape_once()
            if on_sample is not None:
                on_sample()
            next_at += self.interval_s
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
