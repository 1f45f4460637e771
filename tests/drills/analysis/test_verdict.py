"""The verdict names what users felt (issue 21): a winner only when it is better on recovery or budget burn
and worse on neither, trade-offs named, configurations without data set aside — synthetic trials."""

from __future__ import annotations

import re

from harness.drills.analysis import stats
from harness.drills.analysis.results import assemble
from harness.drills.plan.sections import Slo
from harness.drills.report import cells
from harness.drills.report import page as report
from tests.drills.synth import make_series, rates

SLO = Slo(max_error_rate=0.05, hold_s=3)


def run(slo: Slo = SLO, **spec: list) -> dict:
    """results.json of synthetic trials: per configuration, one rate spec (or None: no calls) per trial."""
    series = {
        n: [make_series(rates(s) if s is not None else [None] * 40, config=n) for s in specs]
        for n, specs in spec.items()
    }
    return assemble(series, slo, ["gateway", "ledger"], plan_name="synthetic").model_dump()


NO_SIGNED_LONGER = re.compile(r"-\d+(\.\d+)? s (longer|shorter)")


def test_the_readmes_case_never_names_the_heavier_burning_configuration_best():
    # the README's demo: resilient held once and breached twice at ~85 % errors, once never restored;
    # naive breached every time at ~30 % and recovered. Recovery is not significantly different
    # (Fisher p = 1, the outage CI spans 0); resilient's budget burn is far higher in two trials of three.
    r = run(
        resilient=[{}, {(11, 22): 0.8}, {(11, 40): 0.9}],
        naive=[{(11, 19): 0.3}, {(11, 20): 0.3}, {(11, 19): 0.35}],
    )
    v = r["verdict"]
    assert "resilient is best" not in v["text"] and "resilient looks best" not in v["text"]
    assert v["winner"] is None and v["kind"] == "inconclusive"
    assert r["ranking"][0] == "naive"  # the rule cannot separate them: lower burn first on a tie of places
    # the same shape with recovery equal and burn significantly worse: the lighter burner wins
    r = run(resilient=[{(11, 19): 0.9}] * 3, naive=[{(11, 19): 0.3}] * 3)
    v = r["verdict"]
    assert v["winner"] == "naive" and r["ranking"] == ["naive", "resilient"]
    (c,) = v["comparisons"]
    assert c["better"] == ["budget_burn"] and c["worse"] == [] and c["fisher_p"] == 1.0
    assert v["text"].startswith(
        "naive is best: significantly better than every other configuration on recovery or error budget burned, "
        "and worse on neither (vs resilient: breaches 3/3 vs 3/3 (Fisher p=1), median outage the same"
    )


def test_faster_recovery_with_a_significantly_worse_burn_is_a_named_trade_off():
    r = run(
        resilient=[{(11, 13): 0.9}, {(11, 13): 0.9}, {(11, 14): 0.9}],  # out 3-4 s, 90 % errors
        naive=[{(11, 20): 0.1}, {(11, 20): 0.1}, {(11, 21): 0.1}],  # out 10-11 s, 10 % errors
    )
    v = r["verdict"]
    # resilient: 270-360 bad calls of 3000 (allowance 150) = 1.8-2.4×; naive: 100-110 = 0.67-0.73×
    assert "resilient recovers 7.0 s faster (median outage 3.0 vs 10.0 s, 95% CI -" in v["text"]
    assert "but burns 2.7× the error budget naive burns (1.80 vs 0.67, 95% CI of the difference +" in v["text"]
    assert v["winner"] is None and v["conclusive"] is False and v["kind"] == "tradeoff"
    (trade,) = v["tradeoffs"]
    assert sorted(trade["configs"]) == ["naive", "resilient"] and trade["text"] in v["text"]
    (c,) = v["comparisons"]
    assert sorted([*c["better"], *c["worse"]]) == ["budget_burn", "outage"]  # one each way
    assert v["text"].startswith("No configuration is best (better than every other on recovery or error budget")
    assert not NO_SIGNED_LONGER.search(v["text"])


def test_a_configuration_whose_breaches_all_come_after_the_fault_is_not_held():
    # every trial holds through the fault and its grace, then breaks 6 s after fault-off (a retry storm
    # that builds after recovery): five of five breached, never "held", and a post-fault column to show it
    r = run(late=[{(26, 29): 0.5}] * 5, calm=[{}] * 5)
    late = r["configs"]["late"]
    assert late["summary"]["breaches"] == 5 and late["summary"]["post_fault_breaches"] == 5
    assert all(t["ttd_s"] is None and t["mttr_s"] == 4.0 for t in late["trials"])
    assert cells.mttr_text(late) == "4.0 s (breached 5/5)" and cells.post_fault_text(late) == "5/5"
    assert r["verdict"]["winner"] == "calm" and r["ranking"] == ["calm", "late"]  # Fisher p = 0.008
    assert "breaches 0/5 vs 5/5" in r["verdict"]["text"]


