"""MTTR analysis (contracts §10, §12): one trial's every number, from its per-second series.

Pure functions over a `RunSeries`; no I/O, no clocks. The per-second readings
and the GOOD/BAD/UNKNOWN state of each second are `harness.drills.analysis.slo`'s (re-
exported here), the user-impact numbers `harness.drills.analysis.impact`'s. Definitions:

- a sample at time t covers the second (t−1, t]. The **fault window** is the
  samples whose second lies in [fault-on, fault-off): fault-on + ½ ≤ t < fault-off + ½
  (so the last fault second is in and the last warm-up second is out).
- a second is **bad** when its error rate (server-fault / (all − CANCELLED),
  `harness.core.status.error_rate`) on the SLO's traffic exceeds the SLO, or its
  p99 exceeds the latency SLO when one is set; **good** when it has at least
  `min_calls` calls and is not bad; otherwise it is *unknown* (neither).
- **held** at t: the `hold_s` seconds starting at t are all good.
- **detection range**: the fault window plus a grace (`slo.grace_s`, default
  hold_s + window_s). **TTD** = first bad second in that range − fault-on.
  A breach that starts after the range is a **post-fault breach**
  (`{start_s: seconds after fault-off, duration_s: until held again, null if never}`):
  users were hurt, so the trial is `breached` (its MTTR that breach's length,
  TTD/TTM/TTR null: nothing to detect at fault-on) and the field stays its own
  finding. One after a restored fault breach adds to the outage, not the MTTR.
- **outage** = seconds the SLO was lost: the fault breach (first breach →
  restored for good, or to the run's end) plus every post-fault breach; 0 when
  held. The statistic recovery is compared on (`harness.drills.analysis.stats`).
- **budget burn**, **bad seconds**: see `harness.drills.analysis.impact`.
- **uncertainty**: a series read back from Prometheus says how far each edge
  may lie off the runner's grid (`RunSeries.edge_error`, `fault_error`); every
  reported time gets the sum of its two edges' (`uncertainty_s`), beside the
  read-back's `resolution_s`. Exact series carry neither field.
- **TTM** = first breach → first held point whose hold window ends while the
  fault is still on (mitigation: breaker, balancer, budget).
- **TTR** = fault-off → first held point after fault-off (0 when the system was
  already holding the SLO when the fault went off).
- **MTTR** = first breach → the held point after the breach's last bad second
  (restored for good). `None` when never restored. `None` too, with
  `breached: False`, when the SLO held: never 0. Times are sample end-times.
- **insufficient data**: fewer than 80 % of the fault window's seconds are
  known, or no edge calls in it, or the load fell behind (`insufficient_reason`
  says which). Such a trial is never ranked as holding.
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
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from harness.core.status import error_rate
from harness.drills.analysis.impact import bad_seconds, budget_burn, impact_breaches
from harness.drills.analysis.slo import (
    BAD,
    GOOD,
    UNKNOWN,
    Breach,
    breach_seconds,
    breaches,
    error_rate_series,
    first_held,
    grace_s,
    hop_series,
    index_at,
    p99_series,
    quantile_from_buckets,
    rolling_mean,
    rps_series,
    sample_lengths,
    samples_in,
    slo_states,
    status_counts,
)
from harness.drills.plan.outputs import SeriesKey
from harness.drills.plan.sections import Slo
from harness.drills.readings.series import RunSeries

#: the per-second readers (`harness.drills.analysis.slo`) are long imported from here too
__all__ = ["BAD", "GOOD", "UNKNOWN", "error_rate_series", "hop_series", "p99_series", "quantile_from_buckets",
           "rolling_mean", "rps_series", "slo_states", "status_counts", "analyze_run", "recovery", "rank"]  # fmt: skip
_window = samples_in  # the name tests/observability and older callers use


#: a fault window with fewer known seconds than this share is `insufficient_data`
MIN_KNOWN_SHARE = 0.8
#: achieved below this share of the planned rate is `load_fell_behind` (and `insufficient_data`)
MIN_OFFERED_SHARE = 0.9
#: how long past its timeout a call may still be seen ending (deadline timer, scheduling)
TIMEOUT_SLACK_S = 0.1


@dataclasses.dataclass
class Recovery:
    """The recovery times of one trial, and the sample indices they were read at (for their ±)."""

    breached: bool
    ttd_s: float | None
    ttm_s: float | None
    ttr_s: float | None
    mttr_s: float | None
    first_breach_s: float | None
    restored_s: float | None
    flaps: int
    insufficient_data: bool = False
    known_share: float | None = None
    post_fault_breach: dict | None = None
    #: never restored: run end − the start of the first bad second, a lower bound of the MTTR
    mttr_lower_bound_s: float | None = None
    #: why the trial is insufficient_data (None when it is not)
    insufficient_reason: str | None = None
    #: the breach that started in the detection range (None: none did)
    fault_breach: Breach | None = None
    #: every breach that started after it (or after the detection range), in order
    post_breaches: list[Breach] = dataclasses.field(default_factory=list)
    #: sample index of the mitigation's held point (TTM) and of the recovery's (TTR)
    ttm_at: int | None = None
    ttr_at: int | None = None


def _insufficient(series: RunSeries, states: Sequence[int], win: range) -> tuple[float, str | None]:
    """The fault window's known share, and why it is too little to judge (None: enough)."""
    expected = max(len(win), int(round(series.fault_off - series.fault_on)))
    known = sum(1 for i in win if states[i] != UNKNOWN)
    share = known / expected if expected else 0.0
    calls = rps_series(series, "all")
    if sum(calls[i] for i in win) <= 0:
        return share, "no calls in the fault window"
    if share < MIN_KNOWN_SHARE and len(win) < MIN_KNOWN_SHARE * expected:  # the sampler fell behind
        return share, f"samples missing in the fault window ({len(win)} of {expected} seconds sampled)"
    if share < MIN_KNOWN_SHARE:
        return share, f"too few calls in the fault window ({100 * share:.0f} % of its seconds known)"
    return share, None


