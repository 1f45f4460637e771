"""Issue 15's "done when": a real drill, the real Prometheus with the real rules, every dashboard query
with the dashboard's DEFAULT variable values, compared with the runner's own numbers.

The drill is `plans/storm-3hop.yaml` (retry-storm on 3 hops, naive vs resilient, same SLO and
window as retry-storm, whose values the dashboards default to), run by the drill runner with
`--prometheus auto` (`harness.drills.cli_run._prometheus`: the runner's local Prometheus loads
the compose rules). Each configuration is evaluated over its own run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import pathlib
from collections.abc import Iterator

import pytest

from harness.dashboards import build_all, default_values, iter_queries, substitute
from harness.drills import analysis
from harness.drills.cli_run import _prometheus
from harness.drills.plan import load_plan
from harness.drills.runner import Runner
from harness.drills.series import RunSeries
from harness.procs.prometheus import LocalPrometheus, finite_values

pytestmark = [pytest.mark.slow, pytest.mark.scraped_here]

PLAN = pathlib.Path(__file__).parent / "plans/storm-3hop.yaml"


@dataclasses.dataclass
class Storm:
    prom: LocalPrometheus
    plan: object
    results: dict
    series: dict[str, list[RunSeries]]  # one trial per configuration here
    windows: dict[str, tuple[float, float]]

    def span(self, config: str) -> tuple[float, float]:
        """This configuration's run in epoch seconds: warm-up start to recovery end."""
        on, off = self.windows[config]
        ph = self.plan.phases
        return on - ph.warmup + 1, off + ph.recovery


@pytest.fixture(scope="module")
def storm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storm]:
    out = tmp_path_factory.mktemp("storm")
    prom = _prometheus(argparse.Namespace(prometheus="auto", prometheus_sd=None), out, print)
    assert prom is not None, "prometheus not on PATH"
    try:
        plan = load_plan(str(PLAN))
        runner = Runner(plan, out, log=print, prometheus=prom)
        results = asyncio.run(runner.run())
        yield Storm(prom, plan, results, runner.series, runner.windows)
    finally:
        prom.stop()


def _model(uid: str) -> dict:
    return next(m for m in build_all().values() if m["uid"] == uid)


def _panel(uid: str, title: str) -> str:
    return next(q.expr for q in iter_queries(_model(uid)) if q.kind == "panel" and q.title == title)


def _instant(storm: Storm, uid: str, title: str, config: str, label: str = "config") -> dict[str, float]:
    """A stat panel's default query over `config`'s run: label value -> number."""
    start, end = storm.span(config)
    expr = substitute(_panel(uid, title), default_values(_model(uid)), range_=f"{int(end - start)}s")
    return {s["metric"].get(label, ""): float(s["value"][1]) for s in storm.prom.query(expr, at=end)}


def _rates(storm: Storm, config: str, window: int | None = None) -> list[float | None]:
    """The runner's per-second SLO error rate over `window` seconds (default: the plan's window)."""
    s, slo = storm.series[config][0], storm.plan.slo
    return analysis.error_rate_series(s, slo.traffic, slo.min_calls, window or slo.window_s)


def _two_calls(storm: Storm, config: str) -> float:
    """Two calls' worth of the SLO traffic's error rate over the plan window (one sampler may hold a
    call or two more or fewer than the other)."""
    s, slo = storm.series[config][0], storm.plan.slo
    planned = (s.planned_rps or {}).get(slo.traffic) or sum((s.planned_rps or {}).values())
    return 2 / (planned * slo.window_s)


def _runner_breach(storm: Storm, config: str) -> tuple[int, float]:
    """The runner's bad seconds and peak SLO error rate (its own per-second series and functions)."""
    s, slo = storm.series[config][0], storm.plan.slo
    states = analysis.slo_states(s, slo)
    rates = [r for r in _rates(storm, config) if r is not None]
    return sum(1 for x in states if x == analysis.BAD), max(rates, default=0.0)


def _ambiguous_seconds(storm: Storm, config: str) -> tuple[int, int, float]:
    """(crossings, near, band): how often the runner's per-second state crosses between bad and not
    bad, and how many of its seconds have an error rate within two calls' worth (`band`) of the SLO."""
    s, slo = storm.series[config][0], storm.plan.slo
    bad = [x == analysis.BAD for x in analysis.slo_states(s, slo)]
    crossings = sum(1 for a, b in zip(bad, bad[1:], strict=False) if a != b)
    band = _two_calls(storm, config)
    near = sum(1 for r in _rates(storm, config) if r is not None and abs(r - slo.max_error_rate) <= band)
    return crossings, near, band


CONFIGS = ("naive", "resilient")