def test_a_configuration_without_data_does_not_stop_a_significant_comparison_of_the_others():
    r = run(resilient=[{}] * 5, naive=[{(11, 25): 0.5}] * 5, dead=[None] * 5)
    v = r["verdict"]
    assert "more trials are unlikely" not in v["text"] and "Inconclusive" not in v["text"]
    assert v["winner"] == "resilient" and v["conclusive"] is True
    assert v["set_aside"] == {"dead": "no calls in the fault window"} and r["ranking"][-1] == "dead"
    assert v["text"].endswith("Set aside, to rerun: dead (no calls in the fault window).")


def test_differences_are_phrased_with_their_sign():
    r = run(fast=[{(11, 13): 0.5}, {(11, 14): 0.5}, {(11, 12): 0.5}], slow=[{(11, 20): 0.5}, {(11, 22): 0.5}, {}])
    text = r["verdict"]["text"]
    assert "s shorter (95% CI" in text and not NO_SIGNED_LONGER.search(text)
    c = r["verdict"]["comparisons"][0]
    assert c["median_outage_diff_s"] < 0 and c["config"] == "fast"  # fast − slow


def test_the_table_order_follows_the_rule():
    # best beats both; between the two others a trade-off: faster but burning more
    r = run(
        best=[{}] * 3,
        quick=[{(11, 13): 0.9}, {(11, 13): 0.9}, {(11, 14): 0.9}],
        gentle=[{(11, 20): 0.1}, {(11, 20): 0.1}, {(11, 21): 0.1}],
    )
    v = r["verdict"]
    assert v["winner"] == "best" and r["ranking"][0] == "best"
    assert [t["configs"] for t in v["tradeoffs"]] in ([["quick", "gentle"]], [["gentle", "quick"]])
    assert {(c["config"], c["other"]): c["outcome"] for c in v["comparisons"]}[("best", r["ranking"][1])] == "better"


def test_pairwise_comparisons_are_one_test_seen_from_both_sides():
    r = run(a=[{(11, 13): 0.9}] * 3, b=[{(11, 20): 0.1}] * 3)
    (c,) = r["verdict"]["comparisons"]
    from harness.drills.analysis.verdict import _mirror

    m = _mirror(c)
    assert m["median_outage_diff_s"] == -c["median_outage_diff_s"] and m["ci95_s"] == [-x for x in c["ci95_s"][::-1]]
    assert (m["better"], m["worse"]) == (c["worse"], c["better"])


def test_regression_counts_a_worse_budget_burn():
    base = run(naive=[{(11, 19): 0.3}] * 3)["configs"]["naive"]["trials"]
    worse = run(naive=[{(11, 19): 0.9}] * 3)["configs"]["naive"]["trials"]
    why = stats.regression(base, worse)
    assert why is not None and why.startswith("median budget burn")
    assert stats.regression(base, base) is None


def test_a_trade_off_names_each_measure_with_its_numbers():
    from harness.drills.analysis.verdict import tradeoff_text

    c = {"breaches": [0, 6], "other_breaches": [6, 6], "fisher_p": 0.0022, "median_outage_s": [0.0, 4.0],
         "median_outage_diff_s": -4.0, "ci95_s": [-5.0, -3.0], "ci_trusted": True, "budget_burn": [2.5, 0.5],
         "budget_burn_diff": 2.0, "budget_burn_ci95": [1.5, 2.5], "burn_ci_trusted": True,
         "better": ["breaches", "outage"], "worse": ["budget_burn"], "outcome": "tradeoff"}  # fmt: skip
    assert tradeoff_text("a", "b", c) == (
        "a breaches less often (0/6 vs 6/6 trials, Fisher p=0.0022) and recovers 4.0 s faster (median outage "
        "0.0 vs 4.0 s, 95% CI -5.0 to -3.0 s) but burns 5× the error budget b burns (2.50 vs 0.50, 95% CI of "
        "the difference +1.50 to +2.50)"
    )
    # seen from b, the same pair reads the same way round: the one that recovers better first
    from harness.drills.analysis.verdict import _mirror

    assert tradeoff_text("b", "a", _mirror(c)) == tradeoff_text("a", "b", c)


