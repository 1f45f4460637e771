"""MTTR analysis (DESIGN §10): TTD, TTM, TTR, MTTR, amplification, blast radius, from per-second series.

Pure functions over a `RunSeries`; no I/O, no clocks. Definitions:

- a second is **bad** when its error rate (server-fault / (all − CANCELLED),
  `harness.core.status.error_rate`) on the SLO's traffic exceeds the SLO, or its
  p99 exceeds the latency SLO when one is set; **good** when it has at least
  `min_calls` calls and is not bad; otherwise it is *unknown* (neither).
- **held** at t: the `hold_s` seconds starting at t are all good.
- **TTD** = first bad second at or after fault-on − fault-on.
- **TTM** = first breach → first held point whose hold window ends while the
  fault is still on (mitigation: breaker, balancer, budget).
- **TTR** = fault-off → first held point at or after fault-off (0 when the
  system was already holding the SLO when the fault went off).
- **MTTR** = first breach → the held point after the last bad second (restored
  for good). `None` when never restored (never "0" for that). A run that never
  breached has MTTR 0 with `breached: False` (the SLO was never lost, so there
  was nothing to restore); TTD, TTM and TTR are `None` then.
- **amplification** per hop = peak, over the fault window, of the hop's
  requests ÷ ingress requests in a 5-s window. Ingress is every call the users
  sent to the edge, organic and drill alike: the load the system is offered
  before any retry (DESIGN §10 says "organic ingress"; drill users' first
  attempts are offered load too, so counting them keeps a retry-free system
  at 1.0 whatever the drill's share). The drill's amplification is the deepest hop's.
- **blast radius** = error rate of organic traffic over the fault window.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from harness.core.status import error_rate
from harness.drills.model import SeriesKey, Slo
from harness.drills.series import RunSeries


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


def _index_at(t: Sequence[float], when: float) -> int:
    """First sample index whose time is ≥ when (len(t) if none)."""
    for i, x in enumerate(t):
        if x >= when - 1e-9:
            return i
    return len(t)


@dataclasses.dataclass
class Recovery:
    breached: bool
    ttd_s: float | None
    ttm_s: float | None
    ttr_s: float | None
    mttr_s: float | None
    first_breach_s: float | None
    restored_s: float | None
    flaps: int


def recovery(series: RunSeries, slo: Slo) -> Recovery:
    """TTD, TTM, TTR, MTTR of one run (see the module docstring)."""
    t = series.t
    states = slo_states(series, slo)
    hold = max(1, int(slo.hold_s))
    on = _index_at(t, series.fault_on)
    off = _index_at(t, series.fault_off)
    bad = [i for i in range(on, len(states)) if states[i] == BAD]
    if not bad:
        return Recovery(False, None, None, None, 0.0, None, None, 0)
    first = bad[0]
    first_t = t[first]
    ttd = first_t - series.fault_on
    ttm = None
    held = first_held(states, first, hold)
    if held is not None and held + hold - 1 < off:
        ttm = t[held] - first_t
    ttr = None
    if off < len(t):
        h = first_held(states, off, hold)
        if h is not None:
            ttr = max(0.0, t[h] - series.fault_off)
    restored = first_held(states, bad[-1] + 1, hold)
    mttr = t[restored] - first_t if restored is not None else None
    flaps = 0
    for i in range(first + 1, len(states)):
        if states[i] == BAD and states[i - 1] != BAD:
            flaps += 1
    return Recovery(True, ttd, ttm, ttr, mttr, first_t, t[restored] if restored is not None else None, flaps)


# --- load shape ----------------------------------------------------------------------------
def _window(series: RunSeries, start: float, end: float) -> range:
    return range(_index_at(series.t, start), _index_at(series.t, end))


def aggregate_error_rate(series: RunSeries, start: float, end: float, traffic: str = "all") -> float | None:
    counts: dict[str, float] = {}
    for i in _window(series, start, end):
        for k, v in status_counts(series, i, traffic).items():
            counts[k] = counts.get(k, 0.0) + v
    return error_rate(counts)


def amplification(series: RunSeries, hops: Sequence[str] | None = None, width: int = 5) -> dict[str, float | None]:
    """Per hop: peak over the fault window of (hop requests ÷ ingress requests) in `width`-s windows.

    A ratio of sums over a short window rather than a ratio of per-second peaks:
    both counters are scraped together, so scrape jitter cancels out.
    """
    win = _window(series, series.fault_on, series.fault_off + 1)
    if not win:
        return {}
    ingress = rps_series(series, "all")
    per_hop = hop_series(series)
    out: dict[str, float | None] = {}
    for hop in hops or sorted(per_hop):
        values = per_hop.get(hop)
        if values is None:
            out[hop] = None
            continue
        best = None
        for i in win:
            lo = max(win.start, i - width + 1)
            den = sum(ingress[lo : i + 1])
            if i - lo + 1 < min(width, len(win)) or den <= 0:
                continue
            ratio = sum(values[lo : i + 1]) / den
            best = ratio if best is None else max(best, ratio)
        out[hop] = None if best is None else round(best, 3)
    return out


def deadline_gaps(series: RunSeries) -> dict[str, dict[str, float]]:
    """Per hop: calls finished after the edge deadline, and their mean gap (s), over the run."""
    out = {}
    for key in series.select("gap"):
        hop = key.service
        dt = _dts(series.t)
        count = sum((v or 0.0) * d for v, d in zip(series.values[key], dt, strict=True))
        total = sum((v or 0.0) * d for v, d in zip(series.get(SeriesKey("gapsum", hop)), dt, strict=True))
        out[hop] = {"count": round(count, 1), "mean_s": round(total / count, 4) if count else 0.0}
    return out


def fd_peaks(series: RunSeries) -> dict[str, float]:
    return {
        k.service: max((v for v in series.values[k] if v is not None), default=0.0) for k in series.select("fds")
    }


def _dts(t: Sequence[float]) -> list[float]:
    return [1.0] + [max(0.0, b - a) for a, b in zip(t, t[1:], strict=False)]


def total_requests(series: RunSeries, traffic: str = "all") -> int:
    dt = _dts(series.t)
    return int(round(sum(r * d for r, d in zip(rps_series(series, traffic), dt, strict=True))))


def analyze_run(series: RunSeries, slo: Slo, hops: Sequence[str] | None = None) -> dict:
    """Every number results.json carries for one configuration."""
    rec = recovery(series, slo)
    amp = amplification(series, hops)
    if hops:
        deepest = list(hops)[-1]
    else:  # order unknown (e.g. read from Prometheus): in a chain the deepest hop is the busiest
        deepest = max((h for h in amp if amp[h] is not None), key=lambda h: amp[h], default=None)

    on, off = series.fault_on, series.fault_off

    def r(x):
        return None if x is None else round(x, 3)

    return {
        "breached": rec.breached,
        "ttd_s": r(rec.ttd_s),
        "ttm_s": r(rec.ttm_s),
        "ttr_s": r(rec.ttr_s),
        "mttr_s": r(rec.mttr_s),
        "flaps": rec.flaps,
        "amplification": amp.get(deepest) if deepest else None,
        "deepest_hop": deepest,
        "amplification_by_hop": amp,
        "blast_radius": r(aggregate_error_rate(series, on, off, "organic")),
        "error_rate_during_fault": r(aggregate_error_rate(series, on, off, "all")),
        "drill_error_rate_during_fault": r(aggregate_error_rate(series, on, off, "drill")),
        "requests": total_requests(series),
        "requests_by_traffic": {tr: total_requests(series, tr) for tr in ("organic", "drill")},
        "deadline_gaps": deadline_gaps(series),
        "fd_peaks": fd_peaks(series),
    }


def rank(configs: dict[str, dict]) -> list[str]:
    """Configurations, fastest recovery first: never breached, then MTTR ascending, then never restored."""

    def key(name: str):
        c = configs[name]
        if not c.get("breached"):
            return (0, 0.0, name)
        if c.get("mttr_s") is None:
            return (2, 0.0, name)
        return (1, c["mttr_s"], name)

    return sorted(configs, key=key)