def _flaps(states: Sequence[int], breach: Breach) -> int:
    end = breach.restored if breach.restored is not None else len(states)
    return sum(1 for i in range(breach.first + 1, end) if states[i] == BAD and states[i - 1] != BAD)


def recovery(series: RunSeries, slo: Slo, states: Sequence[int] | None = None) -> Recovery:
    """TTD, TTM, TTR, MTTR of one run (see the module docstring)."""
    t = series.t
    states = slo_states(series, slo) if states is None else states
    hold = max(1, int(slo.hold_s))
    win = samples_in(series, series.fault_on, series.fault_off)
    share, why = _insufficient(series, states, win)
    on, off = win.start, win.stop
    detect_end = index_at(t, series.fault_off + grace_s(slo) + 0.5)
    bad = [i for i in range(on, detect_end) if states[i] == BAD]
    base = {"insufficient_data": why is not None, "known_share": round(share, 3), "insufficient_reason": why}
    if not bad:
        post = breaches(states, detect_end, hold)
        if not post:
            return Recovery(False, None, None, None, None, None, None, 0, **base)
        # a breach after the fault and its grace: users were hurt, so the trial did not hold; nothing to detect
        first = post[0]
        mttr = breach_seconds(t, first) if first.restored is not None else None
        return Recovery(
            True, None, None, None, mttr, t[first.first], t[first.restored] if first.restored is not None else None,
            _flaps(states, first), post_fault_breach=_post_fault(t, first, series.fault_off),
            mttr_lower_bound_s=None if mttr is not None else breach_seconds(t, first), post_breaches=post, **base,
        )  # fmt: skip
    first = bad[0]
    first_t = t[first]
    ttd = first_t - series.fault_on
    ttm = ttm_at = None
    held = first_held(states, first, hold)
    if held is not None and held + hold - 1 < off:
        ttm, ttm_at = t[held] - first_t, held
    ttr = ttr_at = None
    if off < len(t):
        if off > 0 and first_held(states, off - 1, hold) == off - 1:
            ttr, ttr_at = 0.0, off - 1  # already holding when the fault went off
        else:
            h = first_held(states, off, hold)
            if h is not None:
                ttr, ttr_at = max(0.0, t[h] - series.fault_off), h
    fault = Breach(first, first_held(states, bad[-1] + 1, hold))
    restored = fault.restored
    mttr = breach_seconds(t, fault) if restored is not None else None
    post = breaches(states, max(restored, detect_end), hold) if restored is not None else []
    return Recovery(
        True, ttd, ttm, ttr, mttr, first_t, t[restored] if restored is not None else None, _flaps(states, fault),
        post_fault_breach=_post_fault(t, post[0], series.fault_off) if post else None,
        mttr_lower_bound_s=None if mttr is not None else breach_seconds(t, fault), fault_breach=fault,
        post_breaches=post, ttm_at=ttm_at, ttr_at=ttr_at, **base,
    )  # fmt: skip


