"""The MTTR analysis on synthetic series: the edge cases DESIGN §10 names, no processes."""

from __future__ import annotations

import pytest

from harness.drills import analysis as a
from harness.drills.model import SeriesKey as K
from harness.drills.series import build_series
from tests.drills.synth import make_series

SLO = a.Slo(max_error_rate=0.05, hold_s=3)


def rates(spec: dict[tuple[int, int], float], n: int = 40) -> list[float]:
    """Error rate per second t=1..n; spec maps (first t, last t) inclusive to a rate."""
    out = [0.0] * n
    for (lo, hi), r in spec.items():
        for t in range(lo, hi + 1):
            out[t - 1] = r
    return out


def test_never_breached_has_zero_mttr_and_says_so():
    res = a.analyze_run(make_series(rates({(10, 19): 0.01})), SLO)
    assert res["breached"] is False
    assert res["mttr_s"] == 0.0
    assert res["ttd_s"] is None and res["ttm_s"] is None and res["ttr_s"] is None


def test_never_restored_gives_null_mttr_not_zero():
    res = a.analyze_run(make_series(rates({(12, 40): 0.5})), SLO)
    assert res["breached"] is True
    assert res["ttd_s"] == 2.0
    assert res["mttr_s"] is None
    assert res["ttr_s"] is None
    assert res["ttm_s"] is None


def test_recovery_after_fault_off():
    res = a.analyze_run(make_series(rates({(11, 24): 0.4})), SLO)
    assert res["ttd_s"] == 1.0
    assert res["ttm_s"] is None  # never held while the fault was on
    assert res["ttr_s"] == 5.0  # fault off at 20, good from 25
    assert res["mttr_s"] == 14.0  # 11 -> 25


def test_restored_during_the_fault_is_mitigation():
    res = a.analyze_run(make_series(rates({(11, 13): 0.6})), SLO)
    assert res["ttd_s"] == 1.0
    assert res["ttm_s"] == 3.0  # 11 -> held from 14 (14,15,16 all good, before 20)
    assert res["ttr_s"] == 0.0  # already holding at fault off
    assert res["mttr_s"] == 3.0


def test_flapping_counts_until_restored_for_good():
    spec = {(11, 12): 0.5, (14, 14): 0.5, (17, 18): 0.5, (23, 23): 0.5}
    res = a.analyze_run(make_series(rates(spec)), SLO)
    assert res["flaps"] == 3
    assert res["ttm_s"] is None  # never three good seconds in a row before 20: 15,16 then 19 only
    assert res["mttr_s"] == 13.0  # 11 -> 24
    assert res["ttr_s"] == 0.0  # 20,21,22 good


def test_short_good_tail_is_not_a_restoration():
    res = a.analyze_run(make_series(rates({(11, 38): 0.5}), fault_off=20), SLO)
    assert res["mttr_s"] is None  # only 2 good seconds left (39, 40)


def test_cancelled_is_excluded_from_the_error_rate():
    s = make_series(rates({}), cancelled=500.0)
    assert a.error_rate_series(s)[0] == 0.0
    assert a.analyze_run(s, SLO)["breached"] is False


def test_breach_before_fault_is_not_detection():
    res = a.analyze_run(make_series(rates({(2, 3): 0.9})), SLO)
    assert res["breached"] is False


def test_unknown_seconds_neither_breach_nor_hold():
    r = rates({(11, 14): 0.5})
    r[14] = r[15] = None  # t=15,16 no traffic
    res = a.analyze_run(make_series(r), SLO)
    assert res["mttr_s"] == 6.0  # 11 -> held from 17


def test_latency_slo_breaches_on_p99():
    s = make_series(rates({}))
    slo = a.Slo(max_error_rate=0.05, max_p99_s=0.5, hold_s=3)
    assert a.analyze_run(s, slo)["breached"] is True  # p99 ~1 s in every second
    assert a.analyze_run(s, a.Slo(max_p99_s=2.0))["breached"] is False


def test_amplification_is_deepest_hop_peak_over_ingress():
    n = 40
    ledger = [100.0] * n
    for t in range(11, 21):
        ledger[t - 1] = 400.0
    s = make_series(rates({}), rps=100.0, organic_share=0.8, hops={"gateway": [100.0] * n, "ledger": ledger})
    res = a.analyze_run(s, SLO, hops=["gateway", "ledger"])
    assert res["amplification"] == pytest.approx(4.0, rel=0.01)
    assert res["amplification_by_hop"]["gateway"] == pytest.approx(1.0, rel=0.01)


def test_blast_radius_is_organic_error_rate_during_fault():
    s = make_series(rates({(10, 19): 0.2}))
    res = a.analyze_run(s, SLO)
    assert res["blast_radius"] == pytest.approx(0.2)
    assert res["error_rate_during_fault"] == pytest.approx(0.2)


def test_noise_below_the_slo_does_not_breach():
    import random

    rng = random.Random(7)
    r = [max(0.0, rng.gauss(0.01, 0.01)) for _ in range(40)]
    assert a.analyze_run(make_series(r), SLO)["breached"] is False


def test_quantile_matches_prometheus_interpolation():
    assert a.quantile_from_buckets(0.5, [(0.1, 50), (1.0, 100), (float("inf"), 100)]) == pytest.approx(0.1)
    assert a.quantile_from_buckets(0.99, [(0.1, 0), (1.0, 100), (float("inf"), 100)]) == pytest.approx(0.991)
    assert a.quantile_from_buckets(0.99, []) is None


def test_build_series_rates_and_counter_resets():
    samples = [
        (0.0, {K('srv', service='a'): 0.0, K('fds', service='a'): 10.0}),
        (1.0, {K('srv', service='a'): 50.0, K('fds', service='a'): 12.0}),
        (2.0, {K('srv', service='a'): 150.0, K('fds', service='a'): 11.0}),
        (3.0, {K('srv', service='a'): 20.0, K('fds', service='a'): 9.0}),  # restarted process
    ]
    s = build_series("x", samples, 1.0, 2.0)
    assert s.t == [1.0, 2.0, 3.0]
    assert s.values[K('srv', service='a')] == [50.0, 100.0, 20.0]
    assert s.values[K('fds', service='a')] == [12.0, 11.0, 9.0]


def test_rank_puts_unrestored_last_and_unbreached_first():
    configs = {
        "naive": {"breached": True, "mttr_s": None},
        "budget": {"breached": True, "mttr_s": 9.0},
        "resilient": {"breached": True, "mttr_s": 3.0},
        "calm": {"breached": False, "mttr_s": 0.0},
    }
    assert a.rank(configs) == ["calm", "resilient", "budget", "naive"]


def test_a_window_smooths_single_second_noise():
    r = rates({(15, 15): 0.06})  # one marginal second
    assert a.analyze_run(make_series(r), SLO)["breached"] is True
    assert a.analyze_run(make_series(r), a.Slo(window_s=2))["breached"] is False
