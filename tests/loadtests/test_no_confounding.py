"""No confounding: a slow drill class must not slow organic users in the same Locust process.

gevent-patched grpc parks every in-flight blocking call on a hub threadpool
thread. With gevent's default of 10 threads, 250 ms drill delays hold the pool
and organic calls queue behind them: the load generator itself would fake a
blast radius. The user base sizes the pool to the live users; this test proves
it (organic p50 with delay:250 on drill traffic within +3 ms of a run without
faults, medians over alternating runs) and that the check can fail (the same
run with the pool pinned at 10 moves organic p50 by far more).
"""

from __future__ import annotations

import statistics

from tests.loadtests.conftest import run_locust

TOLERANCE_MS = 3.0
COMMON = (
    "-u", "20", "-r", "20", "-t", "8s",
    "--drill-weights", "organic=1,drill=1",
    "--drill-rate", "5",
    "--drill-ratio", "100",
    "--drill-cancel-share", "0",
)  # fmt: skip


def _organic_p50(tmp_path, host, directive: str, tag: str, *extra: str) -> float:
    run = run_locust(tmp_path, host, *COMMON, f"--drill-directive={directive}", *extra, tag=tag, timeout=45)
    assert run.rc == 0, run.log[-2000:]
    organic = run.row("grpc", "organic/Call")
    assert organic is not None and int(organic["Request Count"]) > 200, run.stats
    assert int(organic["Failure Count"]) == 0
    if directive:
        drill = run.row("grpc", "drill/Call")
        assert drill is not None and float(drill["50%"]) >= 250, drill  # the delay really was on
    return run.median_ms("organic/Call")


def test_drill_delay_does_not_move_organic_median(tmp_path, drill_server):
    base, faulted = [], []
    for i in range(2):  # alternate, so drift on a shared machine hits both sides
        base.append(_organic_p50(tmp_path, drill_server.host, "", f"base{i}"))
        faulted.append(_organic_p50(tmp_path, drill_server.host, "delay:250", f"delay{i}"))
    assert statistics.median(faulted) <= statistics.median(base) + TOLERANCE_MS, (base, faulted)


def test_default_gevent_threadpool_would_confound(tmp_path, drill_server):
    """The control: with the pool pinned at gevent's default (10), organic p50 follows the drill delay."""
    base = _organic_p50(tmp_path, drill_server.host, "", "ctl-base", "--drill-threadpool", "10")
    pinned = _organic_p50(tmp_path, drill_server.host, "delay:250", "ctl-delay", "--drill-threadpool", "10")
    assert pinned > base + 50, (base, pinned)
