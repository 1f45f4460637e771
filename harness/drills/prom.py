"""Prometheus as a drill data source: a local Prometheus watching a run, and reading a drill back.

A local Prometheus (`harness.procs.prometheus.LocalPrometheus`, 1-s scrapes, a fresh TSDB
under OUT/prometheus, file-based service discovery the runner rewrites for each
configuration). Its first sample comes ~5 s after start, so it is started
before the first topology.

`read_drill` asks any Prometheus (`/api/v1/query_range`, step 1 s) for the same
aggregates the runner's scraper keeps and returns one `RunSeries` per
resilience configuration (the `config` label of the edge client's calls). The
fault window comes from `drill_fault_active`, or is given.
"""

from __future__ import annotations

import math
import pathlib

from harness.core import metrics as m
from harness.drills import series as sr
from harness.drills.model import SeriesKey
from harness.drills.series import RunSeries, build_series
from harness.procs.prometheus import PrometheusError, api_get, write_targets

__all__ = ["EDGE_SERVICES", "ExternalPrometheus", "PrometheusError", "query_range", "read_drill"]

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
def query_range(url: str, expr: str, start: float, end: float, step: float = 1.0) -> list[dict]:
    params = [("query", expr), ("start", f"{start:.3f}"), ("end", f"{end:.3f}"), ("step", f"{step:g}")]
    return api_get(url, "query_range", params)["result"]


_SERVICE = (("service", "service"),)


def _queries(edge: str) -> list[tuple[str, str, tuple[tuple[str, str], ...]]]:
    """(series kind, PromQL, (SeriesKey field, label) pairs) for every kind of `SeriesKey`."""
    c = f'service=~"{edge}"'
    return [
        ("calls", f"sum by (config, traffic, grpc_status, fault_mode) ({sr.CLIENT_CALLS}{{{c}}})",
         (("traffic", "traffic"), ("status", "grpc_status"), ("mode", "fault_mode"))),
        ("lat", f"sum by (config, traffic, fault_mode, le) ({sr.CLIENT_LATENCY_BUCKET}{{{c}}})",
         (("traffic", "traffic"), ("mode", "fault_mode"), ("le", "le"))),
        ("srv", f"sum by (service) ({sr.SERVER_CALLS})", _SERVICE),
        ("gap", f"sum by (service) ({sr.GAP_COUNT})", _SERVICE),
        ("gapsum", f"sum by (service) ({sr.GAP_SUM})", _SERVICE),
        ("hits", f"sum by (service) ({sr.FAULT_HITS})", _SERVICE),
        ("retry", f"sum by (service) ({sr.RETRY_ATTEMPTS})", _SERVICE),
        ("fds", f"sum by (service) ({m.PROCESS_OPEN_FDS})", _SERVICE),
        ("breaker", f"max by (service) ({sr.BREAKER_STATE})", _SERVICE),
        ("tcp", f"sum by (state) ({m.TCP_CONNECTIONS_NAME})", (("status", "state"),)),
    ]  # fmt: skip


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
    `drill_fault_active` is 1 in that configuration's run.
    """
    grid: dict[float, dict[SeriesKey, float]] = {}
    per_config: dict[str, dict[float, dict[SeriesKey, float]]] = {}
    for prefix, expr, labels in _queries(edge):
        for res in query_range(url, expr, start, end):
            metric = res["metric"]
            fields = {field: metric.get(lb, "none" if lb == "fault_mode" else "") for field, lb in labels}
            key = SeriesKey(prefix, **fields)
            target = per_config.setdefault(metric["config"], {}) if "config" in metric else grid
            for ts, value in res["values"]:
                v = float(value)
                if math.isnan(v):
                    continue
                snap = target.setdefault(float(ts), {})
                snap[key] = snap.get(key, 0.0) + v
    active = query_range(url, f"max({sr.FAULT_ACTIVE})", start, end)
    active_points = [(float(ts), float(v)) for ts, v in active[0]["values"]] if active else []
    out: dict[str, RunSeries] = {}
    for config, client in per_config.items():
        times = sorted(client)
        # this configuration's run: where its client counters move (configs run one after another)
        moving = [t for i, t in enumerate(times[1:], 1) if client[t] != client[times[i - 1]]]
        if not moving:
            continue
        t0, t1 = max(start, moving[0] - 2), min(end, moving[-1] + 1)
        samples = []
        for t in times:
            if t0 <= t <= t1:
                samples.append((t - t0, {**grid.get(t, {}), **client[t]}))
        if faults and config in faults:
            on, off = faults[config]
        elif fault is not None:
            on, off = fault
        else:
            on_points = [t for t, v in active_points if v >= 1 and t0 <= t <= t1]
            if not on_points:
                raise PrometheusError(
                    f"config {config}: no drill_fault_active in range; pass --fault-start/--fault-end"
                )
            on, off = on_points[0], on_points[-1] + 1
        out[config] = build_series(config, samples, on - t0, off - t0, baseline_on_first=True)
    if not out:
        raise PrometheusError(f"no edge client calls (service=~{edge!r}) between {start} and {end}")
    return out
