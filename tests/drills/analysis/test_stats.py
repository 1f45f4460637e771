"""Trials → summary and verdict: breach probability, medians, Fisher's exact test, bootstrap CI (no processes)."""

from __future__ import annotations

import math

import pytest

from harness.drills.analysis import stats
from harness.drills.analysis.results import assemble
from harness.drills.analysis.verdict import judge
from harness.drills.plan.sections import Slo
from tests.drills.synth import make_series


def held() -> dict:
    return {"breached": False, "mttr_s": None, "insufficient_data": False}


def breach(mttr: float | None, bound: float = 30.0) -> dict:
    return {"breached": True, "mttr_s": mttr, "ttd_s": 1.0, "ttr_s": 2.0, "mttr_lower_bound_s": None if mttr else bound}


def nodata() -> dict:
    return {"breached": False, "mttr_s": None, "insufficient_data": True}


def configs(**trials: list[dict]) -> dict:
    return {n: {"trials": t, "summary": stats.summarize(t)} for n, t in trials.items()}


def test_summary_counts_breaches_and_spreads_over_breached_trials_only():
    s = stats.summarize([breach(9.0), breach(11.0), held(), breach(None), nodata()])
    assert s["trials"] == 5 and s["valid_trials"] == 4 and s["insufficient_data"] == 1
    assert s["breaches"] == 3 and s["breach_probability"] == 0.75 and s["never_restored"] == 1
    assert s["mttr_s"] == {"median": 10.0, "min": 9.0, "max": 11.0, "n": 2}
    assert s["ttd_s"]["n"] == 3


def test_outage_is_zero_when_held_and_the_bound_when_never_restored():
    assert stats.outage_s(held()) == 0.0
    assert stats.outage_s(breach(7.0)) == 7.0
    assert stats.outage_s(breach(None, bound=25.0)) == 25.0
    assert stats.outage_s(nodata()) is None


def test_fisher_matches_the_textbook_table():
    # 0/3 vs 3/3: two-sided p = 2 / C(6,3) = 0.1
    assert stats.fisher_p(0, 3, 3, 3) == pytest.approx(0.1)
    assert stats.fisher_p(0, 8, 8, 8) < 0.001
    assert stats.fisher_p(2, 4, 2, 4) == pytest.approx(1.0)


def test_bootstrap_ci_of_the_median_difference_is_seeded_and_covers_the_difference():
    a, b = [1.0, 2.0, 3.0, 2.5, 1.5], [9.0, 10.0, 11.0, 8.0, 12.0]
    diff, lo, hi = stats.bootstrap_median_diff(a, b, seed=1)
    assert diff == 8.0 and 0 < lo <= diff <= hi
    assert stats.bootstrap_median_diff(a, b, seed=1) == (diff, lo, hi)
    _, lo2, hi2 = stats.bootstrap_median_diff([1.0, 9.0, 2.0], [2.0, 1.0, 9.0], seed=1)
    assert lo2 < 0 < hi2


def test_a_clear_difference_names_a_winner():
    order, v = judge(configs(naive=[breach(9.0), breach(10.0), breach(12.0)], resilient=[held(), held(), held()]))
    assert order == ["resilient", "naive"]
    assert v["winner"] == "resilient" and v["conclusive"] is True and v["kind"] == "winner"
    (comp,) = v["comparisons"]
    assert comp["config"] == "resilient" and comp["other"] == "naive" and comp["better"] == ["outage"]
    assert comp["ci95_s"][1] < 0 and comp["median_outage_diff_s"] == -10.0  # resilient − naive
    assert v["text"].startswith("resilient is best: significantly better than every other configuration")
    assert "median outage 10.0 s shorter (95% CI" in v["text"]


