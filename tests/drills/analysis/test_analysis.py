"""The MTTR analysis on synthetic series: the edge cases contracts §10 names, no processes."""

from __future__ import annotations

import pytest

from harness.drills.analysis import trial as a
from harness.drills.plan.outputs import SeriesKey as K
from harness.drills.readings.series import build_series
from tests.drills.synth import make_series, rates

SLO = a.Slo(max_error_rate=0.05, hold_s=3)


def test_never_breached_has_null_mttr_never_zero():
    # issue 10 defect 3: MTTR was 0 for "never breached"
    res = a.analyze_run(make_series(rates({(11, 20): 0.01})), SLO)
    assert res.breached is False
    assert res.insufficient_data is False
    assert res.mttr_s is None
    assert res.ttd_s is None and res.ttm_s is None and res.ttr_s is None


def test_never_restored_gives_null_mttr_not_zero():
    res = a.analyze_run(make_series(rates({(12, 40): 0.5})), SLO)
    assert res.breached is True
    assert res.ttd_s == 2.0
    assert res.mttr_s is None
    assert res.ttr_s is None
    assert res.ttm_s is None


def test_recovery_after_fault_off():
    res = a.analyze_run(make_series(rates({(11, 24): 0.4})), SLO)
    assert res.ttd_s == 1.0
    assert res.ttm_s is None  # never held while the fault was on
    assert res.ttr_s == 5.0  # fault off at 20, good from 25
    assert res.mttr_s == 14.0  # 11 -> 25


def test_restored_during_the_fault_is_mitigation():
    res = a.analyze_run(make_series(rates({(11, 13): 0.6})), SLO)
    assert res.ttd_s == 1.0
    assert res.ttm_s == 3.0  # 11 -> held from 14 (14,15,16 all good, before 20)
    assert res.ttr_s == 0.0  # already holding at fault off
    assert res.mttr_s == 3.0
    assert res.post_fault_breach is None


def test_flapping_counts_until_restored_for_good():
    spec = {(11, 12): 0.5, (14, 14): 0.5, (17, 18): 0.5, (23, 23): 0.5}
    res = a.analyze_run(make_series(rates(spec)), SLO)
    assert res.flaps == 3
    assert res.ttm_s is None  # never three good seconds in a row before 20: 15,16 then 19 only
    assert res.mttr_s == 13.0  # 11 -> 24 (t=23 is within the grace: the same breach)
    assert res.ttr_s == 0.0  # t = 20, 21, 22 good: holding when the fault went off


def test_short_good_tail_is_not_a_restoration():
    res = a.analyze_run(make_series(rates({(11, 38): 0.5}), fault_off=20), SLO)
    assert res.mttr_s is None  # only 2 good seconds left (39, 40)


def test_cancelled_is_excluded_from_the_error_rate():
    s = make_series(rates({}), cancelled=500.0)
    assert a.error_rate_series(s)[0] == 0.0
    assert a.analyze_run(s, SLO).breached is False


def test_breach_before_fault_is_not_detection():
    res = a.analyze_run(make_series(rates({(2, 3): 0.9})), SLO)
    assert res.breached is False


def test_unknown_seconds_neither_breach_nor_hold():
    r = rates({(11, 14): 0.5})
    r[14] = r[15] = None  # t=15,16 no traffic
    res = a.analyze_run(make_series(r), SLO)
    assert res.mttr_s == 6.0  # 11 -> held from 17


def test_latency_slo_breaches_on_p99():
    s = make_series(rates({}))
    slo = a.Slo(max_error_rate=0.05, max_p99_s=0.5, hold_s=3)
    assert a.analyze_run(s, slo).breached is True  # p99 ~1 s in every second
    assert a.analyze_run(s, a.Slo(max_p99_s=2.0)).breached is False


def test_amplification_is_deepest_hop_attempts_over_edge_first_attempts_in_the_fault_window():
    n = 40
    ledger = [100.0] * n
    for t in range(11, 21):
        ledger[t - 1] = 400.0
    s = make_series(rates({}), rps=100.0, organic_share=0.8, hops={"gateway": [100.0] * n, "ledger": ledger})
    res = a.analyze_run(s, SLO, hops=["gateway", "ledger"])
    # ledger 400/s during t = 11..20 = exactly the fault window: 4000 attempts ÷ 1000 edge calls
    assert res.amplification == pytest.approx(4.0, rel=0.01)
    assert res.amplification_by_hop["gateway"] == pytest.approx(1.0, rel=0.01)


def test_blast_radius_is_organic_error_rate_during_fault():
    # issue 10 defect 8: the fault [10, 20) is the samples t = 11..20 (a sample at t covers (t-1, t])
    s = make_series(rates({(11, 20): 0.2}))
    res = a.analyze_run(s, SLO)
    assert res.blast_radius == pytest.approx(0.2)
    assert res.error_rate_during_fault == pytest.approx(0.2)


def test_noise_below_the_slo_does_not_breach():
    import random

    rng = random.Random(7)
    r = [max(0.0, rng.gauss(0.01, 0.01)) for _ in range(40)]
    assert a.analyze_run(make_series(r), SLO).breached is False


def test_quantile_matches_prometheus_interpolation():
    assert a.quantile_from_buckets(0.5, [(0.1, 50), (1.0, 100), (float("inf"), 100)]) == pytest.approx(0.1)
    assert a.quantile_from_buckets(0.99, [(0.1, 0), (1.0, 100), (float("inf"), 100)]) == pytest.approx(0.991)
    assert a.quantile_from_buckets(0.99, []) is None


