"""The MTTR board's logic on recorded runs, exactly: `promtool test rules` evaluates the real rule files and the
board's panel queries (with the dashboard's default variables) on a recorded drill's per-second counts, and
every value must equal what the runner's own analysis (harness.drills.analysis.trial) computes from the same series.

The recordings (`recorded/*.series.json`, made as `recorded_series.py` says) are real `drill run`s of
`plans/storm-3hop.yaml`: retry-storm on 3 hops, naive and resilient, the SLO and window the dashboards default
to. How the counts are laid out in time, and what PromQL's `rate()` does with them, is in `promtool_board.py`.

Where the board equals the runner by construction, the expected value is the runner's: seconds in breach,
peak, the SLO error ratio at every second, error rate over the fault window (blast radius), amplification per
hop over the fault window, the fast-burn page. Two documented differences are asserted as what they are, not
approximated: the board has no `min_calls` (a window with 1–2 calls has a board value and no runner state; none
in these recordings), and `rate()` does not extrapolate a counter below its zero point, so at the seconds
where a status first appears the board's ratio is PromQL's, not the runner's (the test prints each such second
with both values). The wiring (real processes → real Prometheus → every query returns data) is
test_live_dashboards.py's.
"""

from __future__ import annotations

import functools
import pathlib
import subprocess
from collections.abc import Callable

import pytest
import yaml

from harness.dashboards import build_all, default_values, iter_queries, substitute
from harness.dashboards.mttr import UID
from harness.dashboards.rules import BURN_ALERTS, PLAN
from harness.drills.analysis import trial as analysis
from tests.observability.promtool_board import (
    RULES,
    Case,
    Ratio,
    board_time,
    error_ratio,
    expr_test,
    load_cases,
    run_promtool,
)

CASES = load_cases()
IDS = [c.id for c in CASES]
MODEL = next(m for m in build_all().values() if m["uid"] == UID)
DEFAULTS = default_values(MODEL)
WINDOW_RANGE = PLAN.window_s + 1  # the rules' `[3s]`


def _panel(title: str) -> str:
    return next(q.expr for q in iter_queries(MODEL) if q.kind == "panel" and q.title == title)


def _ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def _seconds(case: Case) -> range:
    """Evaluation times that hold a runner window: board_time(0) … board_time(n − 1)."""
    return range(board_time(0), board_time(case.n - 1) + 1)


def _per_case(build: Callable[[Case], object]) -> Callable[[Case], object]:
    """Memoise a builder per recording (a Case holds dicts: not hashable)."""
    memo: dict[str, object] = {}
    return lambda case: memo[case.id] if case.id in memo else memo.setdefault(case.id, build(case))


@_per_case
def _board_rates(case: Case) -> dict[int, Ratio]:
    """The board's SLO error ratio at every evaluation time that holds a runner window."""
    return {at: error_ratio(case, at, WINDOW_RANGE, case.slo.traffic) for at in _seconds(case)}


def _runner_rates(case: Case, min_calls: float = 0.0) -> dict[int, float | None]:
    """The runner's SLO error rate of the second each evaluation time holds (`min_calls` 0: the board has none)."""
    rates = analysis.error_rate_series(case.series, case.slo.traffic, min_calls, case.slo.window_s)
    return {at: rates[at - board_time(0)] for at in _seconds(case)}


# --- the checks promtool runs, per test -----------------------------------------------------------------
@_per_case
def _every_second_checks(case: Case) -> list[dict]:
    label = f'{{config="{case.config}"}}'
    error = substitute(_panel("Error rate by config (CANCELLED excluded) vs SLO"), DEFAULTS)
    breach = substitute(_panel("In SLO breach"), DEFAULTS)
    rule = f"drill:slo_error_ratio:rate3s{label}"
    tests = [expr_test(rule, board_time(-1), [])]  # the baseline alone: no rate
    for at, ratio in _board_rates(case).items():
        value = ratio.value
        tests.append(expr_test(rule, at, [] if value is None else [(rule, value)]))
        tests.append(expr_test(error, at, [] if value is None else [(label, value)]))
        tests.append(expr_test(breach, at, [] if value is None else [(label, float(value > case.slo.max_error_rate))]))
    return tests


def _stats(case: Case) -> tuple[int, float]:
    """Seconds in breach and peak: the count and the maximum of the board's per-second ratios."""
    values = [r.value for r in _board_rates(case).values() if r.value is not None]
    return sum(1 for v in values if v > case.slo.max_error_rate), max(values)


@_per_case
def _stat_checks(case: Case) -> list[dict]:
    """At the runner's last second, over a range that holds the run."""
    bad, peak = _stats(case)
    label, end, range_ = f'{{config="{case.config}"}}', board_time(case.n - 1), f"{case.n}s"
    return [
        expr_test(substitute(_panel("Seconds in breach over the range"), DEFAULTS, range_=range_), end,
                  [(label, float(bad))]),
        expr_test(substitute(_panel("Peak error rate over the range"), DEFAULTS, range_=range_), end,
                  [(label, peak)]),
    ]  # fmt: skip


