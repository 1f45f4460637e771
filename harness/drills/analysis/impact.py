"""What users felt in one trial (contracts §12): the error budget burned and the seconds outside the SLO.

Both are counted from fault-on to the end of the run (a storm that outlives the
fault, a post-fault breach and a never-restored tail all count), on the SLO's
traffic (`slo.traffic`). Pure functions over a `RunSeries`.

- **bad calls** of a second = its server-fault calls (`harness.core.status`),
  plus, for an SLO with `max_p99_s`, its calls slower than `max_p99_s`. The
  latency histogram carries no status, so a call is counted once this way:
  calls that ended DEADLINE_EXCEEDED waited for their deadline and are taken to
  be among the slow ones; other failed calls are taken to be fast. So a
  second's bad calls = failed + max(0, slow − DEADLINE_EXCEEDED), at most its
  calls. Slow calls are read from the cumulative buckets like
  `histogram_quantile` reads them: linear inside the bucket that holds the
  bound (none of the shipped bounds needs it: 0.5 s and 1 s are bucket edges).
  CANCELLED calls are neither bad nor counted (they end when the client
  cancels, before any shipped bound).
- **budget_burn** = bad calls ÷ (`max_error_rate` × calls), calls = all −
  CANCELLED: 1.0 is exactly the SLO's allowance for those calls, 3.0 three
  times it. `None` when there were no calls, or the SLO allows no error
  (`max_error_rate: 0` has no budget to burn; `bad_s` still tells the harm).
- **bad_s** = seconds outside the SLO: the sum of every breach's length (first
  bad second → held again, as MTTR measures it, or to the end of the run when
  never held again), the fault's breach and post-fault breaches alike. Unlike
  MTTR it leaves out the seconds a mitigation held the SLO between two breaches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from harness.core.status import SERVER_FAULT_CODES
from harness.drills.analysis.slo import Breach, breach_seconds, breaches, index_at, sample_lengths
from harness.drills.plan.sections import Slo
from harness.drills.readings.series import RunSeries

DEADLINE = "DEADLINE_EXCEEDED"


def calls_slower_than(buckets: Sequence[tuple[float, float]], bound: float) -> float:
    """Calls above `bound` from cumulative (upper bound, count) buckets, linear inside the bucket holding it."""
    buckets = sorted(buckets)
    if not buckets:
        return 0.0
    total = buckets[-1][1]
    lo, below = 0.0, 0.0
    for le, cum in buckets:
        if bound <= le:
            if math.isinf(le) or le <= lo:
                return max(0.0, total - below)
            below += (cum - below) * (bound - lo) / (le - lo)
            return max(0.0, total - below)
        lo, below = le, cum
    return max(0.0, total - below)


def bad_and_total(series: RunSeries, slo: Slo) -> tuple[list[float], list[float]]:
    """Per second, on the SLO's traffic: bad calls and calls (all − CANCELLED), see the module docstring."""
    calls = [k for k in series.select("calls") if slo.traffic == "all" or k.traffic == slo.traffic]
    lat = [k for k in series.select("lat") if slo.traffic == "all" or k.traffic == slo.traffic]
    bounds = {k: math.inf if k.le == "+Inf" else float(k.le) for k in lat}
    bad, total = [], []
    for i in range(len(series.t)):
        failed = deadline = n = 0.0
        for k in calls:
            v = series.values[k][i] or 0.0
            if k.status == "CANCELLED":
                continue
            n += v
            if k.status in SERVER_FAULT_CODES:
                failed += v
            if k.status == DEADLINE:
                deadline += v
        b = failed
        if slo.max_p99_s is not None and lat:
            cum: dict[float, float] = {}
            for k in lat:
                cum[bounds[k]] = cum.get(bounds[k], 0.0) + (series.values[k][i] or 0.0)
            slow = calls_slower_than(list(cum.items()), slo.max_p99_s)
            b += max(0.0, slow - deadline)
        bad.append(min(b, n))
        total.append(n)
    return bad, total


def budget_burn(series: RunSeries, slo: Slo) -> tuple[float | None, float]:
    """(budget burned from fault-on to the end, bad calls in that time); burn None without calls or allowance."""
    start = index_at(series.t, series.fault_on + 0.5)
    bad, total = bad_and_total(series, slo)
    dt = sample_lengths(series.t)
    bad_calls = sum(bad[i] * dt[i] for i in range(start, len(series.t)))
    calls = sum(total[i] * dt[i] for i in range(start, len(series.t)))
    if calls <= 0 or slo.max_error_rate <= 0:
        return None, bad_calls
    return bad_calls / (slo.max_error_rate * calls), bad_calls


def impact_breaches(series: RunSeries, states: Sequence[int], slo: Slo) -> list[Breach]:
    """Every breach from fault-on to the end of the run, stretch by stretch."""
    return breaches(states, index_at(series.t, series.fault_on + 0.5), max(1, int(slo.hold_s)))


def bad_seconds(series: RunSeries, found: Sequence[Breach]) -> float:
    """Seconds outside the SLO: the sum of the breaches' lengths."""
    return sum(breach_seconds(series.t, b) for b in found)