def test_an_inconclusive_verdict_says_which_configurations_had_fewer_trials_with_data():
    r = run(a=[{(11, 19): 0.3}] * 3, b=[{(11, 19): 0.9}, {(11, 19): 0.9}, None])
    v = r["verdict"]
    assert v["winner"] is None and v["set_aside"] == {}  # b has data: compared on its two trials
    assert v["text"].startswith("Inconclusive after 3 trials (b: 2 with enough data): no configuration is")
    assert v["text"].endswith("about 3 trials with enough data per configuration (1 more) would likely settle it.")


# --- a tie at the top ---------------------------------------------------------------------------------------
def _held(config: str, drill_failed: float, ledger_rps: float):
    """A trial that held the organic SLO throughout; `drill_failed` of all calls are drill calls that failed
    (the drill is 10 % of the load), and the ledger saw `ledger_rps` per 100 edge calls/s (amplification)."""
    from harness.drills.plan.outputs import SeriesKey as K

    s = make_series([0.0] * 40, config=config, hops={"gateway": [100.0] * 40, "ledger": [ledger_rps] * 40})
    ok = K("calls", traffic="drill", status="OK", mode="none")
    bad = K("calls", traffic="drill", status="UNAVAILABLE", mode="none")
    s.values[bad] = [100 * drill_failed] * 40
    s.values[ok] = [10 - 100 * drill_failed] * 40
    return s


def test_a_tie_at_the_top_is_said_first_with_the_secondary_measures_named_as_such():
    # slow-half, 3 trials each: naive-long-timeout breached 3/3 for 22 s at organic error 18.89 %, a budget burn
    # of 22 × 90 × 0.1889 bad calls ÷ (5 % of 30 × 90 calls) = 2.77×; resilient and resilient-p2c held 3/3 with
    # drill calls failing (success 94.7 % and 99.7 % of all calls) and the ledger at 1.05× and 1.00× the edge.
    # Fisher on 0/3 vs 3/3 is p = 0.1, but the outage (0 vs 22 s) and burn CIs exclude 0 at 3 + 3: each
    # resilient beats naive; between the two nothing differs on recovery or burn.
    slo = Slo(max_error_rate=0.05, hold_s=3, traffic="organic")
    series = {
        "naive-long-timeout": [make_series(rates({(11, 32): 0.1889}), config="naive-long-timeout")] * 3,
        "resilient": [_held("resilient", 0.053, 105.0)] * 3,
        "resilient-p2c": [_held("resilient-p2c", 0.003, 100.0)] * 3,
    }
    r = assemble(series, slo, ["gateway", "ledger"], plan_name="slow-half").model_dump()
    v = r["verdict"]
    assert v["kind"] == "tie" and v["winner"] is None and v["conclusive"] is True
    assert v["top"] == ["resilient", "resilient-p2c"] and r["ranking"][-1] == "naive-long-timeout"
    assert v["text"].startswith(
        "resilient and resilient-p2c tie at the top after 3 trials: both beat naive-long-timeout (0/3 vs 3/3 "
        "breaches, median outage 22.0 s shorter, budget burn 0.00× vs 2.77×), and they do not differ "
        "significantly on recovery or error budget burned (resilient vs resilient-p2c: 0/3 vs 0/3 breaches, "
        "median outage the same, budget burn 0.00× vs 0.00×). "
    )
    assert v["text"].endswith(
        "Secondary measures, which the rule does not judge (no winner by them): success rate resilient 94.7 %, "
        "resilient-p2c 99.7 %; amplification resilient 1.05×, resilient-p2c 1.00×."
    )
    assert "Inconclusive" not in v["text"] and "more trials" not in v["text"] and " is best" not in v["text"]
    # the report: a good-news box, both tied rows highlighted
    page = report.render(r, {n: s[0] for n, s in series.items()})
    assert 'class="verdict good"' in page and page.count('<tr class="best"') == 2


def test_a_tie_needs_every_tied_one_to_beat_every_other():
    # a and b both held; c breached briefly, once: nobody is significantly better than c, so there is no tie
    # at the top, and the run stays inconclusive
    r = run(a=[{}] * 3, b=[{}] * 3, c=[{}, {}, {(11, 13): 0.3}])
    v = r["verdict"]
    assert v["kind"] == "inconclusive" and v["top"] == [] and v["conclusive"] is False
    # a winner is the top alone
    r = run(a=[{}] * 3, b=[{(11, 25): 0.5}] * 3)
    assert r["verdict"]["top"] == ["a"] == [r["verdict"]["winner"]]
