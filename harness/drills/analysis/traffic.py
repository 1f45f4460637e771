"""The fault window's traffic, per trial (contracts §10): offered load, amplification and goodput, error rates,
requests. Pure functions over a `RunSeries`, each a field of `harness.drills.analysis.trial.TrialResult`.

- **offered load**: per traffic class, `planned` requests/s (what the load
  driver was asked to send) and `achieved`: the calls the edge client *started*
  in the fault window ÷ its length, as the load counted them when it started
  them (`drill_client_started_total`, the runner's aio load). A load that counts
  calls only when they end is estimated: each second's completions are moved
  back by their latency (spread over their latency bucket) before counting, so a
  slow fault does not look like a load drop — but calls that end after the
  window are missed, which under-reads a short window of long calls.
  **load fell behind** when achieved < 90 % of planned for a class: the
  generator slowed down with the system (coordinated omission) and the drill
  cannot say a configuration held.
- **amplification** per hop = the hop's attempts (server calls, shed included)
  ÷ edge first attempts (every call users sent: organic and drill, the load
  before any retry), summed over the fault window. The drill's amplification is
  the deepest hop's. One definition for the runner, `drill analyze`, the
  recording rules and the dashboards.
- **goodput** beside it: `success_rate` = OK ÷ (all − CANCELLED) at the edge
  over the fault window (all traffic; `success_rate_by_traffic` per class), and
  `attempts_per_success` = deepest-hop attempts ÷ edge OK calls over the fault
  window (shedding everything gives low amplification but no success).
- **blast radius** = error rate of organic traffic over the fault window.
- **refused at a hop's own limits** (`refused_by_hop`): calls a hop's process turned away because it was full
  (its in-flight limit, answered RESOURCE_EXHAUSTED; its core backlog, answered CANCELLED, which no error rate
  counts), over the whole trial: such a trial measures the hop's process as much as the fault.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from harness.core.status import error_rate
from harness.drills.analysis.slo import hop_series, rps_series, sample_lengths, samples_in, status_counts
from harness.drills.plan.outputs import SeriesKey
from harness.drills.readings.series import RunSeries

#: achieved below this share of the planned rate is `load_fell_behind` (and `insufficient_data`)
MIN_OFFERED_SHARE = 0.9
#: how long past its timeout a call may still be seen ending (deadline timer, scheduling)
TIMEOUT_SLACK_S = 0.1


@dataclasses.dataclass(frozen=True)
class OfferedRate:
    """One traffic class over the fault window: the rate asked for, the rate started, and whether it fell behind."""

    planned: float
    achieved: float
    fell_behind: bool


@dataclasses.dataclass(frozen=True)
class DeadlineGap:
    """One hop over the run: calls that finished after the edge's deadline, and their mean gap (s)."""

    count: float
    mean_s: float


