"""Per-second readings of a drill series and the SLO state of each second (contracts §10).

Pure functions over a `RunSeries`: edge calls by status, error rate, p99 from the
latency buckets, requests/s per hop, and the state machine the whole analysis
stands on — each second is GOOD, BAD or UNKNOWN against the SLO, and "held" is
`hold_s` good seconds in a row. `analysis` (recovery times) and `impact` (budget
burn, seconds outside the SLO) both read the series through here, so they
cannot disagree on what a bad second is. A sample at t covers (t−1, t].
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from harness.core.status import error_rate
from harness.drills.plan.outputs import SeriesKey
from harness.drills.plan.sections import Slo
from harness.drills.readings.series import RunSeries


# --- per-second series -------------------------------------------------------------------
def status_counts(series: RunSeries, i: int, traffic: str = "all") -> dict[str, float]:
    """Client calls in second i by status name, for one traffic class (or all)."""
    counts: dict[str, float] = {}
    for key in series.select("calls"):
        if traffic != "all" and key.traffic != traffic:
            continue
        v = series.values[key][i]
        if v:
            counts[key.status] = counts.get(key.status, 0.0) + v
    return counts


def error_rate_series(
    series: RunSeries, traffic: str = "all", min_calls: float = 0.0, window: int = 1
) -> list[float | None]:
    """Per second: error rate over the `window` seconds ending there (None below `min_calls` calls)."""
    per_second = [status_counts(series, i, traffic) for i in range(len(series.t))]
    out: list[float | None] = []
    for i in range(len(series.t)):
        counts: dict[str, float] = {}
        for c in per_second[max(0, i - max(1, window) + 1) : i + 1]:
            for k, v in c.items():
                counts[k] = counts.get(k, 0.0) + v
        total = sum(v for k, v in counts.items() if k != "CANCELLED")
        out.append(error_rate(counts) if total >= max(min_calls, 1e-9) else None)
    return out


def rps_series(series: RunSeries, traffic: str = "all") -> list[float]:
    """Edge requests/s (client calls, every status) of one traffic class or all."""
    out = []
    for i in range(len(series.t)):
        out.append(sum(status_counts(series, i, traffic).values()))
    return out


def hop_series(series: RunSeries) -> dict[str, list[float]]:
    """Server calls/s per hop (every replica, every status)."""
    return {k.service: [v or 0.0 for v in series.values[k]] for k in series.select("srv")}


def quantile_from_buckets(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus-style histogram_quantile over (upper bound, cumulative count) pairs."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return prev_le
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return buckets[-1][0]


def p99_series(series: RunSeries, traffic: str = "all", mode: str | None = None) -> list[float | None]:
    """Per-second p99 of edge client latency for a traffic class (and fault mode, None = any)."""
    groups: dict[float, list[SeriesKey]] = {}
    for key in series.select("lat"):
        if traffic != "all" and key.traffic != traffic:
            continue
        if mode is not None and key.mode != mode:
            continue
        groups.setdefault(float(key.le), []).append(key)
    out: list[float | None] = []
    for i in range(len(series.t)):
        buckets = [(le, sum(series.values[k][i] or 0.0 for k in keys)) for le, keys in groups.items()]
        out.append(quantile_from_buckets(0.99, buckets))
    return out


def rolling_mean(values: Sequence[float | None], width: int) -> list[float | None]:
    out: list[float | None] = []
    for i in range(len(values)):
        window = [v for v in values[max(0, i - width + 1) : i + 1] if v is not None]
        out.append(sum(window) / len(window) if window else None)
    return out


# --- SLO state machine -------------------------------------------------------------------
GOOD, BAD, UNKNOWN = 1, -1, 0


def slo_states(series: RunSeries, slo: Slo) -> list[int]:
    """Per second: GOOD, BAD or UNKNOWN against the SLO."""
    rates = error_rate_series(series, slo.traffic, slo.min_calls, slo.window_s)
    p99s = p99_series(series, slo.traffic) if slo.max_p99_s is not None else [None] * len(series.t)
    states = []
    for rate, p99 in zip(rates, p99s, strict=True):
        if rate is None:
            states.append(UNKNOWN)
        elif rate > slo.max_error_rate or (slo.max_p99_s is not None and (p99 or 0.0) > slo.max_p99_s):
            states.append(BAD)
        else:
            states.append(GOOD)
    return states


def first_held(states: Sequence[int], start: int, hold: int) -> int | None:
    """First index ≥ start where `hold` consecutive seconds are GOOD."""
    run = 0
    for i in range(max(0, start), len(states)):
        run = run + 1 if states[i] == GOOD else 0
        if run >= hold:
            return i - hold + 1
    return None


def index_at(t: Sequence[float], when: float) -> int:
    """First sample index whose time is ≥ when (len(t) if none)."""
    for i, x in enumerate(t):
        if x >= when - 1e-9:
            return i
    return len(t)


def samples_in(series: RunSeries, start: float, end: float) -> range:
    """Samples whose second (t−1, t] lies in [start, end): start + ½ ≤ t < end + ½."""
    return range(index_at(series.t, start + 0.5), index_at(series.t, end + 0.5))


def grace_s(slo: Slo) -> float:
    """Detection grace after fault-off: `slo.grace_s`, default hold + window."""
    return float(slo.grace_s) if slo.grace_s is not None else float(slo.hold_s + slo.window_s)


def sample_lengths(t: Sequence[float]) -> list[float]:
    """Seconds each sample covers (the first is taken as 1)."""
    return [1.0] + [max(0.0, b - a) for a, b in zip(t, t[1:], strict=False)]


# --- breaches ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Breach:
    """One stretch outside the SLO: its first bad second, and the held point after it (None: never)."""

    first: int
    restored: int | None


def breaches(states: Sequence[int], start: int, hold: int) -> list[Breach]:
    """Every breach from index `start` on, in order: each ends at the first held point after it."""
    out: list[Breach] = []
    i = max(0, start)
    while i < len(states):
        first = next((j for j in range(i, len(states)) if states[j] == BAD), None)
        if first is None:
            break
        restored = first_held(states, first + 1, hold)
        out.append(Breach(first, restored))
        if restored is None:
            break
        i = restored + hold
    return out


def breach_seconds(t: Sequence[float], breach: Breach) -> float:
    """How long a breach kept the SLO lost: first bad → held again (sample end-times, as MTTR), or,
    never held again, from the start of its first bad second to the end of the run."""
    if breach.restored is not None:
        return t[breach.restored] - t[breach.first]
    f = breach.first
    return t[-1] - t[f] + (t[f] - t[f - 1] if f > 0 else 1.0)
