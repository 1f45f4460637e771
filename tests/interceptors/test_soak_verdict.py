"""The soak's memory and overload verdict, on synthetic results (the live soak is test_soak.py).

The bounds are formulas of what the run measured; these check that each one moves with its
measure and nothing else: grpc's leak per caller that left (grpc/grpc#43360), the calls a
server holds before its handlers see them, and the generator's own lateness.
"""

from __future__ import annotations

from benchmarks import soak_memory as mem

MB = 1024 * 1024


def _result(*, expired: int = 0, timed_out: int = 0, gateway_peak: int = 10, ledger_peak: int = 4,
            gateway_used_end: float = 7.5, ledger_rss_end: float = 55.0, late_s: float = 0.0,
            gateway_rss_end: float = 56.0) -> dict:  # fmt: skip
    def server(peak: int, used_end: float) -> dict:
        warm = {"glibc_used_mb": 7.3, "py_used_mb": 14.0, "objects": {}}
        return {"warm": warm, "after_collect": {"glibc_used_mb": used_end, "py_used_mb": 14.0},
                "inflight_max_overload": peak, "inflight_max_quiet": 0, "high": {"t": 1}}  # fmt: skip

    return {
        "books": {"other_errors": {"organic:DEADLINE_EXCEEDED": expired}, "late_max_s": late_s},
        "gateway_attempts_timed_out": timed_out,
        "overload_rate_per_s": 100.0,
        "rss_warm_mb": {"gateway": 55.0, "ledger": 54.0},
        "rss_end_mb": {"gateway": gateway_rss_end, "ledger": ledger_rss_end},
        "memory": {"gateway": server(gateway_peak, gateway_used_end), "ledger": server(ledger_peak, 7.3)},
    }


def test_native_memory_kept_by_grpc_for_callers_that_left_is_allowed_per_such_call_only():
    # 7.3 MB warm: 10 % + 2 MB allows 10.03 MB; 15 MB more needs that many calls' worth of grpc's leak
    grown = 7.3 * 1.10 + 2.0 + 15.0
    calls = int(15.0 * MB / mem.DEPENDENCY_LEAK_PER_LEFT_CALL) + 1
    assert any("glibc_used_mb" in b for b in mem.check_rss(_result(gateway_used_end=grown)))
    assert any("glibc_used_mb" in b for b in mem.check_rss(_result(gateway_used_end=grown, expired=calls // 2)))
    assert not mem.check_rss(_result(gateway_used_end=grown, expired=calls))


def test_resident_memory_kept_by_grpc_for_callers_that_left_is_allowed_per_such_call_only():
    # 55 MB warm, 10 calls held: 10 % allows 60.5 MB; 40 MB more needs that many calls' worth of grpc's leak
    calls = int(40.0 * MB / mem.DEPENDENCY_LEAK_PER_LEFT_CALL) + 1
    assert any("RSS of gateway" in b for b in mem.check_rss(_result(gateway_rss_end=100.0, expired=calls // 2)))
    assert not mem.check_rss(_result(gateway_rss_end=100.0, expired=calls))


def test_the_ledger_is_allowed_what_the_gateway_can_have_out_towards_it():
    # 54 MB warm; 4 calls in the ledger's handlers allow 10 % (59.4 MB); 200 at the gateway allow 25 MB more
    assert any("RSS of ledger" in b for b in mem.check_rss(_result(ledger_rss_end=70.0, gateway_peak=4)))
    assert not mem.check_rss(_result(ledger_rss_end=70.0, gateway_peak=200))


def test_the_in_flight_bound_counts_what_a_late_generator_sends_at_once():
    on_time = mem.inflight_bound(_result())
    assert on_time == 201  # 100/s x 2-s deadline, + 1
    assert mem.inflight_bound(_result(late_s=0.25)) == 226  # 100/s x 2.25 s + 1: the catch-up burst
    lagging = _result(late_s=0.25)
    lagging["memory"]["gateway"]["loop_lag_max_s"] = 0.5
    assert mem.inflight_bound(lagging) == 276  # and cancelled 0.5 s late by the gateway's loop