def _report(storm: Storm, config: str) -> dict:
    res = storm.results["configs"][config]
    bad, peak = _runner_breach(storm, config)
    got = {
        "seconds": _instant(storm, "drill-mttr", "Seconds in breach over the range", config).get(config, 0.0),
        "peak": _instant(storm, "drill-mttr", "Peak error rate over the range", config).get(config),
        "fault_rate": _instant(storm, "drill-mttr", "Error rate over the fault window", config).get(config),
        "amp": _instant(storm, "drill-mttr", "Amplification over the fault window", config, "service"),
        # DESIGN §10's one amplification, as the runner computed it for results.json
        "one": res["amplification_by_hop"],
        "bad": bad,
        "runner_peak": peak,
    }
    print(
        f"\n{config}: seconds in breach board {got['seconds']:.0f} runner {bad} (MTTR {res['mttr_s']}, breached "
        f"{res['breached']}); peak board {got['peak']} runner {peak:.4f}; fault-window error board "
        f"{got['fault_rate']} runner blast radius {res['blast_radius']}; amplification board "
        f"{ {k: round(v, 3) for k, v in got['amp'].items()} } runner (results.json) {got['one']}"
    )
    rates = _rates(storm, config)
    print(f"{config}: runner's per-second error rates {[None if r is None else round(r, 3) for r in rates]}")
    return got


def _peak_noise(storm: Storm, config: str) -> float:
    """Three binomial standard deviations of the runner's peak error rate, sqrt(p(1-p)/n) with n the
    calls in its window: two samplers whose windows hold different calls differ by that much."""
    s, slo = storm.series[config][0], storm.plan.slo
    rates = _rates(storm, config)
    known = [(r, i) for i, r in enumerate(rates) if r is not None]
    if not known:
        return 0.0
    p, i = max(known)
    calls = analysis.rps_series(s, slo.traffic)
    n = sum(calls[max(0, i - slo.window_s + 1) : i + 1])
    return 3 * math.sqrt(p * (1 - p) / n) if n > 0 else 1.0


def _swing(values: list[float | None], win: range) -> float:
    """The largest change between adjacent seconds around each edge of `win`, summed over both edges:
    what a one-second shift of each edge can trade."""

    def at(edge: int) -> float:
        pairs = [(values[i - 1], values[i]) for i in range(max(1, edge - 1), min(len(values), edge + 2))]
        return max((abs(b - a) for a, b in pairs if a is not None and b is not None), default=float("inf"))

    return at(win.start) + at(win.stop)


def _edge_swing(storm: Storm, config: str) -> float:
    """How far the fault window's error rate can move if each of its edges shifts by up to a second."""
    s = storm.series[config][0]
    win = analysis._window(s, s.fault_on, s.fault_off)
    return _swing(_rates(storm, config), win) / max(1, len(win))


def _amp_swing(storm: Storm, config: str, hop: str) -> float:
    """How far a hop's amplification over the fault window can move if each edge shifts by up to a
    second: the hop's change in attempts/s across the edges ÷ the edge's first attempts in the window."""
    s = storm.series[config][0]
    win = analysis._window(s, s.fault_on, s.fault_off)
    edge = sum(analysis.rps_series(s, "all")[i] for i in win)
    return _swing(analysis.hop_series(s).get(hop, []), win) / edge if edge else float("inf")


@pytest.mark.parametrize("config", CONFIGS)
def test_fault_window_panels_agree_with_the_runner(storm: Storm, config: str) -> None:
    """Blast radius and amplification per hop (DESIGN §10's one definition) within what a one-second
    shift of the fault window's edges can move, from the runner's own per-second series.

    Prometheus and the runner's scraper are two samplers a fraction of a second apart: Prometheus's
    fault window is the seconds its own scrape of `drill_fault_active` saw 1, the runner's is the
    phase change rounded to its grid, so the two windows' edges differ by up to a second. During a
    storm the rates move ~10 % per second, so one shifted second of a 6-s fault window moves the
    blast radius by a few pp (measured 0.1, 0.1, 2.3 and 3.1 pp on four runs) and the deepest hop's
    ratio by up to ~0.15 (measured ledger 2.26 vs 2.12; 2.34 vs 2.50 in a CI rehearsal, past a flat
    0.15). Amplification is allowed 0.05 plus the hop's change in attempts/s across each edge ÷ the
    edge's first attempts in the window. The blast radius is allowed 2 pp plus what a
    one-second shift of each edge can move (the runner's rate change across the edge ÷ the window's
    seconds): a flat 5 pp failed once in a CI rehearsal, 78.8 vs 86.8 %, when resilient's breakers
    took the error rate from 35 % to 100 % within the first two fault seconds.
    """
    res, got = storm.results["configs"][config], _report(storm, config)
    allowed = 0.02 + _edge_swing(storm, config)
    print(f"{config}: fault-window error allowed {allowed:.3f} apart")
    assert got["fault_rate"] is not None and abs(got["fault_rate"] - res["blast_radius"]) <= allowed
    for hop, value in got["one"].items():
        allowed_amp = 0.05 + _amp_swing(storm, config, hop)
        print(f"{config}: {hop} amplification allowed {allowed_amp:.3f} apart")
        assert abs(got["amp"][hop] - value) <= allowed_amp, (hop, got["amp"], got["one"])


