"""One trial's typed result (`trial.TrialResult`): the rule for "never restored" in one place, results.json's
entry exactly as the runner has always written it (a real run replayed through the analysis), and nothing
else to write to."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.drills import read_series_document
from harness.drills.analysis import stats
from harness.drills.analysis import trial as a
from harness.drills.plan.sections import Slo
from tests.conftest import ROOT
from tests.drills.synth import make_series, rates, read_back

SLO = Slo(max_error_rate=0.05, hold_s=3)
#: a real `drill run metastable` (5 trials of 4 configurations; docs/resilience.md cites it): its series.json and
#: the results.json the runner wrote from them
REAL = ROOT / "benchmarks" / "results" / "metastable-5trials"


def _behind(spec: dict) -> a.RunSeries:
    s = make_series(rates(spec))
    s.planned_rps = {"organic": 500.0, "drill": 10.0}  # make_series sends 90 + 10 req/s: the load fell behind
    return s


@pytest.mark.parametrize(("name", "series", "never"), [
    ("breached, never restored", make_series(rates({(12, 40): 0.5})), True),
    ("breached, restored", make_series(rates({(11, 14): 0.5})), False),
    ("breached, no MTTR, insufficient data", _behind({(12, 40): 0.5}), False),
    ("held", make_series(rates({})), False),
    ("a post-fault breach never restored", make_series(rates({(30, 40): 0.5})), True),
])  # fmt: skip
def test_never_restored_is_one_rule_asked_of_a_result_and_of_a_saved_trial_alike(name, series, never) -> None:
    res = a.analyze_run(series, SLO)
    assert res.never_restored is never, name
    assert res.never_restored == (res.breached and res.mttr_s is None and not res.insufficient_data)
    saved = json.loads(json.dumps(res.to_dict()))  # as results.json holds it, read back
    assert a.never_restored_of(saved) is never
    assert a.never_restored_of({"trial": 1, **saved, "guard": None}) is never  # what the runner adds changes nothing
    assert stats.summarize([saved])["never_restored"] == int(never)


def test_a_trial_that_never_ran_is_not_never_restored() -> None:
    assert a.never_restored_of({}) is False
    assert a.is_never_restored(True, None, False) and not a.is_never_restored(True, 3.0, False)
    assert not a.is_never_restored(True, None, True) and not a.is_never_restored(False, None, False)


def test_a_real_run_replayed_gives_the_trials_of_its_results_json_exactly() -> None:
    """Same fields, same values, same order: results.json's readers see what they always saw."""
    header, trials = read_series_document(json.loads(REAL.with_suffix(".series.json").read_text()))
    saved = json.loads(REAL.with_suffix(".results.json").read_text())
    slo = Slo(**saved["slo"])
    assert saved["hops"] == header["hops"] and sum(map(len, trials.values())) == 20
    for name, runs in trials.items():
        kept = saved["configs"][name]["trials"]
        for res, trial in zip((a.analyze_run(s, slo, saved["hops"]) for s in runs), kept, strict=True):
            got = res.to_dict()
            assert got == {k: trial[k] for k in got}, (name, trial["trial"])
            assert list(got) == [k for k in trial if k in got], "results.json's order"
        never = [a.analyze_run(s, slo, saved["hops"]).never_restored for s in runs]
        assert sum(never) == saved["configs"][name]["summary"]["never_restored"] == (5 if name == "naive" else 0)


def test_a_read_back_carries_its_uncertainty_last_and_an_exact_series_none() -> None:
    exact = a.analyze_run(make_series(rates({(11, 14): 0.5})), SLO)
    assert exact.uncertainty_s is None and exact.resolution_s is None
    assert list(exact.to_dict())[-1] == "fd_peaks"
    back = a.analyze_run(read_back(make_series(rates({(11, 14): 0.5})), 0.5, resolution=2.0), SLO)
    assert list(back.to_dict())[-2:] == ["uncertainty_s", "resolution_s"] and back.resolution_s == 2.0
    assert back.to_dict()["uncertainty_s"] == back.uncertainty_s and back.uncertainty_s["mttr_s"] == 1.0


def test_the_result_is_read_only_and_its_dict_a_copy() -> None:
    res = a.analyze_run(make_series(rates({(30, 40): 0.5})), SLO)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.mttr_s = 3.0  # type: ignore[misc]
    d = res.to_dict()
    assert d["post_fault_breach"] == {"start_s": 10.0, "duration_s": None} == dataclasses.asdict(res.post_fault_breach)
    d["amplification_by_hop"]["ledger"] = 99.0
    assert res.amplification_by_hop["ledger"] != 99.0
