"""A stack's selector hops read back from a real Prometheus after a trial (`prom.read_hops`): the calls a hop
refused at its own limits (`drill_server_refused_total` and `drill_server_backlog_refused_total`) are its `refused`
series, as they are for a hop the runner scrapes itself, so the note under the results sees them either way.

The hop's counters grow at fixed rates and carry the time they were read as their stamp (`StampedHop`), so the
increase between any two seconds read back is exactly rate × 1 s, whatever the scrapes' timing; the read-back
interpolates between stamps, which is exact for a counter that grows linearly."""

from __future__ import annotations

import time

import pytest

from harness.core import metrics as m
from harness.drills.plan.outputs import SeriesKey as K
from harness.drills.readings.prom import read_hops
from harness.procs.prometheus import LocalPrometheus
from tests.drills.trials.test_live_and_scraper import StampedHop, exporter


def test_a_selector_hops_refusals_at_its_limits_are_its_refused_series(tmp_path):
    ledger = StampedHop("ledger", {"drill_server_calls": 7.0, m.SERVER_REFUSED._name: 1.0,
                                   m.SERVER_BACKLOG_REFUSED_NAME: 2.0}, {})  # fmt: skip
    with exporter(ledger) as addr, LocalPrometheus(tmp_path / "prom", targets={"ledger": [addr]}) as prom:
        deadline = time.monotonic() + 60  # Prometheus' first scrapes come ~5 s after its start
        while True:
            now = int(time.time()) - 2  # seconds the scrapes around them have landed for
            try:
                snaps = read_hops(prom.url, {"ledger": '{job="ledger"}'}, [float(s) for s in range(now - 3, now + 1)])
            except Exception:  # noqa: BLE001 - no series yet: asked again until the deadline
                snaps = None
            calls = [s.get(K("srv", "ledger"), 0.0) for s in snaps or []]
            if calls and all(b > a for a, b in zip(calls, calls[1:], strict=False)):  # Prometheus has these seconds
                break
            assert time.monotonic() < deadline, snaps
            time.sleep(0.5)
    refused = [s.get(K("refused", "ledger")) for s in snaps]
    assert None not in refused, snaps  # the hop's refusals are read back with it
    # cumulative from the first second: both refusal counters (1/s + 2/s) summed into one series, per second
    assert [b - a for a, b in zip(refused, refused[1:], strict=False)] == pytest.approx([3.0] * 3, rel=1e-6)
    assert [b - a for a, b in zip(calls, calls[1:], strict=False)] == pytest.approx([7.0] * 3, rel=1e-6)
