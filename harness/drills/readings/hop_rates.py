"""The hops' rates now, read from the stack's Prometheus while a trial runs, for the live view.

A hop given by a selector (`stack.hops[].selector`) has its series read from Prometheus after each trial
(`prom.read_hops`, onto the runner's seconds); until then the runner's own scraper has nothing of it. The live
view asks this instead, once per tick:

- one instant query for every hop and kind (`label_replace(…) or …`): calls/s, hits/s, retries/s, deadline
  gaps/s (`irate`, the rate between a series' last two scrapes), open fds (summed) and the breaker (max) —
  the kinds `prom.read_hops` reads;
- sent from a thread of its own with a timeout, never more than one at a time: a slow or silent Prometheus
  makes the numbers older (each reading says when it was answered), never a trial's tick late;
- the `irate` window holds two scrapes of the slowest target with room for one missed (`WINDOW_SCRAPES`
  intervals, from Prometheus' own config, read once; Prometheus' default interval when it cannot be read).
"""

from __future__ import annotations

import dataclasses
import threading
import time

from harness.core import metrics as m
from harness.drills.readings import series as sr
from harness.procs.prometheus import PrometheusError, api_get

#: How long one query may take before it is given up (the next tick asks again).
QUERY_TIMEOUT_S = 2.0
#: Scrape intervals in the `irate` window: two samples, and one scrape that came late or not at all.
WINDOW_SCRAPES = 3
#: A reading older than this is not shown as the rate now.
STALE_S = 10.0

#: (live view field, metric, how a hop's series are combined): counters as `irate`, gauges summed or the max
KINDS = (
    ("rps", sr.SERVER_CALLS, "irate"), ("hits", sr.FAULT_HITS, "irate"), ("retry", sr.RETRY_ATTEMPTS, "irate"),
    ("gap", sr.GAP_COUNT, "irate"), ("fds", m.PROCESS_OPEN_FDS, "sum"), ("breaker", sr.BREAKER_STATE, "max"),
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class HopReading:
    """What one query said: per hop, each kind's value now (None: no series); when it was answered (unix s)."""

    values: dict[str, dict[str, float | None]]
    at: float
    window_s: float

    def age(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.at)


def expression(selectors: dict[str, str], window_s: float) -> str:
    """One instant query for every hop and kind, each result labelled `drill_hop` and `drill_kind`."""
    window = f"{max(1, round(window_s * 1000))}ms"
    parts = []
    for hop, selector in selectors.items():
        for field, metric, how in KINDS:
            inner = f"sum(irate({metric}{selector}[{window}]))" if how == "irate" else f"{how}({metric}{selector})"
            parts.append(f'label_replace(label_replace({inner}, "drill_hop", "{hop}", "", ""), '
                         f'"drill_kind", "{field}", "", "")')  # fmt: skip
    return " or ".join(parts)


def parse(result: list[dict], hops: list[str]) -> dict[str, dict[str, float | None]]:
    """An instant vector of `expression` as {hop: {field: value}}; a kind without a series is None."""
    values: dict[str, dict[str, float | None]] = {h: dict.fromkeys((k for k, _, _ in KINDS), None) for h in hops}
    for r in result:
        hop, field = r["metric"].get("drill_hop"), r["metric"].get("drill_kind")
        if hop in values and field in values[hop]:
            values[hop][field] = float(r["value"][1])
    return values


class HopRates:
    """The latest rates of the hops a Prometheus scrapes; `poll()` each tick, `latest()` to read."""

    def __init__(self, url: str, selectors: dict[str, str], *, timeout_s: float = QUERY_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.selectors = dict(selectors)
        self.timeout_s = timeout_s
        #: the `irate` window, once Prometheus' config was read (the first query reads it)
        self.window_s: float | None = None
        self._latest: HopReading | None = None
        #: what the last query that failed said, until one succeeds again
        self.error: str | None = None
        self._busy = False
        self._lock = threading.Lock()

    def poll(self) -> bool:
        """Ask again unless a query is still out; never waits. True when a query was sent."""
        with self._lock:
            if self._busy:
                return False
            self._busy = True
        threading.Thread(target=self._ask, name="drill-hop-rates", daemon=True).start()
        return True

    def latest(self) -> HopReading | None:
        return self._latest

    def _ask(self) -> None:
        try:
            if self.window_s is None:
                self.window_s = WINDOW_SCRAPES * self._scrape_interval()
            result = api_get(self.url, "query", [("query", expression(self.selectors, self.window_s)),
                                                 ("timeout", f"{self.timeout_s:g}s")], self.timeout_s)["result"]
            self._latest = HopReading(parse(result, list(self.selectors)), time.time(), self.window_s)
            self.error = None
        except PrometheusError as exc:
            self.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a reading for a view: said, never raised into a trial
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            with self._lock:
                self._busy = False

    def _scrape_interval(self) -> float:
        from harness.drills.readings.scrapes import DEFAULT_SCRAPE_S, config, scrape_interval_s

        try:
            return scrape_interval_s(config(self.url, self.timeout_s))
        except PrometheusError as exc:
            if str(exc).startswith("cannot reach"):  # not there (yet): asked again with the next query
                raise
            return DEFAULT_SCRAPE_S  # it answers, but not with its config (a Prometheus-compatible API): the default
