"""Per-second drill series: what a scrape keeps, and how cumulative snapshots become rates.

A *snapshot* is one scrape of every endpoint, reduced to a flat
`{SeriesKey: value}` (see `harness.drills.plan.outputs.SeriesKey` for the kinds). The
runner's scraper and `drill analyze`'s Prometheus reader both produce
snapshots, so the analysis never knows where the numbers came from. Everything
here is pure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence

from harness.core import metrics as m
from harness.drills.plan.outputs import SeriesKey

Snapshot = dict[SeriesKey, float]

# sample names, from the metrics' one home
CLIENT_CALLS = m.sample_name(m.CLIENT_CALLS, "_total")
CLIENT_LATENCY_BUCKET = m.sample_name(m.CLIENT_LATENCY, "_bucket")
CLIENT_STARTED = m.sample_name(m.CLIENT_STARTED, "_total")
SERVER_CALLS = m.sample_name(m.SERVER_CALLS, "_total")
SERVER_SHED = m.sample_name(m.SERVER_SHED, "_total")
GAP_COUNT = m.sample_name(m.DEADLINE_GAP, "_count")
GAP_SUM = m.sample_name(m.DEADLINE_GAP, "_sum")
FAULT_HITS = m.sample_name(m.FAULT_HITS, "_total")
RETRY_ATTEMPTS = m.sample_name(m.RETRY_ATTEMPTS, "_total")
#: calls a process refused at its own limits: its in-flight limit (RESOURCE_EXHAUSTED) and its core backlog (CANCELLED)
REFUSED = (m.sample_name(m.SERVER_REFUSED, "_total"), f"{m.SERVER_BACKLOG_REFUSED_NAME}_total")
BREAKER_STATE = m.sample_name(m.BREAKER_STATE)
FAULT_ACTIVE = m.sample_name(m.FAULT_ACTIVE)
CLIENT_PREFIX = "drill_client_"


def reduce_families(
    families: Iterable, *, config: str | None = None, service: str | None = None, edge: bool = True
) -> Snapshot:
    """Reduce prometheus_client metric families (one endpoint) to a snapshot.

    `config` keeps only client series of that resilience configuration (None = all);
    `service` names the endpoint's process for `process_open_fds`; `edge=False`
    ignores client series (a hop's own downstream calls are not the edge's).
    """
    out: Snapshot = {}

    def add(key: SeriesKey, value: float) -> None:
        if value is None or math.isnan(value):
            return
        if key.takes_max:
            out[key] = max(out.get(key, value), value)
        else:
            out[key] = out.get(key, 0.0) + value

    for fam in families:
        for s in fam.samples:
            name, lb, v = s.name, s.labels, s.value
            if name.startswith(CLIENT_PREFIX):
                if not edge or (config is not None and lb.get("config") not in (config, None)):
                    continue
                if name == CLIENT_CALLS:
                    add(SeriesKey("calls", traffic=lb.get("traffic", ""), status=lb.get("grpc_status", ""),
                                  mode=lb.get("fault_mode", "none")), v)  # fmt: skip
                elif name == CLIENT_STARTED:
                    add(SeriesKey("started", traffic=lb.get("traffic", "")), v)
                elif name == CLIENT_LATENCY_BUCKET:
                    add(SeriesKey("lat", traffic=lb.get("traffic", ""), mode=lb.get("fault_mode", "none"),
                                  le=lb.get("le", "+Inf")), v)  # fmt: skip
            elif name == SERVER_CALLS:  # shed calls included: the admission layer counts them there
                add(SeriesKey("srv", lb.get("service", "")), v)
            elif name == m.PROCESS_OPEN_FDS and service:
                add(SeriesKey("fds", service), v)
            elif name == GAP_COUNT:
                add(SeriesKey("gap", lb.get("service", "")), v)
            elif name == GAP_SUM:
                add(SeriesKey("gapsum", lb.get("service", "")), v)
            elif name == FAULT_HITS:
                add(SeriesKey("hits", lb.get("service", "")), v)
            elif name == RETRY_ATTEMPTS:
                add(SeriesKey("retry", lb.get("service", "")), v)
            elif name in REFUSED:
                add(SeriesKey("refused", lb.get("service", "")), v)
            elif name == BREAKER_STATE:
                add(SeriesKey("breaker", lb.get("service", "")), v)
            elif name == m.TCP_CONNECTIONS_NAME:
                add(SeriesKey("tcp", status=lb.get("state", "")), v)
            elif name == FAULT_ACTIVE and edge:
                add(SeriesKey("active"), v)
    return out


def merge(snapshots: Iterable[Mapping[SeriesKey, float]]) -> Snapshot:
    """Merge per-endpoint snapshots into one (sums; max for breaker and active)."""
    out: Snapshot = {}
    for snap in snapshots:
        for k, v in snap.items():
            out[k] = max(out.get(k, v), v) if k.takes_max else out.get(k, 0.0) + v
    return out


@dataclasses.dataclass
class RunSeries:
    """One trial's run: sample times (s since run start), fault bounds, per-second values."""

    config: str
    t: list[float]
    fault_on: float
    fault_off: float
    #: key -> per-second rate (counters) or value (gauges), aligned with `t`; None = no data.
    values: dict[SeriesKey, list[float | None]]
    #: requests/s the load driver planned per traffic class (None: unknown, e.g. read from Prometheus)
    planned_rps: dict[str, float] | None = None
    #: the edge client's per-call timeout: no call outlives it (sharpens when calls started)
    timeout_s: float | None = None
    #: Read-back uncertainty (None = exact: the runner's own sampler is the reference). Per sample i,
    #: how far in seconds the second (t[i]−1, t[i]] as read may lie from the runner's grid: 0 where
    #: the source's samples sit on the grid, else the scrape gap around it. An edge (a state change)
    #: found at sample i is uncertain by `edge_error[i]`; a duration by the sum of its two edges'.
    edge_error: list[float] | None = None
    #: ± of fault-on and of fault-off in seconds (0, 0 when the load exported the phase times)
    fault_error: tuple[float, float] | None = None
    #: the largest gap between consecutive samples of the series used (None: the runner's own 1-s grid)
    resolution_s: float | None = None
    #: the guard that stopped this trial's fault (`harness.drills.trials.guard.Trip.to_json`), None when none did
    guard: dict | None = None

    def edge_error_at(self, i: int | None, reach: int = 0) -> float:
        """± of an edge found at sample i (0 when exact, or no such sample): the widest read error of the
        samples within `reach` of it, since an SLO state is judged over a window and held over seconds, so a
        misread second that near moves the edge as surely as one at it."""
        if self.edge_error is None or i is None or not 0 <= i < len(self.edge_error):
            return 0.0
        return max(self.edge_error[max(0, i - reach) : i + reach + 1])

    def select(self, kind: str, **match: str) -> list[SeriesKey]:
        """Keys of one kind whose fields equal `match`, sorted."""
        return sorted(
            k for k in self.values if k.kind == kind and all(getattr(k, f) == v for f, v in match.items())
        )

    def get(self, key: SeriesKey) -> list[float | None]:
        return self.values.get(key) or [None] * len(self.t)

    def to_json(self) -> dict:
        """series.json form: keys as objects (`{"kind": "calls", "traffic": "organic", ...}`)."""
        out = {
            "config": self.config, "t": self.t, "fault_on": self.fault_on, "fault_off": self.fault_off,
            "values": [{"key": k.to_json(), "values": v} for k, v in sorted(self.values.items())],
        }  # fmt: skip
        if self.planned_rps is not None:
            out["planned_rps"] = self.planned_rps
        if self.timeout_s is not None:
            out["timeout_s"] = self.timeout_s
        if self.edge_error is not None:
            out["edge_error"] = self.edge_error
        if self.fault_error is not None:
            out["fault_error"] = list(self.fault_error)
        if self.resolution_s is not None:
            out["resolution_s"] = self.resolution_s
        if self.guard is not None:
            out["guard"] = self.guard
        return out

    @classmethod
    def from_json(cls, data: dict) -> RunSeries:
        values = {SeriesKey.from_json(item["key"]): item["values"] for item in data["values"]}
        fault_error = data.get("fault_error")
        return cls(data["config"], data["t"], data["fault_on"], data["fault_off"], values, data.get("planned_rps"),
                   data.get("timeout_s"), data.get("edge_error"), tuple(fault_error) if fault_error else None,
                   data.get("resolution_s"), data.get("guard"))  # fmt: skip