def test_build_series_rates_and_counter_resets():
    samples = [
        (0.0, {K("srv", service="a"): 0.0, K("fds", service="a"): 10.0}),
        (1.0, {K("srv", service="a"): 50.0, K("fds", service="a"): 12.0}),
        (2.0, {K("srv", service="a"): 150.0, K("fds", service="a"): 11.0}),
        (3.0, {K("srv", service="a"): 20.0, K("fds", service="a"): 9.0}),  # restarted process
    ]
    s = build_series("x", samples, 1.0, 2.0)
    assert s.t == [1.0, 2.0, 3.0]
    assert s.values[K("srv", service="a")] == [50.0, 100.0, 20.0]
    assert s.values[K("fds", service="a")] == [12.0, 11.0, 9.0]


def test_rank_puts_unrestored_last_and_unbreached_first():
    configs = {
        "naive": {"breached": True, "mttr_s": None},
        "budget": {"breached": True, "mttr_s": 9.0},
        "resilient": {"breached": True, "mttr_s": 3.0},
        "calm": {"breached": False, "mttr_s": None},
        "silent": {"breached": False, "mttr_s": None, "insufficient_data": True},
    }
    assert a.rank(configs) == ["calm", "resilient", "budget", "naive", "silent"]


def test_a_window_smooths_single_second_noise():
    r = rates({(15, 15): 0.06})  # one marginal second
    assert a.analyze_run(make_series(r), SLO).breached is True
    assert a.analyze_run(make_series(r), a.Slo(window_s=2)).breached is False


# --- issue 10's defects, each on a synthetic series ---------------------------------------------
def test_no_data_is_insufficient_and_never_ranked_as_holding():
    # defect 1: all-empty seconds used to be "held the SLO throughout" and ranked first
    empty = a.analyze_run(make_series([None] * 40, config="dead"), SLO)
    assert empty.insufficient_data is True
    assert empty.breached is False and empty.mttr_s is None
    naive = a.analyze_run(make_series(rates({(11, 25): 0.5}), config="naive"), SLO)
    assert a.rank({"dead": empty.to_dict(), "naive": naive.to_dict()}) == ["naive", "dead"]


def test_a_fault_window_mostly_unknown_is_insufficient():
    r = rates({})
    for t in range(11, 14):  # 3 of the 10 fault seconds known, 7 without calls
        r[t - 1] = 0.0
    for t in range(14, 21):
        r[t - 1] = None
    assert a.analyze_run(make_series(r), SLO).insufficient_data is True
    r[13] = r[14] = r[15] = r[16] = r[17] = 0.0  # 8 of 10 known: enough
    assert a.analyze_run(make_series(r), SLO).insufficient_data is False


def test_a_breach_starting_after_the_grace_is_a_post_fault_breach_not_ttd():
    # defect 2: fault [10, 20), grace = hold 3 + window 1 = 4 s, so detection ends with t = 24;
    # a breach at t = 26..29 used to be reported as TTD 16 s with TTR 0
    res = a.analyze_run(make_series(rates({(26, 29): 0.5})), SLO)
    assert res.ttd_s is None and res.ttm_s is None and res.ttr_s is None  # nothing to detect at fault-on
    assert res.post_fault_breach == a.PostFaultBreach(6.0, 4.0)  # 26 -> held from 30
    # issue 21: users were hurt, so the trial did not hold: breached, its MTTR the breach's length
    assert res.breached is True and res.mttr_s == 4.0
    assert res.outage_s == 4.0 and res.bad_s == 4.0


def test_a_breach_inside_the_grace_is_detection():
    res = a.analyze_run(make_series(rates({(23, 25): 0.5})), SLO)
    assert res.breached is True and res.ttd_s == 13.0 and res.mttr_s == 3.0
    shorter_grace = a.analyze_run(make_series(rates({(23, 25): 0.5})), a.Slo(grace_s=1))
    assert shorter_grace.post_fault_breach.start_s == 3.0 and shorter_grace.ttd_s is None
    assert shorter_grace.breached is True and shorter_grace.mttr_s == 3.0


def test_a_later_breach_after_restoration_is_reported_apart():
    res = a.analyze_run(make_series(rates({(11, 14): 0.5, (32, 33): 0.5})), SLO)
    assert res.mttr_s == 4.0  # 11 -> held from 15; the later breach does not stretch it
    assert res.post_fault_breach == a.PostFaultBreach(12.0, 2.0)


def test_the_fault_window_takes_the_last_fault_second_not_the_last_warmup_one():
    # defect 8: a sample at t covers (t-1, t]; with the fault on at 10 the sample at t = 10 is warm-up
    warm = a.analyze_run(make_series(rates({(10, 10): 0.9}), fault_on=10, fault_off=20), SLO)
    assert warm.breached is False and warm.error_rate_during_fault == 0.0
    last = a.analyze_run(make_series(rates({(20, 20): 0.9}), fault_on=10, fault_off=20), SLO)
    assert last.breached is True and last.ttd_s == 10.0
    assert last.error_rate_during_fault == pytest.approx(0.09)


def test_goodput_beside_amplification():
    n = 40
    ledger = [10.0] * n  # a breaker that sheds almost everything: low amplification, no goodput
    s = make_series(rates({(11, 20): 0.9}), hops={"gateway": [100.0] * n, "ledger": ledger})
    res = a.analyze_run(s, SLO, hops=["gateway", "ledger"])
    assert res.amplification == pytest.approx(0.1)
    assert res.success_rate == pytest.approx(0.1)
    assert res.success_rate_by_traffic["organic"] == pytest.approx(0.1)
    assert res.attempts_per_success == pytest.approx(1.0)  # 100 ledger attempts / 100 OK edge calls
