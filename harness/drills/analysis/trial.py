"""MTTR analysis (contracts §10, §12): one trial's every number, from its per-second series, as a `TrialResult`.

Pure functions over a `RunSeries`; no I/O, no clocks. The per-second readings
and the GOOD/BAD/UNKNOWN state of each second are `harness.drills.analysis.slo`'s,
the user-impact numbers `harness.drills.analysis.impact`'s, the fault window's
traffic (offered load, amplification, goodput, blast radius)
`harness.drills.analysis.traffic`'s (all re-exported here). Definitions:

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
  (`PostFaultBreach`: start_s after fault-off, duration_s until held again, None if never):
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
- **never restored**: breached, MTTR `None`, and not insufficient data; written
  once, `is_never_restored`: `TrialResult.never_restored` asks it, and so does
  every reader of a saved trial (`never_restored_of`: the statistics, the
  report, a sweep's records).
- **insufficient data**: fewer than 80 % of the fault window's seconds are
  known, or no edge calls in it, or the load fell behind (`insufficient_reason`
  says which). Such a trial is never ranked as holding.

`analyze_run` returns the `TrialResult`; `TrialResult.to_dict()` is the trial's entry in results.json.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

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
    samples_in,
    slo_states,
    status_counts,
)
from harness.drills.analysis.traffic import (
    MIN_OFFERED_SHARE,
    DeadlineGap,
    OfferedRate,
    aggregate_error_rate,
    amplification,
    attempts_per_success,
    deadline_gaps,
    fd_peaks,
    offered_load,
    started_rps,
    success_rate,
    total_requests,
)
from harness.drills.plan.sections import Slo
from harness.drills.readings.series import RunSeries

#: the per-second readers (`slo`) and the traffic measures (`traffic`) are long imported from here too
__all__ = ["BAD", "GOOD", "UNKNOWN", "error_rate_series", "hop_series", "p99_series", "quantile_from_buckets",
           "rolling_mean", "rps_series", "slo_states", "status_counts", "MIN_OFFERED_SHARE", "DeadlineGap",
           "OfferedRate", "aggregate_error_rate", "amplification", "attempts_per_success", "deadline_gaps",
           "fd_peaks", "offered_load", "started_rps", "success_rate", "total_requests", "PostFaultBreach",
           "TrialResult", "is_never_restored", "never_restored_of", "analyze_run", "recovery", "rank"]  # fmt: skip
_window = samples_in  # the name tests/observability and older callers use


#: a fault window with fewer known seconds than this share is `insufficient_data`
MIN_KNOWN_SHARE = 0.8


@dataclasses.dataclass(frozen=True)
class PostFaultBreach:
    """A breach that started after the fault window and its grace: `start_s` after fault-off, `duration_s` until
    the SLO held again (None: never)."""

    start_s: float
    duration_s: float | None


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
    post_fault_breach: PostFaultBreach | None = None
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


def _post_fault(t: Sequence[float], breach: Breach, off: float) -> PostFaultBreach:
    """`post_fault_breach`: when it started after fault-off, and how long until held again (None: never)."""
    duration = breach_seconds(t, breach) if breach.restored is not None else None
    return PostFaultBreach(round(t[breach.first] - off, 3), None if duration is None else round(duration, 3))


def outage_s(rec: Recovery, t: Sequence[float]) -> float:
    """Seconds the SLO was lost: the fault's breach (first breach → restored for good, or to the run's
    end) plus every post-fault breach; 0 when it held."""
    total = breach_seconds(t, rec.fault_breach) if rec.fault_breach is not None else 0.0
    return total + sum(breach_seconds(t, b) for b in rec.post_breaches)




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
    if rec.post_fault_breach is not None and rec.post_fault_breach.duration_s is not None:
        out["post_fault_breach_s"] = span(post[0])
    out["bad_s"] = sum(span(b) for b in found)
    out["outage_s"] = (span(fault) if fault is not None else 0.0) + sum(span(b) for b in post)
    return {k: round(v, 3) for k, v in out.items()}


# --- never restored: the one rule ------------------------------------------------------------------------------
def is_never_restored(breached: bool, mttr_s: float | None, insufficient_data: bool) -> bool:
    """A trial that breached the SLO and had not restored it by the run's end (no MTTR), with data enough to say
    so (§10, §16). The only place the rule is written: a sweep's boundary is where it happens half the time."""
    return breached and mttr_s is None and not insufficient_data


def never_restored_of(trial: Mapping) -> bool:
    """`is_never_restored` of a trial as results.json holds it (`TrialResult.to_dict()` and what the runner adds;
    `{}` for a trial that never ran: not never restored)."""
    return is_never_restored(bool(trial.get("breached")), trial.get("mttr_s"), bool(trial.get("insufficient_data")))