def _sum_counts(series: RunSeries, win: range, traffic: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for i in win:
        for k, v in status_counts(series, i, traffic).items():
            counts[k] = counts.get(k, 0.0) + v
    return counts


def aggregate_error_rate(series: RunSeries, start: float, end: float, traffic: str = "all") -> float | None:
    return error_rate(_sum_counts(series, samples_in(series, start, end), traffic))


def success_rate(series: RunSeries, start: float, end: float, traffic: str = "all") -> float | None:
    """OK ÷ (all − CANCELLED) of edge calls in [start, end); None without calls."""
    counts = _sum_counts(series, samples_in(series, start, end), traffic)
    den = sum(v for k, v in counts.items() if k != "CANCELLED")
    return counts.get("OK", 0.0) / den if den > 0 else None


def amplification(series: RunSeries, hops: Sequence[str] | None = None) -> dict[str, float | None]:
    """Per hop: the hop's attempts ÷ edge first attempts (all traffic), summed over the fault window."""
    win = samples_in(series, series.fault_on, series.fault_off)
    if not win:
        return {}
    edge = rps_series(series, "all")
    ingress = sum(edge[i] for i in win)
    per_hop = hop_series(series)
    out: dict[str, float | None] = {}
    for hop in hops or sorted(per_hop):
        values = per_hop.get(hop)
        if values is None or ingress <= 0:
            out[hop] = None
            continue
        out[hop] = round(sum(values[i] for i in win) / ingress, 3)
    return out


def attempts_per_success(series: RunSeries, hop: str | None) -> float | None:
    """The hop's attempts ÷ edge OK calls over the fault window (None when nothing succeeded)."""
    win = samples_in(series, series.fault_on, series.fault_off)
    values = hop_series(series).get(hop) if hop else None
    if values is None:
        return None
    ok = _sum_counts(series, win, "all").get("OK", 0.0)
    return round(sum(values[i] for i in win) / ok, 3) if ok > 0 else None


def deadline_gaps(series: RunSeries) -> dict[str, DeadlineGap]:
    """Per hop: calls finished after the edge deadline, and their mean gap (s), over the run."""
    out = {}
    for key in series.select("gap"):
        hop = key.service
        dt = sample_lengths(series.t)
        count = sum((v or 0.0) * d for v, d in zip(series.values[key], dt, strict=True))
        total = sum((v or 0.0) * d for v, d in zip(series.get(SeriesKey("gapsum", hop)), dt, strict=True))
        out[hop] = DeadlineGap(round(count, 1), round(total / count, 4) if count else 0.0)
    return out


def fd_peaks(series: RunSeries) -> dict[str, float]:
    return {k.service: max((v for v in series.values[k] if v is not None), default=0.0) for k in series.select("fds")}


def total_requests(series: RunSeries, traffic: str = "all") -> int:
    dt = sample_lengths(series.t)
    return int(round(sum(r * d for r, d in zip(rps_series(series, traffic), dt, strict=True))))


def started_rps(series: RunSeries, start: float, end: float, traffic: str) -> float | None:
    """Calls of one traffic class the edge client started in [start, end), per second.

    Counted where the load exports it (`started` series: calls filed under the second they started, the
    runner's aio load); otherwise estimated from when calls ended and how long they took (`estimated_started_rps`).
    """
    counted = counted_started_rps(series, start, end, traffic)
    return counted if counted is not None else estimated_started_rps(series, start, end, traffic)


def counted_started_rps(series: RunSeries, start: float, end: float, traffic: str) -> float | None:
    """Calls of one class started in [start, end) per second, from the load's own `started` counts (each sample's
    calls spread over its second(s); a sample the window cuts counts its share). None without such counts."""
    keys = series.select("started", traffic=traffic)
    if end <= start or not keys:
        return None
    dt = sample_lengths(series.t)
    n, seen = 0.0, False
    for i, t in enumerate(series.t):
        overlap = max(0.0, min(t, end) - max(t - dt[i], start))
        for k in keys:
            v = series.values[k][i]
            if overlap > 0 and v is not None:
                n, seen = n + v * overlap, True
    return n / (end - start) if seen else None


def estimated_started_rps(series: RunSeries, start: float, end: float, traffic: str) -> float | None:
    """Calls of one class started in [start, end) per second, estimated from when they ended.

    A sample at t counts calls that ended in (t−1, t]; one in latency bucket
    (lo, hi] started in (t−1−hi, t−lo]. Each bucket's calls are spread evenly
    over that interval and the part inside [start, end) is counted. With the
    client's timeout known, no call is taken to have lasted longer than it
    (plus `TIMEOUT_SLACK_S`): calls that timed out at 2 s sit in the (2, 3] bucket.
    """
    if end <= start:
        return None
    keys = [k for k in series.select("lat") if k.traffic == traffic]
    if not keys:
        return None
    les = sorted({k.le for k in keys}, key=lambda le: math.inf if le == "+Inf" else float(le))
    bounds = [math.inf if le == "+Inf" else float(le) for le in les]
    dt = sample_lengths(series.t)
    started = 0.0
    for i, t in enumerate(series.t):
        cum = [sum(series.values[k][i] or 0.0 for k in keys if k.le == le) for le in les]
        lo = 0.0
        prev = 0.0
        for le_cum, hi in zip(cum, bounds, strict=True):
            n = (le_cum - prev) * dt[i]
            prev = le_cum
            if hi == math.inf:
                hi = lo  # beyond the last bucket: taken as the last bound
            top, bottom = hi, lo
            if series.timeout_s is not None:
                top = min(hi, series.timeout_s + TIMEOUT_SLACK_S)
                bottom = min(lo, series.timeout_s)
            if n > 0:
                a, b = t - dt[i] - top, t - bottom
                overlap = max(0.0, min(b, end) - max(a, start))
                started += n * (overlap / (b - a) if b > a else float(start <= a < end))
            lo = hi
    return started / (end - start)


def offered_load(series: RunSeries) -> tuple[dict[str, OfferedRate], bool | None]:
    """Per class `{planned, achieved, fell_behind}` over the fault window, and whether any class fell behind."""
    if not series.planned_rps:
        return {}, None
    out = {}
    for traffic, planned in sorted(series.planned_rps.items()):
        if planned <= 0:
            continue
        window = series.fault_off - series.fault_on
        achieved = started_rps(series, series.fault_on, series.fault_off, traffic) or 0.0
        # Judged in whole calls: the estimate spreads each latency bucket over its interval, so a sample grid a
        # fraction of a millisecond off the window's edges moves it by a fraction of a call (27 calls sent in
        # a 3-s window read as 26.998 by the runner and 27.0 by a read-back of the same calls). Rounded, both say 27.
        calls = round(achieved * window)
        out[traffic] = OfferedRate(round(planned, 3), round(achieved, 3),
                                   calls < MIN_OFFERED_SHARE * planned * window - 1e-9)  # fmt: skip
    return out, any(c.fell_behind for c in out.values())


#: A hop is said to have refused calls at its limits from this many calls in a trial, and this share of its calls:
#: the core backlog's count is derived (calls the core started less those that reached the process) and may run
#: ahead by the calls on their way at a scrape, a few at most, never a share of a trial's calls.
MIN_REFUSED = 10
MIN_REFUSED_SHARE = 0.01


def refused_by_hop(series: RunSeries) -> dict[str, float]:
    """Calls each hop refused at its own limits over the trial (`refused` series), for the hops that refused at
    least MIN_REFUSED calls and MIN_REFUSED_SHARE of their calls (`srv`, refusals included)."""
    out: dict[str, float] = {}
    for key, values in series.values.items():
        if key.kind == "refused":
            out[key.service] = out.get(key.service, 0.0) + sum(v for v in values if v)
    calls = {k.service: sum(v for v in vs if v) for k, vs in series.values.items() if k.kind == "srv"}
    return {hop: n for hop, n in out.items()
            if n >= MIN_REFUSED and n >= MIN_REFUSED_SHARE * max(calls.get(hop, 0.0), n)}  # fmt: skip
