"""Every query of every dashboard returns data on a real Prometheus that watched a real drill,
and the error-rate panel equals the error rate computed from the client counters (CANCELLED excluded).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from harness.core.status import SERVER_FAULT_CODES, error_rate
from harness.dashboards import build_all, iter_queries, substitute
from harness.dashboards.rules import plan_window_rules
from harness.procs.prometheus import finite_values
from tests.observability.live_drill import CONFIG, SERVICE, DrillRun, LiveDrill

pytestmark = [pytest.mark.slow, pytest.mark.scraped_here]

#: Every caller and traffic class (this drill's loadgen is not the runner's); the plan's SLO and window.
VARIABLES = {"slo": "0.05", "window": "3s"}
TOLERANCE = 0.01  # 1 percentage point


@pytest.fixture(scope="module")
def drill() -> Iterator[DrillRun]:
    live = LiveDrill()
    try:
        yield live.run()
    finally:
        live.stop()


def _evaluate(run: DrillRun, kind: str, expr: str, instant: bool) -> list[float] | list[str]:
    if kind == "variable":
        m = re.fullmatch(r"label_values\((?:\s*(.+?)\s*,)?\s*(\w+)\s*\)", expr)
        assert m, f"unsupported variable query {expr!r}"
        return run.prom.label_values(m.group(2), match=m.group(1))
    promql = substitute(expr, VARIABLES, range_="5m")
    if instant:
        return finite_values(run.prom.query(promql, at=run.eval_at))
    return finite_values(run.prom.query_range(promql, run.start - 5, run.eval_at, step="1s"))


def test_every_query_of_every_dashboard_returns_data(drill: DrillRun) -> None:
    empty, count = [], 0
    for model in build_all().values():
        for q in iter_queries(model):
            count += 1
            if "Shed calls" in q.title:  # this drill never sheds; test_mttr_board's storm does
                continue
            if not _evaluate(drill, q.kind, q.expr, q.instant):
                empty.append(f"{q.name}: {q.expr}")
    print(f"\n{count} dashboard queries evaluated, {count - len(empty)} returned data")
    assert count >= 40
    assert not empty, "queries without data:\n" + "\n".join(empty)


def _naive_rate(counts: dict[str, float]) -> float:
    total = sum(counts.values())
    return sum(v for k, v in counts.items() if k in SERVER_FAULT_CODES) / total


def _class_rates(result: list[dict]) -> dict[str, dict[str, float]]:
    by_traffic: dict[str, dict[str, float]] = {}
    for s in result:
        by_traffic.setdefault(s["metric"]["traffic"], {})[s["metric"]["status_class"]] = float(s["value"][1])
    return by_traffic


def test_class_rules_over_the_whole_drill_give_the_counters_error_rate(drill: DrillRun) -> None:
    """The plan-window class rules, evaluated over a window that holds the whole drill, are the counters' ratio.

    Every loadgen series was created at 0 and scraped before the first call, and the final
    counts were scraped before `eval_at`, so each rule's `rate()` over that window is the
    final count over one shared duration: the ratio is exact, not a sampling estimate.
    (Summing the recorded 3-s rates over the drill instead is an estimate: on a loaded
    2-core CI box a late scrape of this busy process moved it 2 pp.)
    """
    span = f"{int(drill.eval_at - drill.start) + 8}s"
    selector = f'service="{SERVICE}",config="{CONFIG}"'
    result = []
    for rule in plan_window_rules(span):
        if rule["record"] != f"drill:client_calls:rate{span}":
            continue
        expr = rule["expr"].replace("drill_client_calls_total{", f"drill_client_calls_total{{{selector},")
        expr = expr.replace("drill_client_calls_total[", f"drill_client_calls_total{{{selector}}}[")
        for s in drill.prom.query(expr, at=drill.eval_at):
            s["metric"]["status_class"] = rule["labels"]["status_class"]
            result.append(s)
    by_traffic = _class_rates(result)
    assert set(by_traffic) == {"organic", "drill"}, result
    for traffic, classes in sorted(by_traffic.items()):
        value = classes["server-fault"] / (sum(classes.values()) - classes["cancelled"])
        counts = drill.client_counts(traffic)
        reference = error_rate(counts)
        print(
            f"\n{traffic}: rules {value:.6f} counters {reference:.6f} "
            f"(naive with CANCELLED {_naive_rate(counts):.4f}; cancelled {counts.get('CANCELLED', 0):.0f} "
            f"of {sum(counts.values()):.0f})"
        )
        assert value == pytest.approx(reference, rel=1e-9)
    counts = drill.client_counts()
    assert counts["CANCELLED"] > 0.05 * sum(counts.values()), "the drill must cancel a real share of calls"
    # The check has teeth: counting CANCELLED in the denominator would miss by more than a point.
    assert abs(_naive_rate(counts) - error_rate(counts)) > TOLERANCE


def test_recorded_error_ratio_excludes_cancelled_at_every_second(drill: DrillRun) -> None:
    """`drill:client_error_ratio:rate3s` is server-fault ÷ (all − CANCELLED) of the recorded classes, each second."""
    selector = f'service="{SERVICE}",config="{CONFIG}",traffic="drill"'
    ratio = drill.prom.query_range(
        f"drill:client_error_ratio:rate3s{{{selector}}}", drill.start, drill.eval_at, step="1s"
    )
    classes = drill.prom.query_range(f"drill:client_calls:rate3s{{{selector}}}", drill.start, drill.eval_at, step="1s")
    per_second: dict[float, dict[str, float]] = {}
    for s in classes:
        for t, v in s["values"]:
            per_second.setdefault(float(t), {})[s["metric"]["status_class"]] = float(v)
    assert len(ratio) == 1, ratio
    checked = with_cancels = 0
    for t, v in ratio[0]["values"]:
        c = per_second[float(t)]
        expected = c["server-fault"] / (sum(c.values()) - c["cancelled"])
        assert float(v) == pytest.approx(expected, rel=1e-9, abs=1e-12), (t, c)
        checked += 1
        if c["cancelled"] > 0 and c["server-fault"] > 0:
            with_cancels += 1
            naive = c["server-fault"] / sum(c.values())
            assert abs(naive - float(v)) > 1e-6, "this second must tell the two formulas apart"
    print(f"\n{checked} seconds compared, {with_cancels} with both cancelled and failed calls")
    assert checked >= 8 and with_cancels >= 3


def test_server_side_error_rate_and_cancelled_are_recorded(drill: DrillRun) -> None:
    ratios = drill.prom.query("drill:server_error_ratio:rate3s", at=drill.eval_at)
    services = {s["metric"]["service"] for s in ratios}
    assert {"gateway", "edge", "leaf"} <= services
    cancelled = drill.prom.query_range(
        'drill:server_calls:rate3s{service="edge", status_class="cancelled"}', drill.start, drill.eval_at
    )
    assert max(finite_values(cancelled)) > 0, "the edge saw the client's cancellations"
