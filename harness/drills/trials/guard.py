"""Guards: stop conditions checked every second while a trial runs (docs/drills.md, "Safeguards").

A plan's `guard.stop_when` lists conditions; the first that holds **trips**, and the
runner stops the drill's fault at once (the load stops tagging, the services' one-way
emergency stop where it can reach them), marks the trial and, by default, skips the
configuration's later trials. Each condition is read from the per-second series the
analysis uses (`harness.drills.analysis.slo`, `harness.drills.analysis.impact`), built from the same
samples as the trial's own series, so a trip can be re-derived from series.json:

- `error_rate`: the error rate of one traffic class (server-fault ÷ (all − CANCELLED),
  `harness.core.status`) is above `above` in each of the last `for_s` samples (one
  second each; a second with fewer than the SLO's `min_calls` calls is unknown and
  breaks the run);
- `burn_rate`: the error budget burns faster than `above` × the SLO's allowance over
  both the last `long_s` and the last `short_s` seconds (bad calls as the trial's
  budget burn counts them, ÷ (`slo.max_error_rate` × calls)): the SRE workbook's
  multiwindow burn-rate alert on the trial's own seconds;
- `wall_clock`: the trial has run `after_s` seconds from its first second;
- `prometheus`: a PromQL expression returns anything (asked once a second, beside the
  samples: its timing is that Prometheus's own).

**When it trips.** A sample at t covers the second (t−1, t] and is taken 0.1 s after
it ends (the runner's `SCRAPE_DELAY_S`), so a condition that holds for the seconds up
to t trips at t + 0.1 s plus the read itself: an `error_rate` guard trips `for_s`
seconds (+ 0.1 s) after the start of the first second whose failed calls ended above
the bound (calls are counted when they end), a `wall_clock` guard at `after_s` + 0.1 s.
A `prometheus` guard sees what that Prometheus sees: its scrape interval and rule
evaluation, plus at most one 1-s poll here.

Pure except `PrometheusPoll` (one HTTP query at a time, off the event loop).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence

from harness.core.errors import BadInput
from harness.drills.analysis.impact import bad_and_total
from harness.drills.analysis.slo import error_rate_series
from harness.drills.plan.guards import (
    BurnRateGuard,
    ErrorRateGuard,
    Guard,
    GuardCondition,
    PrometheusGuard,
    WallClockGuard,
)
from harness.drills.plan.model import Plan
from harness.drills.plan.sections import Slo
from harness.drills.readings.series import RunSeries, Snapshot, build_series

#: How long one question to a Prometheus guard may take (it is asked once a second).
PROMETHEUS_TIMEOUT_S = 0.9
#: The series kinds the series-read conditions read (`slo.error_rate_series`, `impact.bad_and_total`).
_READ = frozenset({"calls", "lat"})


@dataclasses.dataclass(frozen=True)
class Trip:
    """A guard that held: which, when (seconds from the trial's first second) and the value it saw."""

    name: str
    kind: str
    tripped_at_s: float
    value: float
    #: the bound the value crossed (for wall_clock: after_s)
    limit: float
    #: the whole condition in words, with the value
    text: str

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "tripped_at_s": round(self.tripped_at_s, 3),
                "value": round(self.value, 4), "limit": self.limit, "text": self.text}  # fmt: skip


def name_of(g: GuardCondition) -> str:
    return g.name or g.kind


def describe(g: GuardCondition, slo: Slo | None = None) -> str:
    """The condition in words (the live view, the dry run, the report)."""
    if isinstance(g, ErrorRateGuard):
        return f"{g.traffic} error rate > {g.above:.0%} in {g.for_s} s in a row"
    if isinstance(g, BurnRateGuard):
        budget = f" ({g.above * slo.max_error_rate:.1%} of calls failing)" if slo else ""
        return f"{g.traffic} error budget burning > {g.above:g}× over {g.long_s} s and {g.short_s} s{budget}"
    if isinstance(g, WallClockGuard):
        return f"the trial has run {g.after_s:g} s"
    return f"Prometheus {g.expr!r} returns anything"


def window(series: RunSeries, i: int, seconds: float) -> range:
    """Samples ending within the `seconds` before sample i's end: (t[i] − seconds, t[i]]."""
    start = i
    while start > 0 and series.t[start - 1] > series.t[i] - seconds + 1e-9:
        start -= 1
    return range(start, i + 1)


def _burn(bad: Sequence[float], total: Sequence[float], rows: range, budget: float, min_calls: float) -> float | None:
    calls = sum(total[j] for j in rows)
    if calls < max(min_calls, 1e-9):
        return None
    return sum(bad[j] for j in rows) / (budget * calls)


def _tail(series: RunSeries, i: int, n: int) -> RunSeries:
    """The n samples ending at sample i, as a series of their own (each value is its own second's)."""
    lo = max(0, i - n + 1)
    values = {k: v[lo : i + 1] for k, v in series.values.items()}
    return dataclasses.replace(series, t=series.t[lo : i + 1], values=values)


