"""Per-second drill series: what a scrape keeps, and how cumulative snapshots become rates.

A *snapshot* is one scrape of every endpoint, reduced to a flat dict of
`key -> value` (keys below). The runner's scraper and `drill analyze`'s
Prometheus reader both produce snapshots, so the analysis never knows where
the numbers came from. Everything here is pure.

Keys (`|`-separated, label values never contain `|`):
- `calls|TRAFFIC|STATUS|MODE`  edge client calls (counter, from drill_client_calls_total)
- `lat|TRAFFIC|MODE|LE`        edge client latency buckets (counter)
- `srv|SERVICE`                server calls per hop, all statuses, shed calls included (counter)
- `gap|SERVICE` / `gapsum|SERVICE`  deadline-gap observations / seconds (counter)
- `hits|SERVICE`               injected faults (counter)
- `retry|SERVICE`              retry attempts (counter)
- `fds|SERVICE`                open fds, summed over the hop's replicas (gauge)
- `breaker|SERVICE`            worst breaker state of the hop (gauge, max)
- `tcp|STATE`                  TCP connections by state (gauge)
- `active`                     the load driver's drill_fault_active (gauge, max)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

GAUGE_PREFIXES = ("fds|", "breaker|", "tcp|", "active")
MAX_PREFIXES = ("breaker|", "active")


def is_gauge(key: str) -> bool:
    return key.startswith(GAUGE_PREFIXES)


def reduce_families(
    families: Iterable, *, config: str | None = None, service: str | None = None, edge: bool = True
) -> dict[str, float]:
    """Reduce prometheus_client metric families (one endpoint) to snapshot keys.

    `config` keeps only client series of that resilience configuration (None = all);
    `service` names the endpoint's process for `process_open_fds`; `edge=False`
    ignores client series (a hop's own downstream calls are not the edge's).
    """
    out: dict[str, float] = {}

    def add(key: str, value: float, *, use_max: bool = False) -> None:
        if value is None or math.isnan(value):
            return
        if use_max:
            out[key] = max(out.get(key, value), value)
        else:
            out[key] = out.get(key, 0.0) + value

    for fam in families:
        for s in fam.samples:
            name, lb, v = s.name, s.labels, s.value
            if name.startswith("drill_client_") and not edge:
                continue
            if name == "drill_client_calls_total":
                if config is not None and lb.get("config") not in (config, None):
                    continue
                status, mode = lb.get("grpc_status", ""), lb.get("fault_mode", "none")
                add(f"calls|{lb.get('traffic', '')}|{status}|{mode}", v)
            elif name == "drill_client_latency_seconds_bucket":
                if config is not None and lb.get("config") not in (config, None):
                    continue
                add(f"lat|{lb.get('traffic', '')}|{lb.get('fault_mode', 'none')}|{lb.get('le', '+Inf')}", v)
            elif name in ("drill_server_calls_total", "drill_server_shed_total"):
                add(f"srv|{lb.get('service', '')}", v)
            elif name == "process_open_fds" and service:
                add(f"fds|{service}", v)
            elif name == "drill_deadline_gap_seconds_count":
                add(f"gap|{lb.get('service', '')}", v)
            elif name == "drill_deadline_gap_seconds_sum":
                add(f"gapsum|{lb.get('service', '')}", v)
            elif name == "drill_fault_hits_total":
                add(f"hits|{lb.get('service', '')}", v)
            elif name == "drill_retry_attempts_total":
                add(f"retry|{lb.get('service', '')}", v)
            elif name == "drill_breaker_state":
                add(f"breaker|{lb.get('service', '')}", v, use_max=True)
            elif name == "drill_tcp_connections":
                add(f"tcp|{lb.get('state', '')}", v)
            elif name == "drill_fault_active" and edge:
                add("active", v, use_max=True)
    return out


def merge(snapshots: Iterable[Mapping[str, float]], service: str | None = None) -> dict[str, float]:
    """Merge per-endpoint snapshots into one (sums; max for breaker). `service` names fds keys."""
    out: dict[str, float] = {}
    for snap in snapshots:
        for k, v in snap.items():
            if k.startswith(MAX_PREFIXES):
                out[k] = max(out.get(k, v), v)
            else:
                out[k] = out.get(k, 0.0) + v
    return out


@dataclasses.dataclass
class RunSeries:
    """One configuration's run: sample times (s since run start), phase bounds, per-second values."""

    config: str
    t: list[float]
    fault_on: float
    fault_off: float
    #: key -> per-second rate (counters) or value (gauges), aligned with `t`; None = no data.
    values: dict[str, list[float | None]]

    def keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.values if k.startswith(prefix))

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RunSeries:
        return cls(**data)


def build_series(
    config: str,
    samples: list[tuple[float, Mapping[str, float]]],
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
    values: dict[str, list[float | None]] = {k: [] for k in keys}
    for i in range(1, len(samples)):
        t0, prev = samples[i - 1]
        t1, cur = samples[i]
        dt = t1 - t0
        if dt <= 0:
            continue
        t.append(round(t1, 3))
        for k in keys:
            v = cur.get(k)
            if is_gauge(k):
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
