"""Every query of every dashboard returns data on a real Prometheus that watched a real drill,
and the error-rate panel equals the error rate computed from the client counters (CANCELLED excluded).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from harness.core.status import SERVER_FAULT_CODES, error_rate
from harness.dashboards import build_all, iter_queries, substitute
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


def test_recorded_error_rate_excludes_cancelled_and_matches_counters(drill: DrillRun) -> None:
    """The recorded class rates, summed over every second of the drill, give the counters' error rate."""
    span = f"{int(drill.eval_at - drill.start) + 8}s"
    result = drill.prom.query(
        f'sum by (traffic, status_class) (sum_over_time(drill:client_calls:rate3s{{service="{SERVICE}",'
        f'config="{CONFIG}"}}[{span}]))',
        at=drill.eval_at,
    )
    by_traffic: dict[str, dict[str, float]] = {}
    for s in result:
        by_traffic.setdefault(s["metric"]["traffic"], {})[s["metric"]["status_class"]] = float(s["value"][1])
    assert set(by_traffic) == {"organic", "drill"}, result
    for traffic, classes in sorted(by_traffic.items()):
        value = classes["server-fault"] / (sum(classes.values()) - classes["cancelled"])
        counts = drill.client_counts(traffic)
        reference = error_rate(counts)
        print(
            f"\n{traffic}: recorded {value:.4f} reference {reference:.4f} diff {abs(value - reference) * 100:.3f} pp "
            f"(naive with CANCELLED {_naive_rate(counts):.4f}; cancelled {counts.get('CANCELLED', 0):.0f} "
            f"of {sum(counts.values()):.0f})"
        )
        assert value == pytest.approx(reference, abs=TOLERANCE)
    counts = drill.client_counts()
    assert counts["CANCELLED"] > 0.05 * sum(counts.values()), "the drill must cancel a real share of calls"
    # The check has teeth: counting CANCELLED in the denominator would miss by more than the tolerance.
    assert abs(_naive_rate(counts) - error_rate(counts)) > TOLERANCE


def test_server_side_error_rate_and_cancelled_are_recorded(drill: DrillRun) -> None:
    ratios = drill.prom.query("drill:server_error_ratio:rate3s", at=drill.eval_at)
    services = {s["metric"]["service"] for s in ratios}
    assert {"gateway", "edge", "leaf"} <= services
    cancelled = drill.prom.query_range(
        'drill:server_calls:rate3s{service="edge", status_class="cancelled"}', drill.start, drill.eval_at
    )
    assert max(finite_values(cancelled)) > 0, "the edge saw the client's cancellations"