def build_series(
    config: str,
    samples: list[tuple[float, Mapping[SeriesKey, float]]],
    fault_on: float,
    fault_off: float,
    *,
    baseline_on_first: bool = False,
) -> RunSeries:
    """Turn cumulative snapshots `(t, snapshot)` into per-second rates (counters) and values (gauges).

    The first sample only sets the baseline. A counter that goes down (a
    restarted process) counts its new value as the increase. A counter that
    first appears mid-run counts from 0, unless `baseline_on_first` (a
    Prometheus that started scraping a target late: its first value is a
    baseline, not one second's increase).
    """
    samples = sorted(samples, key=lambda s: s[0])
    keys = sorted({k for _, snap in samples for k in snap})
    t: list[float] = []
    values: dict[SeriesKey, list[float | None]] = {k: [] for k in keys}
    for i in range(1, len(samples)):
        t0, prev = samples[i - 1]
        t1, cur = samples[i]
        dt = t1 - t0
        if dt <= 0:
            continue
        t.append(round(t1, 3))
        for k in keys:
            v = cur.get(k)
            if k.is_gauge:
                values[k].append(v)
                continue
            if v is None:
                values[k].append(None)
                continue
            p = prev.get(k)
            if p is None:
                if baseline_on_first:
                    values[k].append(None)
                    continue
                p = 0.0
            inc = v - p if v >= p else v
            values[k].append(inc / dt)
    return RunSeries(config=config, t=t, fault_on=fault_on, fault_off=fault_off, values=values)


