"""Prometheus as a drill data source: a local Prometheus watching a run, and reading a drill back.

A local Prometheus (`harness.procs.prometheus.LocalPrometheus`, 1-s scrapes, a fresh TSDB
under OUT/prometheus, file-based service discovery the runner rewrites for each
configuration). Its first sample comes ~5 s after start, so it is started
before the first topology.

`read_drill` asks any Prometheus for the raw samples (a range-vector query) of the
series the runner's scraper keeps, puts them on the runner's grid of whole seconds
from fault-on, and returns one `RunSeries` per resilience configuration (the
`config` label of the edge client's calls). The fault window comes from
`drill_fault_active`, or is given.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import pathlib

from harness.core import metrics as m
from harness.drills import series as sr
from harness.drills.model import SeriesKey
from harness.drills.series import RunSeries, build_series
from harness.procs.prometheus import PrometheusError, api_get, write_targets

__all__ = ["EDGE_SERVICES", "ExternalPrometheus", "PrometheusError", "read_drill"]

#: The edge client's `service` label: the in-runner load ("loadgen") or Locust ("locust").
EDGE_SERVICES = "loadgen|locust"


class ExternalPrometheus:
    """A Prometheus given by URL: the runner writes its targets to `sd_file` (file_sd) if given,
    and reads the run back from it at the end, as with a `LocalPrometheus`."""

    def __init__(self, url: str, sd_file: pathlib.Path | None = None) -> None:
        self.url = url.rstrip("/")
        self.sd_file = sd_file

    def set_targets(self, endpoints: list[tuple[str | None, str]]) -> None:
        if self.sd_file is not None:
            write_targets(self.sd_file, endpoints)

    def stop(self) -> None:
        pass


# --- reading a drill back ---------------------------------------------------------------------
_SERVICE = (("service", "service"),)

#: Prometheus' scrape interval the runner's local Prometheus uses (seconds): a counter born inside the
#: range is taken to have been 0 one interval before its first sample, as the runner's scraper counts it.
SCRAPE_S = 1.0
#: Counters read at their nearest sample rather than interpolated: the edge's calls decide each
#: second's SLO state, and the nearest sample keeps a real 1-s window of calls (shifted by at most
#: half a second), where interpolation would smear the last failures of a fault into the next second
#: and end every breach a second late. Hop counters only feed sums over the fault window
#: (amplification, hits), where interpolation lines up targets scraped at different offsets.
_NEAREST = frozenset({"calls", "lat"})
#: How long a gauge's last sample stands for it.
GAUGE_HOLD_S = 1.5


def _selectors(edge: str) -> list[tuple[str, str, tuple[tuple[str, str], ...]]]:
    """(series kind, selector, (SeriesKey field, label) pairs) for every kind of `SeriesKey`."""
    c = f'{{service=~"{edge}"}}'
    return [
        ("calls", f"{sr.CLIENT_CALLS}{c}", (("traffic", "traffic"), ("status", "grpc_status"), ("mode", "fault_mode"))),
        ("lat", f"{sr.CLIENT_LATENCY_BUCKET}{c}", (("traffic", "traffic"), ("mode", "fault_mode"), ("le", "le"))),
        ("srv", sr.SERVER_CALLS, _SERVICE),
        ("gap", sr.GAP_COUNT, _SERVICE),
        ("gapsum", sr.GAP_SUM, _SERVICE),
        ("hits", sr.FAULT_HITS, _SERVICE),
        ("retry", sr.RETRY_ATTEMPTS, _SERVICE),
        ("fds", m.PROCESS_OPEN_FDS, _SERVICE),
        ("breaker", sr.BREAKER_STATE, _SERVICE),
        ("tcp", m.TCP_CONNECTIONS_NAME, (("status", "state"),)),
    ]  # fmt: skip


@dataclasses.dataclass
class _Raw:
    """One Prometheus series' own samples (their scrape timestamps), as stored."""

    key: SeriesKey
    config: str | None
    ts: list[float]
    vs: list[float]

    def counter_at(self, t: float, born_inside: bool) -> float | None:
        """Linear between the samples around t (the nearer sample for `_NEAREST` kinds); 0 before a
        series born inside the range (ramping up over the scrape interval before its first sample);
        the last value after the last sample."""
        ts, vs = self.ts, self.vs
        if t < ts[0]:
            if not born_inside:
                return None
            if self.key.kind in _NEAREST:
                return vs[0] if t >= ts[0] - SCRAPE_S / 2 else 0.0
            return max(0.0, vs[0] * (t - (ts[0] - SCRAPE_S)) / SCRAPE_S)
        i = bisect.bisect_right(ts, t) - 1
        if i >= len(ts) - 1:
            return vs[-1]
        (t0, v0), (t1, v1) = (ts[i], vs[i]), (ts[i + 1], vs[i + 1])
        if v1 < v0:  # a restart between the samples: hold, and let the next step count from 0
            return v0
        if self.key.kind in _NEAREST:
            return v0 if t - t0 < t1 - t else v1
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0)

    def gauge_at(self, t: float) -> float | None:
        i = bisect.bisect_right(self.ts, t) - 1
        if i < 0 or t - self.ts[i] > GAUGE_HOLD_S:
            return None
        return self.vs[i]


def _fetch(url: str, selector: str, start: float, end: float) -> list[dict]:
    """Every raw sample of `selector` in [start, end] (a range-vector instant query)."""
    span = max(1, math.ceil(end - start))
    return api_get(url, "query", [("query", f"{selector}[{span}s]"), ("time", f"{end:.3f}")])["result"]