def _fault_window(case: Case) -> tuple[float, dict[str, float]]:
    """The runner's blast radius and amplification per hop over its fault window, unrounded."""
    s = case.series
    win = analysis._window(s, s.fault_on, s.fault_off)
    edge = sum(analysis.rps_series(s, "all")[i] for i in win)
    amp = {hop: sum(v[i] for i in win) / edge for hop, v in analysis.hop_series(s).items()}
    return analysis.aggregate_error_rate(s, s.fault_on, s.fault_off, "organic"), amp


@_per_case
def _fault_checks(case: Case) -> list[dict]:
    blast, amp = _fault_window(case)
    end, range_ = board_time(case.n - 1), f"{case.n}s"
    return [
        expr_test(substitute(_panel("Error rate over the fault window"), DEFAULTS, range_=range_), end,
                  [(f'{{config="{case.config}"}}', blast)]),
        expr_test(substitute(_panel("Amplification over the fault window"), DEFAULTS, range_=range_), end,
                  [(f'{{service="{hop}"}}', v) for hop, v in sorted(amp.items())]),
    ]  # fmt: skip


@functools.cache
def _pages() -> tuple[tuple[str, int, int, float, dict], ...]:
    """(scale, short range s, long range s, threshold, rule) of each `DrillSLOFastBurn` page."""
    rules = {(r["alert"], r["labels"]["scale"]): r for f in RULES for g in yaml.safe_load(f.read_text())["groups"]
             for r in g["rules"] if "alert" in r}  # fmt: skip
    seconds = {"s": 1, "m": 60, "h": 3600}
    return tuple(
        (scale, int(short[:-1]) * seconds[short[-1]], int(long[:-1]) * seconds[long[-1]], factor * PLAN.budget,
         rules[(alert, scale)])
        for alert, scale, short, long, factor, _ in BURN_ALERTS if alert == "DrillSLOFastBurn"
    )  # fmt: skip


def _page_windows(case: Case, at: int) -> list[tuple[str, float, dict, list[Ratio]]]:
    """Each page at `at`: (scale, threshold, rule, [short-window ratio, long-window ratio])."""
    return [(scale, threshold, rule, [error_ratio(case, at, w, case.slo.traffic) for w in (short, long)])
            for scale, short, long, threshold, rule in _pages()]  # fmt: skip


@_per_case
def _alert_checks(case: Case) -> list[dict]:
    alerts = []
    for at in range(1, board_time(case.n - 1) + 2):
        expected = []
        for _, threshold, rule, values in _page_windows(case, at):
            if all(v.above(threshold) for v in values):
                summary = rule["annotations"]["summary"].replace("{{ $labels.config }}", case.config)
                expected.append({"exp_labels": {**rule["labels"], "config": case.config},
                                 "exp_annotations": {**rule["annotations"], "summary": summary}})  # fmt: skip
        alerts.append({"eval_time": f"{at}s", "alertname": "DrillSLOFastBurn", "exp_alerts": expected})
    return alerts


_SHARED: dict[str, subprocess.CompletedProcess] = {}


@pytest.fixture
def promtool(case: Case, tmp_path_factory: pytest.TempPathFactory, tmp_path: pathlib.Path) -> Callable[..., None]:
    """Asserts that promtool accepts a test's checks. Every check of a recording runs in one promtool run (its
    rules evaluated once); a test's own checks run again, alone, only when that run failed, to say whose."""
    if case.id not in _SHARED:
        exprs = _every_second_checks(case) + _stat_checks(case) + _fault_checks(case)
        _SHARED[case.id] = run_promtool(case, tmp_path_factory.mktemp("board"), exprs=exprs,
                                        alerts=_alert_checks(case))  # fmt: skip

    def check(exprs: list[dict] = (), alerts: list[dict] = ()) -> None:
        if _SHARED[case.id].returncode != 0:
            _ok(run_promtool(case, tmp_path, exprs=exprs, alerts=alerts))

    return check


@pytest.fixture(params=CASES, ids=IDS)
def case(request) -> Case:
    c = request.param
    assert (c.slo.max_error_rate, c.slo.window_s, c.slo.traffic) == (PLAN.budget, PLAN.window_s, PLAN.traffic), (
        "the board's defaults are the shipped plan's SLO: record a plan with the same"
    )
    return c


# --- the tests ------------------------------------------------------------------------------------------
def test_the_cut_recording_still_gives_the_runs_results(case: Case) -> None:
    """The fixture lost nothing the board reads: the runner's analysis of it gives the run's own results.json."""
    got = analysis.analyze_run(case.series, case.slo, case.hops)
    assert {k: getattr(got, k) for k in case.results} == case.results