# --- the result --------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TrialResult:
    """One trial of one configuration: every number results.json carries for it, in its order (see the module
    docstring for each definition). Times in seconds, rounded to the millisecond; None where there is none."""

    breached: bool
    #: too little data to judge (the fault window mostly unknown, no calls, or the load fell behind)
    insufficient_data: bool
    insufficient_reason: str | None
    #: share of the fault window's seconds with a known SLO state
    known_share: float | None
    #: per traffic class (empty when the plan's rates are unknown, e.g. read back from Prometheus)
    offered_rps: dict[str, OfferedRate]
    load_fell_behind: bool | None
    ttd_s: float | None
    ttm_s: float | None
    ttr_s: float | None
    mttr_s: float | None
    #: never restored: run end − the start of the first bad second
    mttr_lower_bound_s: float | None
    post_fault_breach: PostFaultBreach | None
    outage_s: float
    budget_burn: float | None
    bad_calls: float
    bad_s: float
    flaps: int
    #: the deepest hop's attempts ÷ edge first attempts over the fault window
    amplification: float | None
    deepest_hop: str | None
    amplification_by_hop: dict[str, float | None]
    success_rate: float | None
    success_rate_by_traffic: dict[str, float | None]
    attempts_per_success: float | None
    blast_radius: float | None
    error_rate_during_fault: float | None
    drill_error_rate_during_fault: float | None
    requests: int
    requests_by_traffic: dict[str, int]
    deadline_gaps: dict[str, DeadlineGap]
    fd_peaks: dict[str, float]
    #: read back from a coarser source: ± of each time it reports; None when exact (the series is the runner's)
    uncertainty_s: dict[str, float] | None = None
    resolution_s: float | None = None

    @property
    def never_restored(self) -> bool:
        return is_never_restored(self.breached, self.mttr_s, self.insufficient_data)

    def to_dict(self) -> dict:
        """The trial's entry in results.json: every field in order, nested values as plain dicts; `uncertainty_s`
        and `resolution_s` only when read back."""
        out = dataclasses.asdict(self)
        if self.uncertainty_s is None:
            del out["uncertainty_s"], out["resolution_s"]
        return out


def analyze_run(series: RunSeries, slo: Slo, hops: Sequence[str] | None = None) -> TrialResult:
    """Every number of one trial of one configuration."""
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
    read_back = series.edge_error is not None or series.fault_error is not None or series.resolution_s is not None

    def r(x):
        return None if x is None else round(x, 3)

    return TrialResult(
        breached=rec.breached,
        insufficient_data=rec.insufficient_data or bool(fell_behind),
        insufficient_reason="load fell behind" if fell_behind else rec.insufficient_reason,
        known_share=rec.known_share,
        offered_rps=offered,
        load_fell_behind=fell_behind,
        ttd_s=r(rec.ttd_s),
        ttm_s=r(rec.ttm_s),
        ttr_s=r(rec.ttr_s),
        mttr_s=r(rec.mttr_s),
        mttr_lower_bound_s=r(rec.mttr_lower_bound_s),
        post_fault_breach=rec.post_fault_breach,
        outage_s=r(outage_s(rec, series.t)),
        budget_burn=r(burn),
        bad_calls=round(bad_calls, 1),
        bad_s=r(bad_seconds(series, found)),
        flaps=rec.flaps,
        amplification=amp.get(deepest) if deepest else None,
        deepest_hop=deepest,
        amplification_by_hop=amp,
        success_rate=r(success_rate(series, on, off, "all")),
        success_rate_by_traffic={tr: r(success_rate(series, on, off, tr)) for tr in ("organic", "drill")},
        attempts_per_success=attempts_per_success(series, deepest),
        blast_radius=r(aggregate_error_rate(series, on, off, "organic")),
        error_rate_during_fault=r(aggregate_error_rate(series, on, off, "all")),
        drill_error_rate_during_fault=r(aggregate_error_rate(series, on, off, "drill")),
        requests=total_requests(series),
        requests_by_traffic={tr: total_requests(series, tr) for tr in ("organic", "drill")},
        deadline_gaps=deadline_gaps(series),
        fd_peaks=fd_peaks(series),
        uncertainty_s=uncertainty(series, rec, found, slo) if read_back else None,
        resolution_s=series.resolution_s if read_back else None,
    )


def rank(configs: dict[str, dict], *, seed: int = 0) -> list[str]:
    """Configurations in the verdict's order (`harness.drills.analysis.verdict.judge`): best first, no data last."""
    from harness.drills.analysis.verdict import judge

    return judge(configs, seed=seed)[0]
