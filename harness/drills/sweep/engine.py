"""Running a sweep: the search asks for a value, the runner runs each configuration that needs it once there.

A point is one ordinary run (`trials.runner.Runner`) of the plan with the axis at that value, one trial of each
configuration that needs one (interleaved as `drill run` does, same seed rules, hits and guards), in its own
directory under OUT/points/. Its trials are added to sweep.json at once. A guard's trip ends the sweep (exit 5)
and a fault that did not land ends it (exit 4), both after saving: neither outcome says anything about the
trigger. `budget_s` stops before a point that would not end within it. Which trials a point's run adds, and
which of them never restored, is `records_of`'s: pure, over the runner's results.
"""

from __future__ import annotations

import asyncio
import math
import pathlib
import time
from collections.abc import Callable

from harness.drills.analysis.trial import never_restored_of
from harness.drills.sweep.axes import plan_at
from harness.drills.sweep.search import search
from harness.drills.sweep.store import Record, Settings, save, tallies
from harness.drills.sweep.summary import summarize

#: a trial's length past its phases (start, settle, analysis), for the first estimate before one is measured
TRIAL_OVERHEAD_S = 4.0


def records_of(results: dict, configs: list[str], value: float, point: str, trials: int,
               tripped: set[tuple[str, int]]) -> list[Record]:  # fmt: skip
    """A point's run (the runner's results.json) as sweep.json's records: each configuration's first `trials`
    trials, never restored as `trial.never_restored_of` says; a configuration without a trial is one record of
    insufficient data. `tripped`: the (configuration, trial) pairs a guard stopped."""
    out = []
    for config in configs:
        for i, trial in enumerate(results["configs"][config]["trials"][:trials] or [{}], 1):
            out.append(Record(
                config=config, value=value, point=point, breached=bool(trial.get("breached")),
                never_restored=never_restored_of(trial),
                insufficient_data=bool(trial.get("insufficient_data")) or not trial,
                mttr_s=trial.get("mttr_s"), budget_burn=trial.get("budget_burn"),
                guard_tripped=(config, i) in tripped,
            ))  # fmt: skip
    return out


class Sweep:
    def __init__(self, settings: Settings, out: pathlib.Path, records: list[Record] | None = None, *,
                 budget_s: float | None = None, log: Callable[[str], None] = print) -> None:  # fmt: skip
        self.settings = settings
        self.out = out
        self.records = list(records or [])
        self.budget_s = budget_s
        self.log = log
        self._trial_s: list[float] = []

    # -- what is left ----------------------------------------------------------------------------------
    def need(self) -> dict[float, list[str]]:
        """Each value some configuration needs a trial at next, with those configurations (plan order)."""
        out: dict[float, list[str]] = {}
        for config in self.settings.configs:
            b = search(self.settings.axis.values, tallies(self.records, config), self.settings.max_trials)
            if not b.done:
                out.setdefault(b.next_value, []).append(config)
        return out

    def _left_trials(self) -> int:
        """An upper bound on the trials still to run: each open configuration's undecided ends, then one point
        per halving of its bracket, each up to max_trials."""
        values, n = self.settings.axis.values, 0
        for config in self.settings.configs:
            t = tallies(self.records, config)
            b = search(values, t, self.settings.max_trials)
            if b.done:
                continue
            ends = sum(1 for v in (values[0], values[-1]) if not t.get(v) or not t[v].decided(self.settings.max_trials))
            width = len(values) if b.recovering is None else values.index(b.failing) - values.index(b.recovering)
            n += (ends + math.ceil(math.log2(max(2, width)))) * self.settings.max_trials
        return n

    def _trial_estimate_s(self, value: float) -> float:
        if self._trial_s:
            return sorted(self._trial_s)[len(self._trial_s) // 2]
        plan = plan_at(self.settings.plan, self.settings.axis, value, quick=self.settings.quick,
                       fixed=self.settings.fixed_axis)
        return plan.phases.total + TRIAL_OVERHEAD_S

    # -- running ---------------------------------------------------------------------------------------
    def run(self) -> dict:
        started = time.monotonic()
        stopped = None
        self.out.mkdir(parents=True, exist_ok=True)
        self.write(None)
        while need := self.need():
            value = min(need)
            configs = need[value]
            per_trial = self._trial_estimate_s(value)
            if self.budget_s is not None and time.monotonic() - started + per_trial * len(configs) > self.budget_s:
                stopped = f"the {self.budget_s / 60:g}-min budget would end before the next point"
                break
            left = self._left_trials() * per_trial
            when = f"{left:.0f} s" if left < 90 else f"{left / 60:.0f} min"
            points = len({r.point for r in self.records})
            row = "" if self.settings.fixed is None else f" ({self.settings.axis2.key}={self.settings.fixed:g})"
            self.log(f"sweep: {self.settings.axis.key}={value:g}{row} for {', '.join(configs)} ({points} points, "
                     f"{len(self.records)} trials done; at most about {when} left)")  # fmt: skip
            self._point(value, configs)
        summary = self.write(stopped)
        return summary

    def at(self, value: float) -> dict:
        """Every configuration's trials at one value, up to the trials cap, without bisecting (a point of a sweep
        run elsewhere: `drill sweep --at`, merged by `--collect`)."""
        self.out.mkdir(parents=True, exist_ok=True)
        self.log(f"sweep: {self.settings.axis.key}={value:g} for {', '.join(self.settings.configs)}, "
                 f"{self.settings.max_trials} trials each")  # fmt: skip
        self._point(value, list(self.settings.configs), trials=self.settings.max_trials)
        return self.write(None)

    def _point(self, value: float, configs: list[str], trials: int = 1) -> None:
        from harness.core.errors import FaultNotLanded
        from harness.drills.analysis.landing import problem
        from harness.drills.trials.guard import check_trips, trips_of
        from harness.drills.trials.preflight import Preflight
        from harness.drills.trials.runner import Runner

        s = self.settings
        plan = plan_at(s.plan, s.axis, value, quick=s.quick, only=configs, trials=trials, seed=s.seed,
                       fixed=s.fixed_axis)
        index = len({r.point for r in self.records}) + 1
        name = f"{index:03d}-{s.axis.key}={value:g}"
        where = self.out / "points" / name
        preflight = Preflight(plan, out=str(where), prometheus="off", dry=False)
        preflight.local()
        preflight.sources(None)
        t0 = time.monotonic()
        runner = Runner(plan, where, log=lambda text: self.log(f"  {text}"), preflight=preflight)
        results = asyncio.run(runner.run())
        self._trial_s.append((time.monotonic() - t0) / max(1, len(configs) * trials))
        tripped = {(n, t.get("trial", 1)) for n, t in trips_of(results)}
        self.records += records_of(results, configs, value, f"points/{name}", trials, tripped)
        self.write(None)
        check_trips(results)  # exit 5, after saving: a trip says nothing about the trigger
        missed = problem(results)
        if missed:
            raise FaultNotLanded(f"sweep: at {s.axis.key}={value:g}: {missed}")

    def write(self, stopped: str | None) -> dict:
        """sweep.json and sweep.html from the trials so far (`stopped`: why the sweep ended unfinished)."""
        summary = summarize(self.settings.axis, self.records, self.settings.configs, self.settings.max_trials,
                            stopped=stopped)  # fmt: skip
        save(self.out, self.settings, self.records, summary)
        from harness.drills.sweep.page import write_page

        write_page(self.out, self.settings, summary)
        return summary
