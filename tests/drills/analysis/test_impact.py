"""What users felt, per trial (issue 21): budget burn, seconds outside the SLO, post-fault breaches as
outages, and the read-back's ± on every time — all on synthetic series, no processes."""

from __future__ import annotations

import pytest

from harness.drills.analysis import impact
from harness.drills.analysis import trial as a
from harness.drills.plan.sections import Slo
from tests.drills.synth import make_series, rates, read_back

SLO = Slo(max_error_rate=0.05, hold_s=3)


# --- budget burn ---------------------------------------------------------------------------------------
def test_budget_burn_is_bad_calls_over_the_allowance_from_fault_on_to_the_end():
    # 100 calls/s; t = 11..14 fail at 50 %: 200 bad calls. Fault-on at 10, run end at 40: 30 s × 100 calls,
    # so the SLO allows 5 % × 3000 = 150 — the trial burned 200 / 150 of it. A warm-up breach does not count.
    res = a.analyze_run(make_series(rates({(3, 4): 0.9, (11, 14): 0.5})), SLO)
    assert res.budget_burn == pytest.approx(200 / 150, abs=1e-3)
    assert res.bad_calls == pytest.approx(200.0)


def test_budget_burn_counts_the_slos_traffic_and_never_cancelled_calls():
    slo = Slo(max_error_rate=0.05, hold_s=3, traffic="organic")  # 90 organic calls/s of the 100
    plain = a.analyze_run(make_series(rates({(11, 14): 0.5})), slo)
    assert plain.budget_burn == pytest.approx((4 * 45) / (0.05 * 30 * 90), abs=1e-3)
    cancelled = a.analyze_run(make_series(rates({(11, 14): 0.5}), cancelled=500.0), slo)
    assert cancelled.budget_burn == plain.budget_burn


def test_under_a_latency_slo_slow_calls_are_bad_and_a_timed_out_call_counts_once():
    n = 40
    slow = [0.2 if 11 <= t <= 14 else 0.0 for t in range(1, n + 1)]  # 20 calls/s succeed in 1-2 s
    dead = [0.1 if 11 <= t <= 14 else 0.0 for t in range(1, n + 1)]  # 10 calls/s time out in 2-3 s
    s = make_series(rates({}), slow=slow, deadline=dead)
    errors_only = a.analyze_run(s, SLO)
    assert errors_only.bad_calls == pytest.approx(40.0)  # the timed-out calls are server faults
    latency = a.analyze_run(s, Slo(max_error_rate=0.05, max_p99_s=1.0, hold_s=3))
    # slower than 1 s: 30 calls/s (the slow OK ones and the timed-out ones); the timed-out ones are
    # already bad, so 20 + 10 per second, not 20 + 10 + 10
    assert latency.bad_calls == pytest.approx(120.0)
    assert latency.budget_burn == pytest.approx(120 / (0.05 * 3000), abs=1e-3)


def test_slow_calls_are_read_from_the_buckets_like_histogram_quantile():
    buckets = [(0.1, 50.0), (1.0, 100.0), (float("inf"), 100.0)]
    assert impact.calls_slower_than(buckets, 1.0) == 0.0  # a bucket edge: nothing above it
    assert impact.calls_slower_than(buckets, 0.1) == 50.0
    # 0.55 s is halfway through (0.1, 1]: half its 50 calls are taken to be slower
    assert impact.calls_slower_than(buckets, 0.55) == pytest.approx(25.0)
    assert impact.calls_slower_than([(1.0, 10.0), (float("inf"), 14.0)], 2.0) == 4.0  # beyond the last bound


def test_an_slo_that_allows_no_error_has_no_budget_to_burn_but_still_counts_bad_seconds():
    res = a.analyze_run(make_series(rates({(11, 14): 0.5})), Slo(max_error_rate=0.0, hold_s=3))
    assert res.budget_burn is None and res.bad_calls == pytest.approx(200.0)
    assert res.bad_s == 4.0


# --- seconds outside the SLO, post-fault breaches -----------------------------------------------------------
def test_bad_seconds_count_the_post_fault_breach_and_a_never_restored_tail():
    res = a.analyze_run(make_series(rates({(11, 14): 0.5, (32, 33): 0.5})), SLO)
    assert res.mttr_s == 4.0 and res.post_fault_breach == a.PostFaultBreach(12.0, 2.0)
    assert res.bad_s == 6.0 and res.outage_s == 6.0  # 11..14 and 32..33: both outside the SLO
    never = a.analyze_run(make_series(rates({(11, 14): 0.5, (30, 40): 0.5})), SLO)
    assert never.post_fault_breach == a.PostFaultBreach(10.0, None)
    assert never.bad_s == 4.0 + 11.0  # t = 30..40 were all outside the SLO when the run ended


def test_bad_seconds_leave_out_the_hold_a_mitigation_won_that_mttr_spans():
    # bad 11-12, held 13-16 (a breaker opened), bad again 18-19, held from 20
    res = a.analyze_run(make_series(rates({(11, 12): 0.5, (18, 19): 0.5})), SLO)
    assert res.ttm_s == 2.0 and res.mttr_s == 9.0  # first breach → restored for good
    assert res.bad_s == 4.0  # two 2-s breaches