def _consecutive(series: RunSeries, rows: range) -> bool:
    """Whether `rows` are samples a second apart (a missing second breaks a run of them)."""
    return all(abs(series.t[j] - series.t[j - 1] - 1.0) < 0.5 for j in rows[1:])


def evaluate(g: GuardCondition, series: RunSeries, slo: Slo, i: int, trial_t: float) -> Trip | None:
    """Whether guard `g` holds at sample i of `series` (sample i ends `trial_t` s into the trial)."""
    name = name_of(g)
    if isinstance(g, WallClockGuard):
        if trial_t + 1e-9 >= g.after_s:
            return Trip(name, g.kind, trial_t, trial_t, g.after_s, f"the trial ran {trial_t:g} s (≥ {g.after_s:g} s)")
        return None
    if isinstance(g, ErrorRateGuard):
        if i + 1 < g.for_s:
            return None
        tail = _tail(series, i, g.for_s)
        rates = error_rate_series(tail, g.traffic, slo.min_calls, 1)
        if not all(r is not None and r > g.above for r in rates) or not _consecutive(tail, range(len(tail.t))):
            return None
        value = rates[-1]
        return Trip(name, g.kind, trial_t, value, g.above,
                    f"{g.traffic} error rate {value:.1%} > {g.above:.0%} for {g.for_s} s")  # fmt: skip
    if isinstance(g, BurnRateGuard):
        bad, total = bad_and_total(series, slo.model_copy(update={"traffic": g.traffic}))
        long = _burn(bad, total, window(series, i, g.long_s), slo.max_error_rate, slo.min_calls)
        short = _burn(bad, total, window(series, i, g.short_s), slo.max_error_rate, slo.min_calls)
        if long is None or short is None or min(long, short) <= g.above:
            return None
        return Trip(name, g.kind, trial_t, min(long, short), g.above,
                    f"{g.traffic} error budget burning {long:.1f}× over {g.long_s} s and {short:.1f}× over "
                    f"{g.short_s} s (> {g.above:g}×)")  # fmt: skip
    return None  # a prometheus guard is asked by `PrometheusPoll`, not read from the series


def first_trip(guard: Guard, series: RunSeries, slo: Slo, start_t: float = 0.0) -> Trip | None:
    """The first trip over a whole trial's series (`start_t`: the series time of the trial's first second);
    what the runner's per-second watch finds, re-derived offline (conditions in plan order at each second)."""
    for i, t in enumerate(series.t):
        for g in guard.stop_when:
            trip = evaluate(g, series, slo, i, round(t - start_t, 3))
            if trip is not None:
                return trip
    return None


class GuardWatch:
    """The runner's per-second check: the latest sample against every series-read condition.

    `check(samples)` is called once per tick with the scraper's samples so far (cumulative snapshots,
    as `build_series` takes them); it rebuilds only the last seconds the conditions read, which gives
    the same per-second values as the trial's whole series (each value depends on its two samples only).
    """

    def __init__(self, guard: Guard, slo: Slo, start_t: float) -> None:
        self.guard = guard
        self.slo = slo
        #: the sample time of the trial's first second (its baseline): trial time = sample time − start_t
        self.start_t = start_t
        self.read = [g for g in guard.stop_when if not isinstance(g, PrometheusGuard)]
        self.span = 2 + max((g.for_s if isinstance(g, ErrorRateGuard) else g.long_s if isinstance(g, BurnRateGuard)
                             else 1 for g in self.read), default=1)  # fmt: skip
        #: the latest value of each condition (for the live view): name -> text
        self.now: dict[str, str] = {}

    def check(self, samples: Sequence[tuple[float, Snapshot]]) -> Trip | None:
        if not self.read or len(samples) < 2:
            return None
        # only the edge's calls and latencies: what every series-read condition reads (a tenth of the cost)
        recent = [(t, {k: v for k, v in snap.items() if k.kind in _READ}) for t, snap in samples[-self.span :]]
        series = build_series("guard", recent, 0.0, 0.0)
        if not series.t:
            return None
        i = len(series.t) - 1
        trial_t = round(series.t[i] - self.start_t, 3)
        if trial_t <= 0:
            return None
        self._now(series, i, trial_t)
        for g in self.read:
            trip = evaluate(g, series, self.slo, i, trial_t)
            if trip is not None:
                return trip
        return None

    def _now(self, series: RunSeries, i: int, trial_t: float) -> None:
        """The value each condition reads now, in a few words."""
        for g in self.read:
            if isinstance(g, ErrorRateGuard):
                rate = error_rate_series(_tail(series, i, 1), g.traffic, self.slo.min_calls, 1)[0]
                self.now[name_of(g)] = "—" if rate is None else f"{rate:.1%}"
            elif isinstance(g, BurnRateGuard):
                bad, total = bad_and_total(series, self.slo.model_copy(update={"traffic": g.traffic}))
                long = _burn(bad, total, window(series, i, g.long_s), self.slo.max_error_rate, self.slo.min_calls)
                short = _burn(bad, total, window(series, i, g.short_s), self.slo.max_error_rate, self.slo.min_calls)
                self.now[name_of(g)] = " / ".join("—" if b is None else f"{b:.1f}×" for b in (long, short))
            elif isinstance(g, WallClockGuard):
                self.now[name_of(g)] = f"{trial_t:g} s"


