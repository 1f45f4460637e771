"""Prometheus as a drill data source: a local Prometheus watching a run, and reading a drill back.

A local Prometheus (`harness.procs.prometheus.LocalPrometheus`, 1-s scrapes, a fresh TSDB
under OUT/prometheus, file-based service discovery the runner rewrites for each
configuration). Its first sample comes ~5 s after start, so it is started
before the first topology.

`read_drill` asks any Prometheus for the raw samples (a range-vector query) of the
series the runner's scraper keeps and returns, per resilience configuration (the
`config` label of the edge client's calls), one `RunSeries` per trial on the
runner's grid of whole seconds from fault-on.

Trials and their exact phase times come from `drill_trial_phase_start_seconds`,
which the load sets when a trial starts; the edge's counters come stamped with
the whole second they were taken at (harness.core.snapshots), so a Prometheus
that scraped every second holds exactly the runner's per-second counts and the
read-back agrees with the runner exactly. Where it missed a second, or reads a
load that does not stamp (one sample per scrape, anywhere in the second, or a
cluster's 15-s scrapes), each grid second carries how far it may be off
(`RunSeries.edge_error`: the gap between the samples around it) and the trial its
`resolution_s`: every time reported from it gets a ± (contracts §12). Data without
trial gauges (an older load, a drill started by hand) is read per configuration,
its fault window from the switches of `drill_fault_active` (± half the gap
around each) or from the command line.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import pathlib

from harness.core import metrics as m
from harness.drills.plan.outputs import SeriesKey
from harness.drills.readings import series as sr
from harness.drills.readings.series import RunSeries, build_series
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

    def set_targets(self, endpoints: list[tuple]) -> None:
        if self.sd_file is not None:
            write_targets(self.sd_file, endpoints)

    def stop(self) -> None:
        pass


# --- reading a drill back ---------------------------------------------------------------------
_SERVICE = (("service", "service"),)

#: Prometheus' scrape interval the runner's local Prometheus uses (seconds): a counter born inside the
#: range is taken to have been 0 one interval before its first sample, as the runner's scraper counts it.
SCRAPE_S = 1.0
#: A sample this close to a grid second is *at* it (stamps are whole seconds in ms; scrapes jitter more).
ON_GRID_S = 0.0015
#: Between samples further apart than this, a counter is interpolated (its calls spread over the gap);
#: closer (unstamped ~1-s scrapes), the nearer sample is taken: it keeps a real 1-s window of calls where
#: interpolation would smear the last failures of a fault into the next second.
INTERPOLATE_GAP_S = 1.5
#: Counters read at a grid second, not interpolated, when samples are about a second apart: the edge's calls
#: decide each second's SLO state. Hop counters only feed sums over the fault window (amplification, hits),
#: where interpolation lines up targets scraped at different offsets.
_NEAREST = frozenset({"calls", "lat"})
#: How long a gauge's last sample stands for it.
GAUGE_HOLD_S = 1.5
#: Seconds read past a trial's end: the load's last calls end up to a timeout after its schedule.
TAIL_S = 3.0


def _selectors(edge: str) -> list[tuple[str, str, tuple[tuple[str, str], ...]]]:
    """(series kind, selector, (SeriesKey field, label) pairs) for every kind of `SeriesKey`."""
    c = f'{{service=~"{edge}"}}'
    return [
        ("calls", f"{sr.CLIENT_CALLS}{c}", (("traffic", "traffic"), ("status", "grpc_status"), ("mode", "fault_mode"))),
        ("lat", f"{sr.CLIENT_LATENCY_BUCKET}{c}", (("traffic", "traffic"), ("mode", "fault_mode"), ("le", "le"))),
        ("started", f"{sr.CLIENT_STARTED}{c}", (("traffic", "traffic"),)),
        ("srv", sr.SERVER_CALLS, _SERVICE),
        ("gap", sr.GAP_COUNT, _SERVICE),
        ("gapsum", sr.GAP_SUM, _SERVICE),
        ("hits", sr.FAULT_HITS, _SERVICE),
        ("retry", sr.RETRY_ATTEMPTS, _SERVICE),
        *(("refused", metric, _SERVICE) for metric in sr.REFUSED),
        ("fds", m.PROCESS_OPEN_FDS, _SERVICE),
        ("breaker", sr.BREAKER_STATE, _SERVICE),
        ("tcp", m.TCP_CONNECTIONS_NAME, (("status", "state"),)),
    ]  # fmt: skip


@dataclasses.dataclass
class _Raw:
    """One Prometheus series' own samples (their scrape timestamps, or the load's stamps), as stored."""

    key: SeriesKey
    config: str | None
    instance: str
    ts: list[float]
    vs: list[float]

    def counter_at(self, t: float, born_inside: bool) -> float | None:
        """The counter at t: the sample at t when there is one; between samples, linear across a gap
        (> INTERPOLATE_GAP_S) and the nearer sample for `_NEAREST` kinds otherwise; 0 before a series born
        inside the range (ramping up over the scrape interval before its first sample); the last value after
        the last sample."""
        ts, vs = self.ts, self.vs
        if t < ts[0] - ON_GRID_S:
            if not born_inside:
                return None
            if self.key.kind in _NEAREST:
                return vs[0] if t >= ts[0] - SCRAPE_S / 2 else 0.0
            return max(0.0, vs[0] * (t - (ts[0] - SCRAPE_S)) / SCRAPE_S)
        i = bisect.bisect_right(ts, t + ON_GRID_S) - 1
        if abs(ts[i] - t) <= ON_GRID_S or i >= len(ts) - 1:
            return vs[i]
        (t0, v0), (t1, v1) = (ts[i], vs[i]), (ts[i + 1], vs[i + 1])
        if v1 < v0:  # a restart between the samples: hold, and let the next step count from 0
            return v0
        if self.key.kind in _NEAREST and t1 - t0 <= INTERPOLATE_GAP_S:
            return v0 if t - t0 < t1 - t else v1
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0)

    def gauge_at(self, t: float) -> float | None:
        i = bisect.bisect_right(self.ts, t + ON_GRID_S) - 1
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
                out.append(_Raw(SeriesKey(kind, **fields), metric.get("config"), metric.get("instance", ""),
                                list(ts), list(vs)))  # fmt: skip
    return out


@dataclasses.dataclass(frozen=True)
class TrialWindow:
    """One trial as the load marked it: unix times of its start, fault on/off and the end of its schedule."""

    plan: str
    config: str
    trial: int
    start: float
    on: float
    off: float
    end: float


def find_trials(url: str, start: float, end: float) -> list[TrialWindow]:
    """Every trial whose phase times (`drill_trial_phase_start_seconds`) were exported in [start, end]."""
    phases: dict[tuple[str, str, str], dict[str, float]] = {}
    for res in _fetch(url, m.sample_name(m.TRIAL_PHASE_START), start, end):
        lb = res["metric"]
        key = (lb.get("plan", ""), lb.get("config", ""), lb.get("trial", "1"))
        values = [float(v) for _, v in res["values"]]
        if values:
            phases.setdefault(key, {})[lb.get("phase", "")] = values[-1]
    out = []
    for (plan, config, trial), p in phases.items():
        if not set(m.TRIAL_PHASES) <= set(p) or not start - TAIL_S <= p["warmup"] <= end:
            continue
        try:
            number = int(trial)
        except ValueError:
            continue
        out.append(TrialWindow(plan, config, number, p["warmup"], p["fault"], p["recovery"], p["done"]))
    return sorted(out, key=lambda w: w.start)


def plans_in(url: str, start: float, end: float) -> list[str]:
    """The plan names of the trials marked in [start, end]."""
    return sorted({w.plan for w in find_trials(url, start, end)})


def _edges(points: list[tuple[float, float]], t0: float, t1: float) -> tuple[float, float, float, float] | None:
    """Where a 0/1 gauge sampled at `points` switched on and off inside [t0, t1]: the midpoint between the last
    sample before each switch and the first after it, and ± half that gap (the switch lies between the two)."""
    inside = [i for i, (t, v) in enumerate(points) if v >= 1 and t0 <= t <= t1]
    if not inside:
        return None
    first, last = inside[0], inside[-1]
    if first == 0:
        on, on_err = points[first][0], SCRAPE_S
    else:
        on, on_err = (points[first - 1][0] + points[first][0]) / 2, (points[first][0] - points[first - 1][0]) / 2
    if last == len(points) - 1:
        off, off_err = points[last][0] + SCRAPE_S / 2, SCRAPE_S
    else:
        off, off_err = (points[last][0] + points[last + 1][0]) / 2, (points[last + 1][0] - points[last][0]) / 2
    return on, off, on_err, off_err


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


def _grid_errors(edge_raws: list[_Raw], grid: list[float]) -> tuple[list[float], float]:
    """Per grid time, how far the edge's value there may be off: 0 where every edge target has a sample on
    it, else the widest gap between one target's samples around it; and the widest gap between consecutive
    samples of any edge target inside the grid (the read's resolution)."""
    stamps: dict[str, list[float]] = {}
    for raw in edge_raws:
        stamps.setdefault(raw.instance, [])
        stamps[raw.instance] = sorted(set(stamps[raw.instance]) | set(raw.ts))
    errors = [0.0] * len(grid)
    widest = 0.0
    for ts in stamps.values():
        inside = [t for t in ts if grid[0] - ON_GRID_S <= t <= grid[-1] + ON_GRID_S]
        widest = max([widest, *(b - a for a, b in zip(inside, inside[1:], strict=False))])
        for k, g in enumerate(grid):
            i = bisect.bisect_left(ts, g - ON_GRID_S)
            if i < len(ts) and abs(ts[i] - g) <= ON_GRID_S:
                continue
            before = ts[i - 1] if i > 0 else None
            after = ts[i] if i < len(ts) else None
            gap = (after - before) if before is not None and after is not None else SCRAPE_S + abs(
                g - (before if before is not None else after))
            errors[k] = max(errors[k], gap)
    return [round(e, 3) for e in errors], round(widest, 3)


def _series_of(
    config: str, raws: list[_Raw], start: float, end: float, on: float, off: float, fault_error: tuple[float, float]
) -> RunSeries | None:
    """One trial's RunSeries on the grid of whole seconds from fault-on, with its read uncertainty."""
    first = on - math.floor(on - start)
    grid = [first + k for k in range(int(math.floor(end - first)) + 1)]
    if len(grid) < 2:
        return None
    mine = [r for r in raws if r.key.kind != "calls" and r.key.kind != "lat" or r.config == config]
    snaps = _snapshots(mine, grid, start)
    samples = [(g - first, snap) for g, snap in zip(grid, snaps, strict=True)]
    series = build_series(config, samples, on - first, off - first)
    edge_raws = [r for r in mine if r.key.kind == "calls"]
    point_errors, widest = _grid_errors(edge_raws, grid)
    # sample i of the series is the second (grid[i], grid[i + 1]]: either end may be off
    series.edge_error = [max(point_errors[i], point_errors[i + 1]) for i in range(len(grid) - 1)]
    series.fault_error = fault_error
    series.resolution_s = widest
    return series


def read_drill(
    url: str,
    start: float,
    end: float,
    *,
    edge: str = EDGE_SERVICES,
    fault: tuple[float, float] | None = None,
) -> dict[str, list[RunSeries]]:
    """Per `config` label seen on the edge client's calls between start and end, one RunSeries per trial.

    Trials come from the load's trial gauges (exact phase times). Without them, each configuration's
    run is one trial, its fault window `fault` (unix seconds, exact) or where `drill_fault_active`
    switched on and off (± half the gap around each switch). Every series is read as its raw samples
    on one grid of whole seconds from fault-on, the runner's own grid.
    """
    raws = _raw_series(url, edge, start - TAIL_S, end + TAIL_S)
    out: dict[str, list[RunSeries]] = {}
    windows = find_trials(url, start, end) if fault is None else []
    for w in windows:
        if not any(r.key.kind == "calls" and r.config == w.config for r in raws):
            continue
        series = _series_of(w.config, raws, w.start, min(end + TAIL_S, w.end + TAIL_S), w.on, w.off, (0.0, 0.0))
        if series is not None:
            out.setdefault(w.config, []).append(series)
    if out:
        return out
    by_t: dict[float, float] = {}  # max over the gauge's series (one per plan) at each scrape
    for res in _fetch(url, sr.FAULT_ACTIVE, start, end):
        for ts, value in res["values"]:
            by_t[float(ts)] = max(by_t.get(float(ts), 0.0), float(value))
    active = sorted(by_t.items())
    for config in sorted({r.config for r in raws if r.key.kind == "calls" and r.config}):
        mine = [r for r in raws if r.key.kind == "calls" and r.config == config]
        # this configuration's run: where its client counters move (configs run one after another)
        moving = [r.ts[i] for r in mine for i in range(1, len(r.ts)) if r.vs[i] != r.vs[i - 1]]
        if not moving:
            continue
        t0, t1 = max(start, min(moving) - 2), min(end, max(moving) + 1)
        if fault is not None:
            on, off, errors = fault[0], fault[1], (0.0, 0.0)
        else:
            found = _edges(active, t0, t1)
            if found is None:
                raise PrometheusError(
                    f"config {config}: no drill trial or drill_fault_active in range; pass --fault-start/--fault-end"
                )
            on, off, *errs = found
            errors = (round(errs[0], 3), round(errs[1], 3))
        series = _series_of(config, raws, t0, t1, on, off, errors)
        if series is not None:
            out[config] = [series]
    if not out:
        raise PrometheusError(f"no edge client calls (service=~{edge!r}) between {start} and {end}")
    return out


#: What a hop read from a Prometheus selector contributes (the kinds a topology hop's /metrics gives).
_HOP_KINDS = (
    ("srv", sr.SERVER_CALLS), ("gap", sr.GAP_COUNT), ("gapsum", sr.GAP_SUM), ("hits", sr.FAULT_HITS),
    ("retry", sr.RETRY_ATTEMPTS), *(("refused", metric) for metric in sr.REFUSED), ("fds", m.PROCESS_OPEN_FDS),
    ("breaker", sr.BREAKER_STATE),
)  # fmt: skip


def read_hops(url: str, selectors: dict[str, str], seconds: list[float]) -> list[dict[SeriesKey, float]]:
    """Per given unix second, the counters and gauges of hops a Prometheus scrapes, each hop named by the
    stack (not by its `service` label) and chosen by its label selector, e.g. `{namespace="d", app="ledger"}`.
    Counters are interpolated between the scrapes around each second, as the read-back does."""
    if not seconds:
        return []
    start, end = seconds[0], seconds[-1]
    raws = []
    for hop, selector in selectors.items():
        mine = []
        for kind, metric in _HOP_KINDS:
            for res in _fetch(url, f"{metric}{selector}", start - TAIL_S, end + TAIL_S):
                points = [(float(ts), float(v)) for ts, v in res["values"] if not math.isnan(float(v))]
                if points:
                    ts, vs = zip(*points, strict=True)
                    mine.append(_Raw(SeriesKey(kind, hop), None, res["metric"].get("instance", ""), list(ts), list(vs)))
        if not any(r.key.kind == "srv" for r in mine):
            raise PrometheusError(
                f"hop {hop}: {sr.SERVER_CALLS}{selector} matched no series in {url} during the trial "
                "(a selector that names no scraped target, or a service without the interceptors)"
            )
        raws += mine
    # one raw per replica and kind: summed per hop by `_snapshots`
    return _snapshots(raws, seconds, start)


def latest(url: str, selector: str) -> float | None:
    """The value of an instant query's first series (None when it has none)."""
    result = api_get(url, "query", [("query", selector)])["result"]
    return float(result[0]["value"][1]) if result else None


def read_edge(
    url: str, selector: str, config: str, seconds: list[float]
) -> tuple[list[dict[SeriesKey, float]], list[float], float]:
    """An external load's client counters (calls, latency buckets) of one configuration at the given unix seconds,
    read from a Prometheus by the load's selector; with each second's ± and the read's resolution, as the
    read-back reports them (the load's samples are wherever its scrapes fell)."""
    if not seconds:
        return [], [], 0.0
    start, end = seconds[0], seconds[-1]
    merged = selector[:-1].rstrip(", ") + (", " if selector.strip() != "{}" else "") + f'config="{config}"}}'
    raws = []
    for kind, metric, labels in (
        ("calls", sr.CLIENT_CALLS, (("traffic", "traffic"), ("status", "grpc_status"), ("mode", "fault_mode"))),
        ("lat", sr.CLIENT_LATENCY_BUCKET, (("traffic", "traffic"), ("mode", "fault_mode"), ("le", "le"))),
    ):
        for res in _fetch(url, f"{metric}{merged}", start - TAIL_S, end + TAIL_S):
            lb = res["metric"]
            fields = {field: lb.get(name, "none" if name == "fault_mode" else "") for field, name in labels}
            points = [(float(ts), float(v)) for ts, v in res["values"] if not math.isnan(float(v))]
            if points:
                ts, vs = zip(*points, strict=True)
                raws.append(_Raw(SeriesKey(kind, **fields), config, lb.get("instance", ""), list(ts), list(vs)))
    if not any(r.key.kind == "calls" for r in raws):
        raise PrometheusError(f"the load's selector {merged} matched no drill_client_calls_total in {url}")
    errors, widest = _grid_errors([r for r in raws if r.key.kind == "calls"], seconds)
    return _snapshots(raws, seconds, start), errors, widest


def plan_info(url: str, start: float, end: float) -> dict[str, dict]:
    """What the runner exported of each plan it ran (`drill_plan_info`): {plan: {"slo": …, "load": {config:
    (planned rps by traffic, timeout)}}}."""
    out: dict[str, dict] = {}
    for res in _fetch(url, m.sample_name(m.PLAN_INFO), start, end):
        lb = res["metric"]
        slo = {
            "traffic": lb.get("traffic"), "max_error_rate": float(lb["max_error_rate"]), "hold_s": int(lb["hold_s"]),
            "window_s": int(lb["window_s"]), "min_calls": float(lb["min_calls"]),
        }  # fmt: skip
        if lb.get("max_p99_s"):
            slo["max_p99_s"] = float(lb["max_p99_s"])
        if lb.get("grace_s"):
            slo["grace_s"] = float(lb["grace_s"])
        entry = out.setdefault(lb.get("plan", ""), {"slo": slo, "load": {}})
        entry["load"][lb.get("config", "")] = (
            {"organic": float(lb["organic_rps"]), "drill": float(lb["drill_rps"])}, float(lb["timeout_s"])
        )
    return out