def _post_fault(t: Sequence[float], breach: Breach, off: float) -> dict:
    """`post_fault_breach`: when it started after fault-off, and how long until held again (None: never)."""
    duration = breach_seconds(t, breach) if breach.restored is not None else None
    return {"start_s": round(t[breach.first] - off, 3), "duration_s": None if duration is None else round(duration, 3)}


def outage_s(rec: Recovery, t: Sequence[float]) -> float:
    """Seconds the SLO was lost: the fault's breach (first breach → restored for good, or to the run's
    end) plus every post-fault breach; 0 when it held."""
    total = breach_seconds(t, rec.fault_breach) if rec.fault_breach is not None else 0.0
    return total + sum(breach_seconds(t, b) for b in rec.post_breaches)


# --- load shape and goodput ------------------------------------------------------------------
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


def deadline_gaps(series: RunSeries) -> dict[str, dict[str, float]]:
    """Per hop: calls finished after the edge deadline, and their mean gap (s), over the run."""
    out = {}
    for key in series.select("gap"):
        hop = key.service
        dt = sample_lengths(series.t)
        count = sum((v or 0.0) * d for v, d in zip(series.values[key], dt, strict=True))
        total = sum((v or 0.0) * d for v, d in zip(series.get(SeriesKey("gapsum", hop)), dt, strict=True))
        out[hop] = {"count": round(count, 1), "mean_s": round(total / count, 4) if count else 0.0}
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


def offered_load(series: RunSeries) -> tuple[dict[str, dict], bool | None]:
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
        out[traffic] = {
            "planned": round(planned, 3),
            "achieved": round(achieved, 3),
            "fell_behind": calls < MIN_OFFERED_SHARE * planned * window - 1e-9,
        }
    return out, any(c["fell_behind"] for c in out.values())


def uncertainty(series: RunSeries, rec: Recovery, found: Sequence[Breach], slo: Slo | None = None) -> dict[str, float]:
    """± in seconds of every time the trial reports, read back from a source coarser than the runner's grid:
    a duration is as uncertain as its two edges together (`RunSeries.edge_error_at`, `fault_error`).

    An edge at second i rests on the error rates of the `window_s` seconds before it and the `hold_s` seconds
    it is held: a misread anywhere there can move it (a read-back once found a restore 1 s later than the
    runner with the gap two seconds away and ± 0 stated), so each edge takes the widest error within reach."""
    reach = 0 if slo is None else slo.window_s + slo.hold_s - 1

    def e(i: int | None) -> float:
        return series.edge_error_at(i, reach)

    on_err, off_err = series.fault_error or (0.0, 0.0)

    def span(b: Breach) -> float:
        return e(b.first) + (e(b.restored) if b.restored is not None else 0.0)

    out: dict[str, float] = {}
    fault, post = rec.fault_breach, rec.post_breaches
    if rec.ttd_s is not None and fault is not None:
        out["ttd_s"] = on_err + e(fault.first)
    if rec.ttm_s is not None and fault is not None:
        out["ttm_s"] = e(fault.first) + e(rec.ttm_at)
    if rec.ttr_s is not None:
        out["ttr_s"] = off_err + e(rec.ttr_at)
    if rec.mttr_s is not None:
        out["mttr_s"] = span(fault if fault is not None else post[0])
    if rec.post_fault_breach and rec.post_fault_breach.get("duration_s") is not None:
        out["post_fault_breach_s"] = span(post[0])
    out["bad_s"] = sum(span(b) for b in found)
    out["outage_s"] = (span(fault) if fault is not None else 0.0) + sum(span(b) for b in post)
    return {k: round(v, 3) for k, v in out.items()}