def test_overlapping_trials_are_inconclusive_with_an_estimate():
    order, v = judge(configs(a=[breach(8.0), breach(12.0), breach(10.0)], b=[breach(9.0), breach(13.0), breach(11.0)]))
    assert v["winner"] is None and v["conclusive"] is False and order == ["a", "b"]
    assert v["text"].startswith("Inconclusive after 3 trials: no configuration is significantly better")
    # CI -3..+5 s around a 1-s difference: half-width 4 s → about 3·4² = 48 trials
    assert v["trials_needed"] == 48 and "about 48 trials per configuration (45 more)" in v["text"]


def test_one_trial_each_is_never_conclusive():
    _, v = judge(configs(naive=[breach(20.0)], resilient=[held()]))
    assert v["winner"] is None and "Inconclusive after 1 trial:" in v["text"]
    assert v["trials_needed"] >= 3


def test_insufficient_data_never_wins():
    order, v = judge(configs(dead=[nodata(), nodata(), nodata()], naive=[breach(9.0), breach(9.0), breach(9.0)]))
    assert order == ["naive", "dead"]
    assert v["best"] == "naive" and v["winner"] is None and v["set_aside"] == {"dead": "insufficient data"}
    assert v["text"].startswith("Only naive has data to judge") and "rerun: dead (insufficient data)" in v["text"]


def test_regression_needs_significance():
    base = [held(), held(), held(), held()]
    assert stats.regression(base, [breach(9.0), breach(10.0), breach(11.0), breach(8.0)]) is not None
    assert stats.regression(base, [held(), held(), held(), held()]) is None
    assert stats.regression(base, [breach(2.0), held(), held(), held()]) is None  # one bad trial is noise


def test_assemble_keeps_trials_summary_and_a_representative_trial():
    fast = [0.0] * 40
    for t in range(11, 14):
        fast[t - 1] = 0.5
    slow = [0.0] * 40
    for t in range(11, 26):
        slow[t - 1] = 0.5
    mid = [0.0] * 40
    for t in range(11, 20):
        mid[t - 1] = 0.5
    runs = [make_series(x, config="x") for x in (slow, fast, mid)]
    res = assemble({"x": runs}, Slo(), ["gateway", "ledger"]).model_dump()
    c = res["configs"]["x"]
    assert [t["mttr_s"] for t in c["trials"]] == [15.0, 3.0, 9.0]
    assert [t["trial"] for t in c["trials"]] == [1, 2, 3]
    assert c["representative_trial"] == 2 and c["mttr_s"] == 9.0  # the median trial's fields on top
    assert c["summary"]["mttr_s"] == {"median": 9.0, "min": 3.0, "max": 15.0, "n": 3}
    assert res["verdict"]["winner"] is None and math.isclose(c["summary"]["breach_probability"], 1.0)


def test_the_prometheus_cross_check_analyses_every_trial_the_read_back_found(monkeypatch, tmp_path):
    from harness.drills.plan.files import from_dict
    from harness.drills.readings import prom
    from harness.drills.trials.runner import Runner

    calls = []

    def fake_read_drill(url, start, end, **_):
        calls.append((start, end))
        return {"naive": [make_series([0.5 if lo <= t <= hi else 0.0 for t in range(1, 41)], config="naive")
                          for lo, hi in ((11, 14), (11, 30))]}  # fmt: skip

    monkeypatch.setattr(prom, "read_drill", fake_read_drill)
    monkeypatch.setattr("time.sleep", lambda _s: None)
    hops = [{"name": "gateway"}, {"name": "ledger"}]
    plan = from_dict({"configs": ["naive"], "trials": 2, "topology": {"hops": hops}})
    runner = Runner(plan, tmp_path, prometheus=type("P", (), {"url": "http://prom"})(), log=lambda _: None)
    out = runner._from_prometheus(100.0, 350.0)
    assert calls == [(100.0, 350.0)]  # one read: the trials are told apart by the load's trial gauges
    assert [t["mttr_s"] for t in out["configs"]["naive"]["trials"]] == [4.0, 20.0]