@pytest.mark.parametrize("config", CONFIGS)
def test_breach_seconds_and_peak_agree_with_the_runner(storm: Storm, config: str) -> None:
    """Seconds in breach within one second per crossing of the threshold (at least 2), plus one per
    second whose error rate is within two calls of the SLO; the peak within 6 pp or three binomial
    standard deviations of the runner's peak, whichever is larger (a CI rehearsal: board 58.7 % vs
    runner 50.0 %, from a window of a few dozen organic calls during the storm). Prometheus' 1-s
    evaluations sit a fraction of a second from the runner's seconds, so a board second's rate lies
    between two adjacent runner seconds': it can disagree where those two are on opposite sides of
    the SLO, or where a call more or less in the window flips it. A clean breach crosses twice
    (onset, end); a storm's tail at the threshold adds more (a CI run: board 12, runner 15).
    A per-second peak taken by two samplers at different phases of the second differs by the rate's
    change within that second, which at a storm's onset is large: measured 0.3, 2.1, 2.8 and 5.5 pp
    on four runs."""
    got = _report(storm, config)
    crossings, near, band = _ambiguous_seconds(storm, config)
    print(f"{config}: the runner's state crosses the SLO {crossings} times; {near} seconds within {band:.3f} of it")
    assert abs(got["seconds"] - got["bad"]) <= max(2, crossings) + near
    allowed = max(0.06, _peak_noise(storm, config))
    print(f"{config}: peak allowed {allowed:.3f} apart")
    assert got["peak"] is not None and abs(got["peak"] - got["runner_peak"]) <= allowed


def test_per_hop_error_rate_is_nonzero_where_the_hop_sheds(storm: Storm) -> None:
    start, end = storm.span("naive")
    shed = {s["metric"]["service"]: float(s["value"][1])
            for s in storm.prom.query(f"sum by (service) (increase(drill_server_shed_total[{int(end - start)}s]))",
                                      at=end)}  # fmt: skip
    shedding = [hop for hop, n in shed.items() if n > 0]
    assert shedding, f"the naive storm shed nothing: {shed}"
    uid = "drill-mttr"
    title = "Error rate per hop (shed included, CANCELLED excluded)"
    expr = substitute(_panel(uid, title), default_values(_model(uid)))
    result = storm.prom.query_range(expr, start, end)
    for hop in shedding:
        values = finite_values([s for s in result if s["metric"]["service"] == hop])
        print(f"\n{hop}: shed {shed[hop]:.0f}, peak organic error rate on the per-hop panel {max(values):.3f}")
        assert max(values) > 0


@pytest.mark.parametrize("config", CONFIGS)
def test_fast_burn_fires_for_organic_edge_traffic_iff_the_runner_saw_a_breach(storm: Storm, config: str) -> None:
    start, end = storm.span(config)
    fired = storm.prom.query_range(
        f'ALERTS{{alertname="DrillSLOFastBurn", scale="drill", alertstate="firing", config="{config}"}}',
        start,
        end + 10,
    )
    breached = storm.results["configs"][config]["breached"]
    must, must_not = _page_expected(storm, config)
    print(f"\n{config}: DrillSLOFastBurn firing samples {len(finite_values(fired))}, runner breached {breached}, "
          f"runner's own burn: must fire {must}, must not {must_not}")  # fmt: skip
    if config == "naive":
        assert breached and finite_values(fired), "naive breaches: the organic fast-burn page must fire"
    if must:
        assert finite_values(fired), "both windows burned past the budget in the runner's series"
    if must_not:
        assert not finite_values(fired), "the page fired where the runner saw no sustained burn"


def _page_expected(storm: Storm, config: str) -> tuple[bool, bool]:
    """(must fire, must not fire) from the runner's own series at the page's two windows (12 × and 1 ×
    the plan window), with a margin for the two samplers: 1 pp on the long window, two calls on the
    short one. A breach of a few seconds is a breach for the runner but need not burn the long
    window's budget: the page is a multiwindow burn-rate alert and rightly stays quiet then."""
    slo = storm.plan.slo
    band = _two_calls(storm, config)
    long, short = _rates(storm, config, 12 * (slo.window_s + 1)), _rates(storm, config)
    budget = slo.max_error_rate
    pairs = [(a, b) for a, b in zip(long, short, strict=True) if a is not None and b is not None]
    must = any(a > budget + 0.01 and b > budget + band for a, b in pairs)
    must_not = not any(a > budget - 0.01 and b > budget - band for a, b in pairs)
    return must, must_not


def test_every_dashboard_query_with_its_defaults_returns_data(storm: Storm) -> None:
    start, _ = storm.span("naive")
    _, end = storm.span("resilient")
    empty, count = [], 0
    for model in build_all().values():
        values = default_values(model)
        for q in iter_queries(model):
            if q.kind == "variable":
                continue
            count += 1
            expr = substitute(q.expr, values, range_=f"{int(end - start)}s")
            got = storm.prom.query(expr, at=end) if q.instant else storm.prom.query_range(expr, start, end)
            if not finite_values(got):
                empty.append(q.name)
            elif q.kind == "panel":
                print(f"{q.name}: max {max(finite_values(got)):.4g}")
    print(f"\n{count} queries with defaults, empty: {empty}")
    must = [n for n in empty if n.startswith("drill-mttr") and "Retries" not in n and "budget" not in n]
    assert not must, must

