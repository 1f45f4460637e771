"""The live view renders the numbers it promises (a stack's selector hops read from a real Prometheus while the
trial runs); the scraper reduces exposition text and survives a miss."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from rich.console import Console

from harness.drills.plan.outputs import SeriesKey as K
from harness.drills.plan.stack import Stack
from harness.drills.readings.scraper import Scraper, reduce_text
from harness.drills.trials.live import LiveView, last_second
from harness.procs.prometheus import LocalPrometheus


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


# --- a stack's selector hops, read from its Prometheus while the trial runs ---------------------------------
class StampedHop:
    """A hop's /metrics whose counters grow at fixed rates and carry the time they were read as their timestamp
    (Prometheus keeps an exporter's own stamps), so the rate between any two scrapes is exactly the rate set:
    (rate × t2 − rate × t1) / (t2 − t1), whatever the machine did to the scrapes' timing. Values count from the
    exporter's start, small enough that float rounding stays far below the 1e-6 the assertions allow."""

    def __init__(self, service: str, counters: dict[str, float], gauges: dict[str, float]) -> None:
        self.service, self.counters, self.gauges = service, counters, gauges
        self.t0_ms = int(time.time() * 1000)

    def collect(self):
        now_ms = int(time.time() * 1000)
        for name, rate in self.counters.items():
            family = CounterMetricFamily(name, "", labels=["service"])
            family.add_metric([self.service], rate * (now_ms - self.t0_ms) / 1000, timestamp=now_ms / 1000)
            yield family
        for name, value in self.gauges.items():
            family = GaugeMetricFamily(name, "", labels=["service"])
            family.add_metric([self.service], value, timestamp=now_ms / 1000)
            yield family


@contextlib.contextmanager
def exporter(hop: StampedHop):
    registry = CollectorRegistry()
    registry.register(hop)
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def _stack(prometheus: str) -> Stack:
    """gateway and ledger read from `prometheus` by selector; order scraped by the runner from its /metrics."""
    return Stack.model_validate({
        "edge": {"address": "127.0.0.1:1", "method": "shop.v1.Cart/Add"},
        "hops": [{"name": "gateway", "selector": '{job="gw"}'},
                 {"name": "order", "metrics": ["http://127.0.0.1:1/metrics"]},
                 {"name": "ledger", "selector": '{job="ledger"}'}],
        "prometheus": prometheus,
    })  # fmt: skip


def _stack_update(stack: Stack) -> dict:
    order = K("srv", "order")
    return {**_update([(0.0, {order: 0.0}), (1.0, {order: 5.0})]), "hops": [h.name for h in stack.hops],
            "stack": stack}  # fmt: skip


def test_the_live_line_shows_the_rates_prometheus_reads_for_selector_hops_during_the_trial(tmp_path):
    """Before: `gateway=—/s … ledger=—/s` for every tick, the hops being read from Prometheus only after the
    trial. Now each tick asks that Prometheus once for every selector hop, and the line shows the rates it
    read and says where from; a hop the runner scrapes keeps its own numbers."""
    from harness.drills.readings.hop_rates import WINDOW_SCRAPES

    gw = StampedHop("gateway", {"drill_server_calls": 20.0, "drill_fault_hits": 3.0}, {"process_open_fds": 41.0})
    ledger = StampedHop("ledger", {"drill_server_calls": 7.0}, {})
    with exporter(gw) as gw_addr, exporter(ledger) as ledger_addr, \
            LocalPrometheus(tmp_path / "prom", targets={"gw": [gw_addr], "ledger": [ledger_addr]}) as prom:
        stack = _stack(prom.url)
        console = Console(record=True, width=400)
        view = LiveView("compose", console=console, enabled=False)
        view.PRINT_EVERY_S = 0.0
        update = _stack_update(stack)
        deadline = time.monotonic() + 60  # Prometheus' first scrapes come ~5 s after its start
        with view:
            last = ""
            while " gateway=20/s order=5/s ledger=7/s " not in last:  # a line per update
                assert time.monotonic() < deadline, last
                time.sleep(0.2)
                view.update(update)
                last = console.export_text(clear=False).strip().splitlines()[-1]
            nums = last_second(update, view.hop_rates.latest())
            rich = Console(record=True, width=200)
            rich.print(view.render(update, nums))
    gateway, ledger_nums = nums["hops"]["gateway"], nums["hops"]["ledger"]
    assert gateway["rps"] == pytest.approx(20.0, rel=1e-6) and gateway["hits"] == pytest.approx(3.0, rel=1e-6)
    assert gateway["fds"] == 41.0 and gateway["retry"] is None and gateway["breaker"] is None
    assert ledger_nums["rps"] == pytest.approx(7.0, rel=1e-6) and ledger_nums["hits"] is None
    assert nums["hops"]["order"]["rps"] == 5.0  # scraped by the runner: its own second, not Prometheus'
    assert " gateway=20/s order=5/s ledger=7/s (gateway, ledger: irate over " in last, last
    window = WINDOW_SCRAPES * 1.0  # LocalPrometheus scrapes every second: the window holds WINDOW_SCRAPES of them
    assert f"irate over {window:g} s from {prom.url}, read " in last, last
    assert "per service (gateway, ledger: irate over" in rich.export_text()


def test_a_prometheus_that_does_not_answer_never_holds_up_a_tick(monkeypatch):
    """A Prometheus that accepts connections and never answers: an update returns while its query is still out,
    the line says it is still asking, and once the query times out, why.

    Shown by order, not by how long an update took (a busy box can stall any update for a second or more): the
    first query is held at a gate the test opens only after that update returned and printed its line, so an
    update that waited for its query would find it unanswered for the gate's whole bound (and then print the
    error, not "asking")."""
    from harness.drills.readings import hop_rates
    from harness.drills.readings.hop_rates import QUERY_TIMEOUT_S

    gate, passed = threading.Event(), threading.Event()
    ask = hop_rates.HopRates._ask

    def held_ask(self) -> None:
        gate.wait(60)  # far beyond any stall: an update that waits for its query is caught, not hung
        passed.set()
        ask(self)

    monkeypatch.setattr(hop_rates.HopRates, "_ask", held_ask)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # connections complete in the backlog; nobody reads a request
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        console = Console(record=True, width=400)
        view = LiveView("compose", console=console, enabled=False)
        view.PRINT_EVERY_S = 0.0
        update = _stack_update(_stack(url))
        with view:
            view.update(update)
            # the update sent its query and returned without it: still at the gate, nothing read, nothing failed
            held = not passed.is_set()
            assert view.hop_rates is not None and view.hop_rates.latest() is None and view.hop_rates.error is None
            gate.set()
            deadline = time.monotonic() + 3 * QUERY_TIMEOUT_S + 10  # the query's own timeouts, and a busy box
            while view.hop_rates.error is None:
                assert time.monotonic() < deadline, "the query never timed out"
                time.sleep(0.1)
                view.update(update)
            view.update(update)
    assert held, "the first update returned only after its query had passed the gate"
    lines = console.export_text().strip().splitlines()
    assert f"gateway=—/s order=5/s ledger=—/s (gateway, ledger: asking {url})" in lines[0], lines[0]
    assert f"(gateway, ledger: asking {url} (cannot reach Prometheus at {url}: " in lines[-1], lines[-1]