def test_slo_error_ratio_and_breach_timeline_at_every_second(case: Case, promtool) -> None:
    """`drill:slo_error_ratio:rate3s`, the board's error-rate panel and its breach timeline at every second: the
    runner's error rate wherever no counter's extrapolation was cut at its zero point; where one was, PromQL's
    value (printed beside the runner's)."""
    runner, cut = _runner_rates(case), []
    for at, ratio in _board_rates(case).items():
        if ratio.cut:
            cut.append(f"{at}s board {ratio.value} runner {runner[at]}")
        else:
            assert ratio.value == runner[at], (at, ratio.value, runner[at])
    print(f"\n{case.id}: {len(runner) - len(cut)} of {len(runner)} seconds are the runner's by construction; "
          f"where a counter starts in the window: {cut}")  # fmt: skip
    promtool(exprs=_every_second_checks(case))


def test_seconds_in_breach_and_peak_are_the_runners(case: Case, promtool) -> None:
    """Over a range holding the run (its last evaluation holds the runner's last second), the stat panels give the
    count and the maximum of the board's per-second ratios: the runner's bad seconds and peak, except where a
    second's ratio is PromQL's (printed: in these recordings neither changes). `min_calls` (the runner's, not
    the board's) is met by every window that has calls."""
    known = _runner_rates(case, case.slo.min_calls)
    rates = _board_rates(case)
    assert all(known[at] is not None for at, r in rates.items() if r.value is not None), (
        "a window below min_calls: the board counts it, the runner does not"
    )
    bad, peak = _stats(case)
    runner_bad = sum(1 for s in analysis.slo_states(case.series, case.slo) if s == analysis.BAD)
    runner_peak = max(v for v in known.values() if v is not None)
    print(f"\n{case.id}: seconds in breach {bad} (runner {runner_bad}), peak {peak:.4f} (runner {runner_peak:.4f})")
    promtool(exprs=_stat_checks(case))


def test_fault_window_panels_are_the_blast_radius_and_amplification(case: Case, promtool) -> None:
    """Counter increases between the first and the last second `drill_fault_active` is 1 (`offset 1s` for the
    baseline): the runner's fault window exactly. Error rate of organic traffic = blast radius; per hop,
    attempts ÷ the edge's first attempts (all traffic) = amplification, unrounded."""
    blast, amp = _fault_window(case)
    assert {h: round(v, 3) for h, v in amp.items()} == analysis.amplification(case.series)
    print(f"\n{case.id}: blast radius {blast:.4f}, amplification { {h: round(v, 4) for h, v in amp.items()} }")
    promtool(exprs=_fault_checks(case))


def test_fast_burn_page_fires_exactly_where_both_windows_burn(case: Case, promtool) -> None:
    """`DrillSLOFastBurn` at every second: firing iff the organic edge ratio is above the burn threshold over both
    of its windows, as recorded at that step. promtool evaluates every group at every step of its
    `evaluation_interval` (1 s), whatever the group's own interval (live, the workbook-scale groups run every
    15 s). The drill-scale page's short window is the runner's SLO window; its long one (36 s) holds every
    second so far of these short runs: the runner's error rate since the start."""
    since_start = analysis.error_rate_series(case.series, case.slo.traffic, 0.0, case.n)
    fired = []
    for at in range(1, board_time(case.n - 1) + 2):
        for scale, threshold, _, values in _page_windows(case, at):
            if scale == "drill" and values[1].values and at - board_time(0) < case.n:
                runner = since_start[at - board_time(0)]
                assert all(v == pytest.approx(runner, rel=1e-12) for v in values[1].values), (at, values[1], runner)
            if all(v.above(threshold) for v in values):
                fired.append(f"{at}s {scale}")
    print(f"\n{case.id}: page firing at {fired}")
    promtool(alerts=_alert_checks(case))


def test_promtool_tells_the_runners_window_from_another(tmp_path: pathlib.Path) -> None:
    """The comparison has teeth: the runner's error rate over 1 s instead of the plan's 2 s fails at every second
    where the two differ (and only there: the same checks with the 2-s values pass above)."""
    case = CASES[0]
    wrong = analysis.error_rate_series(case.series, case.slo.traffic, 0.0, 1)
    right = _board_rates(case)
    rule = f'drill:slo_error_ratio:rate3s{{config="{case.config}"}}'
    tests = [expr_test(rule, at, [(rule, wrong[at - board_time(0)])]) for at in _seconds(case)]
    differ = sum(1 for at in _seconds(case) if wrong[at - board_time(0)] != right[at].value)
    proc = run_promtool(case, tmp_path, exprs=tests)
    failed = (proc.stdout + proc.stderr).count("    expr: ")
    print(f"\n{differ} of {len(tests)} seconds differ between the 1-s and the 2-s window; promtool failed {failed}")
    assert differ >= len(tests) // 2 and failed == differ, proc.stdout[-3000:] + proc.stderr[-3000:]