def _raw_series(url: str, edge: str, start: float, end: float) -> list[_Raw]:
    out = []
    for kind, selector, labels in _selectors(edge):
        for res in _fetch(url, selector, start, end):
            metric = res["metric"]
            fields = {field: metric.get(lb, "none" if lb == "fault_mode" else "") for field, lb in labels}
            points = [(float(ts), float(v)) for ts, v in res["values"] if not math.isnan(float(v))]
            if points:
                ts, vs = zip(*points, strict=True)
                out.append(_Raw(SeriesKey(kind, **fields), metric.get("config"), list(ts), list(vs)))
    return out


def _edges(points: list[tuple[float, float]], t0: float, t1: float) -> tuple[float, float] | None:
    """Where a 0/1 gauge sampled at `points` switched on and off inside [t0, t1]: the midpoint between
    the last sample before each switch and the first after it (the switch lies between the two)."""
    inside = [i for i, (t, v) in enumerate(points) if v >= 1 and t0 <= t <= t1]
    if not inside:
        return None
    first, last = inside[0], inside[-1]
    on = points[first][0] if first == 0 else (points[first - 1][0] + points[first][0]) / 2
    off = points[last][0] + SCRAPE_S / 2 if last == len(points) - 1 else (points[last][0] + points[last + 1][0]) / 2
    return on, off


def _snapshots(raws: list[_Raw], grid: list[float], start: float) -> list[dict[SeriesKey, float]]:
    """One snapshot per grid time: counters as cumulative sums of each raw series' own increases
    (a series that ends adds nothing more; one that restarts counts from 0), gauges summed (max for
    breaker) over the series with a recent sample."""
    counters: dict[SeriesKey, list[float]] = {}
    gauges: dict[SeriesKey, list[float | None]] = {}
    for raw in raws:
        if raw.key.is_gauge:
            col = gauges.setdefault(raw.key, [None] * len(grid))
            for i, g in enumerate(grid):
                v = raw.gauge_at(g)
                if v is None:
                    continue
                col[i] = v if col[i] is None else (max(col[i], v) if raw.key.takes_max else col[i] + v)
            continue
        born_inside = raw.ts[0] > start + 2 * SCRAPE_S
        col = counters.setdefault(raw.key, [0.0] * len(grid))
        prev = raw.counter_at(grid[0], born_inside)
        total = 0.0
        for i in range(1, len(grid)):
            cur = raw.counter_at(grid[i], born_inside)
            if cur is not None and prev is not None:
                total += cur - prev if cur >= prev else cur
            prev = cur if cur is not None else prev
            col[i] += total
    snaps: list[dict[SeriesKey, float]] = [{} for _ in grid]
    for key, col in counters.items():
        for i, v in enumerate(col):
            snaps[i][key] = v
    for key, gcol in gauges.items():
        for i, v in enumerate(gcol):
            if v is not None:
                snaps[i][key] = v
    return snaps


def read_drill(
    url: str,
    start: float,
    end: float,
    *,
    edge: str = EDGE_SERVICES,
    fault: tuple[float, float] | None = None,
    faults: dict[str, tuple[float, float]] | None = None,
) -> dict[str, RunSeries]:
    """One RunSeries per `config` label seen on the edge client's calls between start and end.

    The fault window (unix seconds) is `faults[config]`, else `fault`, else where
    `drill_fault_active` switched on and off in that configuration's run. Every series is read
    as its raw samples and interpolated to one grid of whole seconds from fault-on, the runner's
    own grid: Prometheus scrapes each target at its own offset, and reading each at the last
    sample before a grid time would shift one hop's seconds against another's by up to a second.
    """
    raws = _raw_series(url, edge, start, end)
    by_t: dict[float, float] = {}  # max over the gauge's series (one per plan) at each scrape
    for res in _fetch(url, sr.FAULT_ACTIVE, start, end):
        for ts, value in res["values"]:
            by_t[float(ts)] = max(by_t.get(float(ts), 0.0), float(value))
    active = sorted(by_t.items())
    configs = sorted({r.config for r in raws if r.key.kind == "calls" and r.config})
    out: dict[str, RunSeries] = {}
    for config in configs:
        mine = [r for r in raws if r.key.kind == "calls" and r.config == config]
        # this configuration's run: where its client counters move (configs run one after another)
        moving = [r.ts[i] for r in mine for i in range(1, len(r.ts)) if r.vs[i] != r.vs[i - 1]]
        if not moving:
            continue
        t0, t1 = max(start, min(moving) - 2), min(end, max(moving) + 1)
        if faults and config in faults:
            on, off = faults[config]
        elif fault is not None:
            on, off = fault
        else:
            edges = _edges(active, t0, t1)
            if edges is None:
                raise PrometheusError(
                    f"config {config}: no drill_fault_active in range; pass --fault-start/--fault-end"
                )
            on, off = edges
        first = on - math.floor(on - t0)
        grid = [first + k for k in range(int(math.floor(t1 - first)) + 1)]
        if len(grid) < 2:
            continue
        others = [r for r in raws if r.key.kind != "calls" or r.config == config]
        snaps = _snapshots(others, grid, start)
        samples = [(g - first, snap) for g, snap in zip(grid, snaps, strict=True)]
        out[config] = build_series(config, samples, on - first, off - first)
    if not out:
        raise PrometheusError(f"no edge client calls (service=~{edge!r}) between {start} and {end}")
    return out
