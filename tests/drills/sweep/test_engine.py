"""`sweep/engine.py`: what a point's run adds to sweep.json, what a resumed sweep asks for, a budget, and a trip or
a missed fault ending the sweep after saving. The runner is stubbed at its boundary (a `Runner` whose trials are
synthetic series through the real analysis) or at `Sweep._point`; the plan, search, store and summary are real."""

from __future__ import annotations

import json

import pytest

from harness.core.errors import FaultNotLanded, GuardTripped
from harness.drills.analysis.results import assemble
from harness.drills.analysis.trial import analyze_run
from harness.drills.plan.sections import Slo
from harness.drills.sweep.engine import Sweep, records_of
from harness.drills.sweep.search import BoundaryKind
from harness.drills.sweep.store import Record, load
from tests.drills.sweep.synthetic import SyntheticSweep, settings
from tests.drills.synth import make_series, rates

QUIET = {"log": lambda _: None}


# --- a point's records ----------------------------------------------------------------------------------------
def _trial(spec: dict, *, planned: float | None = None) -> dict:
    """A trial as results.json holds it: the analysis of a synthetic series (`planned`: the organic rate the load
    was asked for; make_series sends 90/s)."""
    series = make_series(rates(spec))
    if planned is not None:
        series.planned_rps = {"organic": planned, "drill": 10.0}
    return {"trial": 1, **analyze_run(series, Slo(max_error_rate=0.05, hold_s=3)).to_dict()}


def test_a_points_records_say_never_restored_as_the_analysis_does() -> None:
    """Breached and never restored; breached and restored; breached with no MTTR but too little data to say (the
    load fell behind): not never restored; held; a configuration the run has no trial of (one record of
    insufficient data); a trial a guard stopped."""
    never, restored, held = _trial({(12, 40): 0.5}), _trial({(11, 14): 0.5}), _trial({})
    nodata = _trial({(12, 40): 0.5}, planned=500.0)
    assert never["breached"] and never["mttr_s"] is None and restored["mttr_s"] == 4.0
    assert nodata["breached"] and nodata["mttr_s"] is None and nodata["insufficient_data"]
    results = {"configs": {"naive": {"trials": [never, {**restored, "trial": 2}]}, "budget": {"trials": [nodata]},
                           "calm": {"trials": [held]}, "gone": {"trials": []}}}  # fmt: skip
    got = records_of(results, ["naive", "budget", "calm", "gone"], 3.0, "points/001-x=3", 2, {("naive", 2)})
    assert [(r.config, r.breached, r.never_restored, r.insufficient_data, r.mttr_s, r.guard_tripped)
            for r in got] == [("naive", True, True, False, None, False), ("naive", True, False, False, 4.0, True),
                              ("budget", True, False, True, None, False), ("calm", False, False, False, None, False),
                              ("gone", False, False, True, None, False)]  # fmt: skip
    assert {(r.value, r.point) for r in got} == {(3.0, "points/001-x=3")}
    assert [r.budget_burn for r in got[:2]] == [never["budget_burn"], restored["budget_burn"]]
    assert len(records_of(results, ["naive"], 3.0, "p", 1, set())) == 1  # a point's first `trials` trials only


class _StubRunner:
    """The runner at its boundary: a plan in, results.json out. Each configuration's trial is a synthetic series
    whose fault lasts the plan's `phases.fault`; `naive` never restores once the fault lasts 3 s or more, `budget`
    restores after any fault. `guard_at` / `missed_at`: a value where naive's trial is stopped by a guard, or
    where its fault did not land."""

    guard_at: float | None = None
    missed_at: float | None = None
    plans: list = []

    def __init__(self, plan, out, *, log, preflight) -> None:
        self.plan = plan
        _StubRunner.plans.append(plan)

    async def run(self) -> dict:
        fault = self.plan.phases.fault
        off = 10 + fault
        series, extras = {}, {}
        for v in self.plan.variants:
            tail = 40 if v.name == "naive" and fault >= 3 else int(off)
            runs = [make_series(rates({(11, tail): 0.5}), config=v.name, fault_on=10, fault_off=off)
                    for _ in range(self.plan.trials)]  # fmt: skip
            if v.name == "naive" and fault == self.guard_at:
                runs[0].guard = {"name": "wall_clock", "kind": "wall_clock", "tripped_at_s": 12.0, "value": 12.0,
                                 "limit": 12.0, "text": "the trial ran 12 s (≥ 12 s)"}  # fmt: skip
            if v.name == "naive" and fault == self.missed_at:
                extras[v.name] = {"hits": {"as_planned": False, "note": "no drill call reached the service"}}
            series[v.name] = runs
        return assemble(series, self.plan.slo, self.plan.hop_names, plan=self.plan, extras=extras).model_dump()


class _StubPreflight:
    def __init__(self, plan, **_) -> None: ...
    def local(self) -> None: ...
    def sources(self, _) -> None: ...


@pytest.fixture
def stub_runner(monkeypatch):
    monkeypatch.setattr("harness.drills.trials.runner.Runner", _StubRunner)
    monkeypatch.setattr("harness.drills.trials.preflight.Preflight", _StubPreflight)
    _StubRunner.guard_at = _StubRunner.missed_at = None
    _StubRunner.plans = []
    return _StubRunner


