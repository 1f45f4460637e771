"""The live view renders the numbers it promises; the scraper reduces exposition text and survives a miss."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from rich.console import Console

from harness.drills.plan.outputs import SeriesKey as K
from harness.drills.readings.scraper import Scraper, reduce_text
from harness.drills.trials.live import LiveView, last_second


def _update(samples):
    return {
        "config": "naive", "index": 0, "count": 2, "phase": "fault", "elapsed": 12.0, "total": 30.0,
        "samples": samples, "hops": ["gateway", "ledger"],
    }  # fmt: skip


def test_live_view_shows_phase_rates_errors_p99_hits_gap_and_fds():
    org = {"traffic": "organic"}
    s0 = {
        K("calls", status="OK", mode="none", **org): 0.0, K("lat", mode="none", le="0.1", **org): 0.0,
        K("lat", mode="none", le="+Inf", **org): 0.0, K("srv", "ledger"): 0.0, K("hits", "ledger"): 0.0,
        K("gap", "ledger"): 0.0, K("fds", "ledger"): 20.0,
    }
    s1 = {
        K("calls", status="OK", mode="none", **org): 90.0, K("calls", status="UNAVAILABLE", mode="none", **org): 10.0,
        K("lat", mode="none", le="0.1", **org): 90.0, K("lat", mode="none", le="+Inf", **org): 100.0,
        K("srv", "ledger"): 400.0, K("hits", "ledger"): 64.0, K("gap", "ledger"): 3.0, K("fds", "ledger"): 23.0,
    }
    console = Console(record=True, width=140)
    view = LiveView("retry-storm", console=console, enabled=True)
    update = _update([(0.0, s0), (1.0, s1)])
    console.print(view.render(update, last_second(update)))
    text = console.export_text()
    for needle in ("retry-storm", "naive", "fault", "organic", "10.0%", "ledger", "400", "64", "23"):
        assert needle in text, needle


def test_live_view_shows_offered_against_planned_and_flags_a_load_that_fell_behind():
    # 40 organic calls started per second (fast, ≤ 0.1 s) against 40 planned; drill: 4 of 10 planned
    samples = []
    for i in range(9):
        samples.append((float(i), {
            K("lat", traffic="organic", mode="none", le="0.1"): 40.0 * i,
            K("lat", traffic="organic", mode="none", le="+Inf"): 40.0 * i,
            K("lat", traffic="drill", mode="none", le="0.1"): 4.0 * i,
            K("lat", traffic="drill", mode="none", le="+Inf"): 4.0 * i,
        }))  # fmt: skip
    update = {**_update(samples), "planned_rps": {"organic": 40.0, "drill": 10.0}}
    console = Console(record=True, width=160)
    LiveView("retry-storm", console=console, enabled=False).update(update)
    text = console.export_text()
    assert "offered organic 40/40 drill 4/10 BEHIND" in text, text


def test_reduce_text_keys_edge_calls_and_hop_calls():
    reg = CollectorRegistry()
    labels = ["service", "grpc_method", "grpc_status", "fault_mode", "traffic", "config"]
    calls = Counter("drill_client_calls", "", labels, registry=reg)
    srv = Counter("drill_server_calls", "", ["service", "grpc_method", "grpc_status", "traffic", "fault_mode"],
                  registry=reg)  # fmt: skip
    fds = Gauge("process_open_fds", "", registry=reg)
    calls.labels("loadgen", "m", "OK", "none", "organic", "naive").inc(5)
    calls.labels("loadgen", "m", "OK", "none", "organic", "resilient").inc(7)
    srv.labels("ledger", "m", "OK", "organic", "none").inc(3)
    fds.set(12)
    text = generate_latest(reg).decode()
    snap = reduce_text(text, config="naive", service="ledger", edge=True)
    assert snap[K('calls', traffic='organic', status='OK', mode='none')] == 5.0
    assert snap[K('srv', service='ledger')] == 3.0 and snap[K('fds', service='ledger')] == 12.0
    hop_only = reduce_text(text, config="naive", service="ledger", edge=False)
    assert K("calls", traffic="organic", status="OK", mode="none") not in hop_only


def test_a_missed_scrape_repeats_the_last_values_instead_of_a_reset(monkeypatch):
    from harness.drills.readings import scraper as sc

    answers = iter(['drill_server_calls_total{service="a"} 10\n', OSError("down"),
                    'drill_server_calls_total{service="a"} 30\n'])  # fmt: skip

    async def fake_fetch(url, timeout_s=2.0):
        ans = next(answers)
        if isinstance(ans, BaseException):
            raise ans
        return ans

    monkeypatch.setattr(sc, "fetch", fake_fetch)
    s = Scraper(lambda: [("a", "http://x/metrics")], config=None)

    async def go():
        for _ in range(3):
            await s.scrape_once()

    asyncio.run(go())
    assert [snap[K('srv', service='a')] for _, snap in s.samples] == [10.0, 10.0, 30.0]
    assert s.errors == 1