def test_a_never_restored_trial_counts_every_second_to_the_end():
    res = a.analyze_run(make_series(rates({(12, 40): 0.5})), SLO)
    # t = 12..40 are 29 bad seconds; the MTTR would be at least that had the SLO held right after the run
    assert res.mttr_s is None and res.mttr_lower_bound_s == 29.0 and res.bad_s == 29.0


def test_a_breach_after_the_fault_is_an_outage_the_trial_did_not_hold():
    res = a.analyze_run(make_series(rates({(26, 29): 0.5})), SLO)  # detection ends with t = 24
    assert res.breached is True and res.ttd_s is None  # users were hurt; nothing to detect at fault-on
    assert res.mttr_s == 4.0 and res.outage_s == 4.0 and res.bad_s == 4.0
    assert res.post_fault_breach == a.PostFaultBreach(6.0, 4.0)  # still its own finding
    never = a.analyze_run(make_series(rates({(30, 40): 0.5})), SLO)
    assert never.breached is True and never.mttr_s is None and never.mttr_lower_bound_s == 11.0


def test_a_trial_without_data_says_why():
    empty = a.analyze_run(make_series([None] * 40), SLO)
    assert empty.insufficient_data and empty.insufficient_reason == "no calls in the fault window"
    behind = make_series(rates({}))
    behind.planned_rps = {"organic": 500.0, "drill": 10.0}
    assert a.analyze_run(behind, SLO).insufficient_reason == "load fell behind"
    sparse = rates({})
    for t in range(14, 21):
        sparse[t - 1] = None
    why = a.analyze_run(make_series(sparse), SLO).insufficient_reason
    assert why == "too few calls in the fault window (30 % of its seconds known)"
    # a sampler that fell behind (a loaded box): t = 13..18 never sampled, so 4 of the 10 fault seconds are
    gappy = make_series(rates({}))
    keep = [i for i, t in enumerate(gappy.t) if not 13 <= t <= 18]
    gappy.t = [gappy.t[i] for i in keep]
    gappy.values = {k: [v[i] for i in keep] for k, v in gappy.values.items()}
    res = a.analyze_run(gappy, SLO)
    assert res.insufficient_data and res.insufficient_reason == (
        "samples missing in the fault window (4 of 10 seconds sampled)"
    )


# --- the read-back's uncertainty ---------------------------------------------------------------------------
def test_an_exact_series_reports_no_uncertainty():
    res = a.analyze_run(make_series(rates({(11, 14): 0.5})), SLO)
    assert res.uncertainty_s is None and res.resolution_s is None
    assert "uncertainty_s" not in res.to_dict() and "resolution_s" not in res.to_dict()


def test_every_read_back_time_carries_the_sum_of_its_two_edges_uncertainty():
    # edges read at scrapes: ± 0.5 s everywhere, ± 1.5 s at the first bad sample (t = 11, index 10) and
    # ± 1 s at the sample where the SLO holds again (t = 25, index 24); fault-on ± 0.25, fault-off ± 0.75
    edge = [0.5] * 40
    edge[10], edge[24] = 1.5, 1.0
    s = read_back(make_series(rates({(11, 24): 0.4, (33, 34): 0.5})), edge, fault=(0.25, 0.75), resolution=2.0)
    res = a.analyze_run(s, SLO)
    assert (res.ttd_s, res.ttr_s, res.mttr_s) == (1.0, 5.0, 14.0)
    u = res.uncertainty_s
    assert u["ttd_s"] == 0.25 + 1.5  # fault-on's ± + the first bad sample's
    assert u["ttr_s"] == 0.75 + 1.0  # fault-off's ± + the held point's
    assert u["mttr_s"] == 1.5 + 1.0  # the first bad sample's + the restored point's
    assert u["post_fault_breach_s"] == 0.5 + 0.5
    assert u["bad_s"] == (1.5 + 1.0) + (0.5 + 0.5)  # both breaches' edges
    assert u["outage_s"] == u["bad_s"]
    assert "ttm_s" not in u and res.resolution_s == 2.0  # no mitigation time, no ± for it


def test_a_never_restored_breach_has_only_its_start_uncertain():
    s = read_back(make_series(rates({(12, 40): 0.5})), 0.5)
    u = a.analyze_run(s, SLO).uncertainty_s
    assert "mttr_s" not in u and u["bad_s"] == 0.5 and u["ttd_s"] == 0.5


def test_a_misread_second_near_an_edge_makes_that_edge_uncertain():
    """A restore point rests on the hold's seconds after it and the window's before it: a second misread
    there (its calls spread over a scrape gap) moves the edge as surely as one at it. A live read-back once
    found a restore 1 s later than the runner with its gap next to the edge and stated ± 0."""
    edge = [0.0] * 40
    edge[25] = 1.0  # one second after the restored point (index 24), inside its 3-s hold
    s = read_back(make_series(rates({(11, 24): 0.4})), edge, resolution=2.0)
    res = a.analyze_run(s, SLO)
    assert res.ttr_s == 5.0
    assert res.uncertainty_s["ttr_s"] == 1.0 and res.uncertainty_s["mttr_s"] == 1.0