def test_each_point_is_the_plan_at_that_value_and_its_trials_are_the_analysis_outcomes(tmp_path, stub_runner):
    out = tmp_path / "sweep"
    summary = Sweep(settings(), out, **QUIET).run()
    naive, budget = summary["boundaries"]["naive"], summary["boundaries"]["budget"]
    assert (naive["kind"], naive["recovering"], naive["failing"]) == (BoundaryKind.BETWEEN, 2, 3)
    assert budget["kind"] == BoundaryKind.ABOVE_RANGE
    _, records = load(out)
    assert records and all(r.never_restored == (r.config == "naive" and r.value >= 3) for r in records)
    for plan in stub_runner.plans:  # the plan rebuilt at each value: the quick phases, only who needs a trial
        assert plan.phases.warmup == 3 and plan.trials == 1 and {v.name for v in plan.variants} <= {"naive", "budget"}
    values = [r.value for r in records]
    assert sorted({p.phases.fault for p in stub_runner.plans}) == sorted(set(values))
    first = records[0].point
    assert first == "points/001-phases.fault=1" and (out / first).is_dir() is False  # the stub writes nothing there


@pytest.mark.parametrize(("stub", "error", "says"), [
    ("guard_at", GuardTripped, "guard stopped the drill: naive trial 1: wall_clock at 12 s"),
    ("missed_at", FaultNotLanded, "sweep: at phases.fault=20: the fault did not land as planned (naive #1)"),
])  # fmt: skip
def test_a_trip_or_a_missed_fault_ends_the_sweep_after_saving_the_point(tmp_path, stub_runner, stub, error, says):
    setattr(stub_runner, stub, 20.0)  # the axis' high end: asked once the low end is decided (4 points)
    out = tmp_path / "sweep"
    with pytest.raises(error, match=says.replace("(", r"\(").replace(")", r"\)")):
        Sweep(settings(), out, **QUIET).run()
    _, records = load(out)
    assert [(r.config, r.value) for r in records] == [("naive", 1), ("budget", 1)] * 4 + [("naive", 20), ("budget", 20)]
    assert [r.guard_tripped for r in records] == [False] * 8 + [stub == "guard_at", False]
    assert records[-1].point == "points/005-phases.fault=20"


# --- what is left, resuming, the budget ------------------------------------------------------------------------
def test_need_asks_each_configuration_for_its_next_value_and_nothing_more(tmp_path) -> None:
    s = settings()
    records = ([Record("naive", 1, "p", False, False, False, 3.0, None)] * 4
               + [Record("naive", 20, "p", True, True, False, None, None)] * 4
               + [Record("budget", 1, "p", False, False, False, 3.0, None)] * 2)  # fmt: skip
    need = Sweep(s, tmp_path, records, **QUIET).need()
    assert need == {10: ["naive"], 1: ["budget"]}  # naive halves its bracket; budget's low end needs 2 more trials
    done = records + [Record("budget", 1, "p", False, False, False, 3.0, None)] * 2
    done += [Record("budget", 20, "p", False, False, False, 3.0, None)] * 4
    assert Sweep(s, tmp_path, done, **QUIET).need() == {10: ["naive"]}  # budget recovers at the high end: done


def test_a_killed_sweep_resumes_from_its_saved_points_losing_and_repeating_nothing(tmp_path) -> None:
    bounds = {"naive": 3, "budget": 40}
    whole = SyntheticSweep(settings(), tmp_path / "whole", boundaries=bounds, **QUIET)
    whole.run()
    out = tmp_path / "killed"
    first = SyntheticSweep(settings(), out, boundaries=bounds, kill_after=3, **QUIET)
    with pytest.raises(KeyboardInterrupt):
        first.run()
    saved_settings, records = load(out)  # what --resume reads
    assert len(records) == sum(len(c) for _, c in first.ran)  # every trial run before the kill was saved
    second = SyntheticSweep(saved_settings, out, records, boundaries=bounds, **QUIET)
    summary = second.run()
    assert first.ran + second.ran == whole.ran  # the same trials in the same order: none lost, none repeated
    saved = json.loads((out / "sweep.json").read_text())
    assert saved["complete"] and summary["verdict"] == whole.run()["verdict"]
    assert saved["boundaries"]["naive"]["kind"] == "between"
    assert (saved["boundaries"]["naive"]["recovering"], saved["boundaries"]["naive"]["failing"]) == (2, 3)
    assert saved["boundaries"]["budget"]["kind"] == "above_range"


def test_a_budget_stops_before_a_point_that_would_overrun_and_says_what_is_known(tmp_path) -> None:
    sweep = SyntheticSweep(settings(), tmp_path / "b", boundaries={"naive": 3, "budget": 40}, budget_s=0.001, **QUIET)
    summary = sweep.run()
    assert sweep.ran == [] and not summary["complete"] and "budget" in summary["stopped"]
    assert summary["verdict"].startswith("naive: not bracketed yet (no trial yet)")
    assert summary["verdict"].endswith(f"(stopped: {summary['stopped']})")


def test_at_runs_every_configuration_to_the_cap_at_one_value_without_bisecting(tmp_path) -> None:
    sweep = SyntheticSweep(settings(), tmp_path / "at", boundaries={"naive": 3, "budget": 40}, **QUIET)
    summary = sweep.at(7)
    assert sweep.ran == [(7, ("naive", "budget"))]
    assert [(r.config, r.value) for r in sweep.records] == [("naive", 7)] * 4 + [("budget", 7)] * 4
    assert not summary["complete"] and [p["value"] for p in summary["points"]] == [7]