# --- series.json: every trial's series, as `drill run` saves them and `drill analyze --series` reads them
SERIES_FORMAT = 2


def series_document(results: dict, trials: Mapping[str, Sequence[RunSeries]]) -> dict:
    """series.json: format 2 = `{format, plan, seed, slo, hops, fault, configs: {NAME: [trial series, …]}}`, and
    with a link fault `links: {NAME: [each trial's link record or None]}`: what the relay saw (connections it
    held, when the callers closed them) is in no series, and the re-analysis needs it for its notes and for
    `--fail-on expect`."""
    doc = {
        "format": SERIES_FORMAT,
        "plan": results.get("plan"),
        "seed": results.get("seed"),
        "slo": results.get("slo"),
        "hops": results.get("hops"),
        "fault": results.get("fault"),
        "configs": {n: [s.to_json() for s in runs] for n, runs in trials.items()},
    }
    configs = results.get("configs") or {}
    links = {n: [t.get("link") for t in (configs.get(n) or {}).get("trials") or []] for n in trials}
    if any(lk for per in links.values() for lk in per):
        doc["links"] = links
    return doc


def trial_extras(header: Mapping) -> dict[str, list[dict]]:
    """What a series.json keeps beside the series, per configuration and trial, as the analysis takes it
    (`assemble(extras=…)`): each trial's `link` record."""
    links = header.get("links")
    if not isinstance(links, Mapping):
        return {}
    return {n: [{"link": lk} if isinstance(lk, Mapping) else {} for lk in per]
            for n, per in links.items() if isinstance(per, list)}  # fmt: skip


def read_series_document(data: dict) -> tuple[dict, dict[str, list[RunSeries]]]:
    """(header, trials) from series.json; format 1 (`{NAME: series}`, one trial each) is read too."""
    if isinstance(data, dict) and data.get("format") == SERIES_FORMAT:
        trials = {n: [RunSeries.from_json(s) for s in runs] for n, runs in data["configs"].items()}
        return {k: v for k, v in data.items() if k != "configs"}, trials
    return {"format": 1}, {n: [RunSeries.from_json(s)] for n, s in data.items()}
