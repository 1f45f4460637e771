"""No confounding: a slow drill class must not slow organic users in the same Locust process.

A load generator that waits for a call in a way that holds up other users fakes a
blast radius: Locust's blocking recipe parked every in-flight call on one of the
gevent hub threadpool's threads (10 by default), so 250 ms drill delays held the
pool and organic calls queued behind them. The gRPC user now waits on a gevent
waiter per call (`loadtests/grpc_gevent.py`) and needs no threadpool at all, so
the pool stays at gevent's default of 10, which used to be the failing control.

This test proves it: with delay:250 on drill traffic, organic users send as
many calls as in a run without faults and their p50 does not move by a tenth of
the delay (the +3 ms target is measured by benchmarks/locust_throughput.py, with
the generator on a core of its own: here other tests share the cores). The two
runs of a pair run at the same time (separate Locust processes), so the machine's
noise hits both alike; the medians of three pairs are compared. The control blocks
the hub for each call's whole duration (`DRILL_LOCUST_WAIT=block-hub`), the way a
synchronous wait would, and must fail the same check. (A blocked hub delays the
*sending* of organic calls, so it shows up in how many are sent: measured 20
organic calls instead of ~400, p50 3 -> 6 ms.)
"""

from __future__ import annotations

import statistics

import pytest

from tests.loadtests.conftest import run_concurrently

pytestmark = pytest.mark.slow  # a live run: scheduled first (tests/conftest.py)

#: A confounding generator adds a good part of the drill's 250 ms to organic calls (Locust's threadpool recipe:
#: p50 12–14 -> 62–93 ms, measured before the change). Two twin runs beside the rest of the suite differ by up to
#: +10 ms with no confounding at all (a CI rehearsal: 13 vs 23 ms), so the bound sits between: a tenth of the delay.
TOLERANCE_MS = 25.0
#: Both runs follow the same open-loop schedule (10 organic users x 5/s): a process that keeps up
#: sends the same count up to one call per user at either end of the run (~20 of ~400). Three
#: quarters leaves room for a starved machine slowing one run more than the other; a blocked hub
#: sends a small fraction.
MIN_CALL_SHARE = 0.75
COMMON = (
    "-u", "20", "-r", "20", "-t", "8s",
    "--drill-weights", "organic=1,drill=1",
    "--drill-rate", "5",
    "--drill-ratio", "100",
    "--drill-cancel-share", "0",
)  # fmt: skip


def _organic(tmp_path, host, pairs: int, *extra: str) -> tuple[list[tuple[float, int]], list[tuple[float, int]]]:
    """(organic p50 ms, organic calls) of each quiet run and of each run with delay:250 on drill calls."""
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
            assert organic is not None and int(organic["Request Count"]) > 0, run.stats
            assert int(organic["Failure Count"]) == 0
            got = (run.median_ms("organic/Call"), int(organic["Request Count"]))
            if tag.startswith("delay"):
                drill = run.row("grpc", "drill/Call")
                assert drill is not None and float(drill["50%"]) >= 250, drill  # the delay really was on
                faulted.append(got)
            else:
                base.append(got)
    return base, faulted


def organic_unmoved(base: list[tuple[float, int]], faulted: list[tuple[float, int]]) -> bool:
    """The organic median moved at most TOLERANCE_MS and organic users sent their calls."""
    p50 = statistics.median(p for p, _ in faulted) <= statistics.median(p for p, _ in base) + TOLERANCE_MS
    sent = statistics.median(n for _, n in faulted) >= MIN_CALL_SHARE * statistics.median(n for _, n in base)
    return p50 and sent


#: Twin runs share the machine's noise only on average: beside two CPU hogs and the suite, a starvation burst
#: once hit one twin alone (organic p50 5 ms in the quiet twin, 160 ms in the delayed one, while the other pair
#: read 28 and 42 ms), and the median of two pairs is their mean. Three pairs: one such pair is outvoted.
PAIRS = 3


def test_drill_delay_does_not_move_organic_traffic(tmp_path, drill_server):
    base, faulted = _organic(tmp_path, drill_server.host, PAIRS)
    assert organic_unmoved(base, faulted), (base, faulted)


def test_a_wait_that_blocks_the_hub_would_confound(tmp_path, drill_server, monkeypatch):
    """The control: each call holds the whole process until it ends, so while a drill call waits
    out its 250 ms, no organic call is sent or completed."""
    monkeypatch.setenv("DRILL_LOCUST_WAIT", "block-hub")
    base, blocked = _organic(tmp_path, drill_server.host, 1)
    assert not organic_unmoved(base, blocked), (base, blocked)