def analyze_run(series: RunSeries, slo: Slo, hops: Sequence[str] | None = None) -> dict:
    """Every number results.json carries for one trial of one configuration."""
    states = slo_states(series, slo)
    rec = recovery(series, slo, states)
    amp = amplification(series, hops)
    if hops:
        deepest = list(hops)[-1]
    else:  # order unknown (e.g. read from Prometheus): in a chain the deepest hop is the busiest
        deepest = max((h for h in amp if amp[h] is not None), key=lambda h: amp[h], default=None)

    on, off = series.fault_on, series.fault_off
    offered, fell_behind = offered_load(series)
    found = impact_breaches(series, states, slo)
    burn, bad_calls = budget_burn(series, slo)

    def r(x):
        return None if x is None else round(x, 3)

    out = {
        "breached": rec.breached,
        "insufficient_data": rec.insufficient_data or bool(fell_behind),
        "insufficient_reason": "load fell behind" if fell_behind else rec.insufficient_reason,
        "known_share": rec.known_share,
        "offered_rps": offered,
        "load_fell_behind": fell_behind,
        "ttd_s": r(rec.ttd_s),
        "ttm_s": r(rec.ttm_s),
        "ttr_s": r(rec.ttr_s),
        "mttr_s": r(rec.mttr_s),
        "mttr_lower_bound_s": r(rec.mttr_lower_bound_s),
        "post_fault_breach": rec.post_fault_breach,
        "outage_s": r(outage_s(rec, series.t)),
        "budget_burn": r(burn),
        "bad_calls": round(bad_calls, 1),
        "bad_s": r(bad_seconds(series, found)),
        "flaps": rec.flaps,
        "amplification": amp.get(deepest) if deepest else None,
        "deepest_hop": deepest,
        "amplification_by_hop": amp,
        "success_rate": r(success_rate(series, on, off, "all")),
        "success_rate_by_traffic": {tr: r(success_rate(series, on, off, tr)) for tr in ("organic", "drill")},
        "attempts_per_success": attempts_per_success(series, deepest),
        "blast_radius": r(aggregate_error_rate(series, on, off, "organic")),
        "error_rate_during_fault": r(aggregate_error_rate(series, on, off, "all")),
        "drill_error_rate_during_fault": r(aggregate_error_rate(series, on, off, "drill")),
        "requests": total_requests(series),
        "requests_by_traffic": {tr: total_requests(series, tr) for tr in ("organic", "drill")},
        "deadline_gaps": deadline_gaps(series),
        "fd_peaks": fd_peaks(series),
    }
    if series.edge_error is not None or series.fault_error is not None or series.resolution_s is not None:
        out["uncertainty_s"] = uncertainty(series, rec, found, slo)
        out["resolution_s"] = series.resolution_s
    return out


def rank(configs: dict[str, dict], *, seed: int = 0) -> list[str]:
    """Configurations in the verdict's order (`harness.drills.analysis.verdict.judge`): best first, no data last."""
    from harness.drills.analysis.verdict import judge

    return judge(configs, seed=seed)[0]