def prometheus_guards(plan: Plan, run_url: str | None) -> list[tuple[PrometheusGuard, str]]:
    """Each `prometheus` guard with the Prometheus it asks: its own `url`, the stack's, or the run's
    `--prometheus` (`run_url`); one none of them names is bad input, refused before anything starts."""
    out = []
    for g in plan.guard.stop_when if plan.guard else ():
        if isinstance(g, PrometheusGuard):
            url = g.url or (plan.stack.prometheus if plan.stack else None) or run_url
            if not url:
                raise BadInput(f"guard {name_of(g)!r}: a prometheus guard needs a Prometheus to ask: its url, "
                               "stack.prometheus, or --prometheus auto|URL")  # fmt: skip
            out.append((g, url))
    return out


class PrometheusPoll:
    """Asks each `prometheus` guard's expression once a second; the first non-empty answer trips."""

    def __init__(self, guards: Sequence[tuple[PrometheusGuard, str]], clock: Callable[[], float]) -> None:
        self.guards = list(guards)
        #: seconds into the trial, now
        self.clock = clock
        self.errors = 0
        self._failing_since: dict[str, float] = {}

    def ask(self, g: PrometheusGuard, url: str) -> Trip | None:
        """One question (blocking): a trip when the expression returns series, or when the Prometheus has not
        answered for `unreachable_s`."""
        from harness.procs.prometheus import PrometheusError, api_get

        name = name_of(g)
        try:
            asked = [("query", g.expr), ("timeout", f"{round(PROMETHEUS_TIMEOUT_S * 1000)}ms")]  # PromQL's form
            result = api_get(url, "query", asked, timeout_s=PROMETHEUS_TIMEOUT_S)
        except (PrometheusError, OSError) as exc:
            self.errors += 1
            since = self._failing_since.setdefault(name, self.clock())
            if g.unreachable_s is not None and self.clock() - since >= g.unreachable_s:
                why = str(exc).splitlines()[0]
                return Trip(name, g.kind, self.clock(), self.clock() - since, float(g.unreachable_s),
                            f"Prometheus {url} unanswered for {g.unreachable_s} s ({why})")  # fmt: skip
            return None
        self._failing_since.pop(name, None)
        series = result.get("result") if isinstance(result, dict) else result
        if not series:
            return None
        first = series[0]
        value = first.get("value", [0, "nan"])[1] if isinstance(first, dict) else "nan"
        try:
            value = float(value)
        except (TypeError, ValueError):
            value = float("nan")
        return Trip(name, g.kind, self.clock(), value, 0.0,
                    f"Prometheus {g.expr!r} returned {len(series)} series (first value {value:g})")  # fmt: skip

    async def run(self, on_trip: Callable[[Trip], None]) -> None:
        """Poll until cancelled or one trips (then `on_trip(trip)` and return)."""
        while True:
            started = time.monotonic()
            for g, url in self.guards:
                trip = await asyncio.to_thread(self.ask, g, url)
                if trip is not None:
                    on_trip(trip)
                    return
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))


def trips_of(results: dict) -> list[tuple[str, dict]]:
    """(configuration, trial) of every trial a guard stopped, in the ranking's order."""
    configs = results.get("configs") or {}
    return [(name, t) for name in results.get("ranking") or list(configs)
            for t in configs[name].get("trials") or [configs[name]] if t.get("guard")]  # fmt: skip


def check_trips(results: dict, conditions=()) -> None:
    """Raise `GuardTripped` (exit 5) with one line naming every trip, when a guard stopped a trial; the
    `--fail-on` conditions that held too are named after them (exit 5 outranks their 3)."""
    trips = trips_of(results)
    if not trips:
        return
    from harness.core.errors import GuardTripped
    from harness.drills.analysis.gate import reasons

    said = "; ".join(f"{name} trial {t.get('trial', 1)}: {t['guard']['name']} at {t['guard']['tripped_at_s']:g} s "
                     f"({t['guard']['text']})" for name, t in trips)  # fmt: skip
    skipped = {n: c["summary"]["skipped_trials"] for n, c in results["configs"].items()
               if (c.get("summary") or {}).get("skipped_trials")}  # fmt: skip
    if skipped:
        said += "; skipped: " + ", ".join(f"{n} ({k} trial{'s' if k > 1 else ''})" for n, k in skipped.items())
    held = [str(c) for c in conditions if reasons(c, results)]
    if held:
        said += f" (fail-on {', '.join(held)} held too)"
    raise GuardTripped(f"guard stopped the drill: {said}")
