"""No confounding: a slow drill class must not slow organic users in the same Locust process.

gevent-patched grpc parks every in-flight blocking call on a hub threadpool
thread. With gevent's default of 10 threads, 250 ms drill delays hold the pool
and organic calls queue behind them: the load generator itself would fake a
blast radius. The user base sizes the pool to the live users; this test proves
it: organic p50 with delay:250 on drill traffic stays within +3 ms of a run
without faults. The two runs of a pair run at the same time (separate Locust
processes), so the machine's noise hits both alike; the medians of two pairs
are compared. The control pins the pool at 10 and must fail the same check.
"""

from __future__ import annotations

import statistics

from tests.loadtests.conftest import run_concurrently

TOLERANCE_MS = 3.0
COMMON = (
    "-u", "20", "-r", "20", "-t", "8s",
    "--drill-weights", "organic=1,drill=1",
    "--drill-rate", "5",
    "--drill-ratio", "100",
    "--drill-cancel-share", "0",
)  # fmt: skip


def _organic_p50s(tmp_path, host, pairs: int, *extra: str, min_calls: int = 200) -> tuple[list[float], list[float]]:
    base, faulted = [], []
    for i in range(pairs):
        runs = run_concurrently(
            tmp_path,
            host,
            {
                f"base{i}": (*COMMON, "--drill-directive=", *extra),
                f"delay{i}": (*COMMON, "--drill-directive=delay:250", *extra),
            },
            timeout=45,
        )
        for tag, run in runs.items():
            assert run.rc == 0, run.log[-2000:]
            organic = run.row("grpc", "organic/Call")
            assert organic is not None and int(organic["Request Count"]) > min_calls, run.stats
            assert int(organic["Failure Count"]) == 0
            if tag.startswith("delay"):
                drill = run.row("grpc", "drill/Call")
                assert drill is not None and float(drill["50%"]) >= 250, drill  # the delay really was on
                faulted.append(run.median_ms("organic/Call"))
            else:
                base.append(run.median_ms("organic/Call"))
    return base, faulted


def test_drill_delay_does_not_move_organic_median(tmp_path, drill_server):
    base, faulted = _organic_p50s(tmp_path, drill_server.host, 2)
    assert statistics.median(faulted) <= statistics.median(base) + TOLERANCE_MS, (base, faulted)


def test_default_gevent_threadpool_would_confound(tmp_path, drill_server):
    """The control: with the pool pinned at gevent's default (10), organic p50 jumps (measured +40 to +50 ms)."""
    base, pinned = _organic_p50s(tmp_path, drill_server.host, 1, "--drill-threadpool", "10", min_calls=30)
    assert statistics.median(pinned) > statistics.median(base) + 20, (base, pinned)
