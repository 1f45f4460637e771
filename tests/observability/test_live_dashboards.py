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

pytestmark = pytest.mark.slow

#: Values for non-regex dashboard variables; regex ones (config, service, traffic) become `.*`.
VARIABLES = {"slo": "0.01"}
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
    promql = substitute(expr, VARIABLES, rate_interval="30s", range_="5m")
    if instant:
        return finite_values(run.prom.query(promql, at=run.eval_at))
    return finite_values(run.prom.query_range(promql, run.start - 5, run.eval_at, step="1s"))


def test_every_query_of_every_dashboard_returns_data(drill: DrillRun) -> None:
    empty, count = [], 0
    for model in build_all().values():
        for q in iter_queries(model):
            count += 1
            if not _evaluate(drill, q.kind, q.expr, q.instant):
                empty.append(f"{q.name}: {q.expr}")
    print(f"\n{count} dashboard queries evaluated, {count - len(empty)} returned data")
    assert count >= 40
    assert not empty, "queries without data:\n" + "\n".join(empty)


def _panel_expr(dashboard_uid: str, title: str) -> str:
    for model in build_all().values():
        if model["uid"] != dashboard_uid:
            continue
        for q in iter_queries(model):
            if q.kind == "panel" and q.title == title and q.ref_id == "A":
                return q.expr
    raise LookupError(title)


def _naive_rate(counts: dict[str, float]) -> float:
    total = sum(counts.values())
    return sum(v for k, v in counts.items() if k in SERVER_FAULT_CODES) / total


def test_error_rate_panel_excludes_cancelled_and_matches_counters(drill: DrillRun) -> None:
    # The recorded 30 s rates must span the whole drill (plus the zeroed scrape before it).
    assert drill.eval_at - drill.start < 28, "drill too long for the 30 s window of the recorded rates"
    # The premise of comparing a 30 s rate with whole-run counts: the window starts before the first call.
    window = drill.prom.query_range(
        f'sum(drill_client_calls_total{{service="{SERVICE}",config="{CONFIG}"}})',
        drill.eval_at - 29,
        drill.eval_at,
        step="1s",
    )
    first = float(window[0]["values"][0][1]) if window else None
    assert first == 0, f"the 30 s window starts after calls were made (first sample {first})"
    expr = substitute(_panel_expr("drill-overview", "Client error rate (CANCELLED excluded)"), VARIABLES)
    result = drill.prom.query(expr, at=drill.eval_at)
    panel = {
        s["metric"]["traffic"]: float(s["value"][1])
        for s in result
        if s["metric"].get("service") == SERVICE and s["metric"].get("config") == CONFIG
    }
    assert set(panel) == {"organic", "drill"}, result
    for traffic, value in sorted(panel.items()):
        counts = drill.client_counts(traffic)
        reference = error_rate(counts)
        print(
            f"\n{traffic}: panel {value:.4f} reference {reference:.4f} diff {abs(value - reference) * 100:.3f} pp "
            f"(naive with CANCELLED {_naive_rate(counts):.4f}; cancelled {counts.get('CANCELLED', 0):.0f} "
            f"of {sum(counts.values()):.0f})"
        )
        assert value == pytest.approx(reference, abs=TOLERANCE)

    # Over all loadgen traffic (the runner's number), through the MTTR dashboard's per-config panel.
    by_config = substitute(_panel_expr("drill-mttr", "Error rate by config (CANCELLED excluded) vs SLO"), VARIABLES)
    by_config = by_config.replace('service=~".*"', f'service="{SERVICE}"')
    value = {s["metric"]["config"]: float(s["value"][1]) for s in drill.prom.query(by_config, at=drill.eval_at)}[CONFIG]
    counts = drill.client_counts()
    reference = error_rate(counts)
    naive = _naive_rate(counts)
    print(f"all traffic: panel {value:.4f} reference {reference:.4f} naive {naive:.4f}")
    assert counts["CANCELLED"] > 0.05 * sum(counts.values()), "the drill must cancel a real share of calls"
    assert value == pytest.approx(reference, abs=TOLERANCE)
    # The check has teeth: counting CANCELLED in the denominator would miss by more than the tolerance.
    assert abs(naive - reference) > TOLERANCE


def test_server_side_error_rate_and_cancelled_are_recorded(drill: DrillRun) -> None:
    ratios = drill.prom.query("drill:server_error_ratio:rate30s", at=drill.eval_at)
    services = {s["metric"]["service"] for s in ratios}
    assert {"gateway", "edge", "leaf"} <= services
    cancelled = drill.prom.query_range(
        'drill:server_calls:rate30s{service="edge", status_class="cancelled"}', drill.start, drill.eval_at
    )
    assert max(finite_values(cancelled)) > 0, "the edge saw the client's cancellations"


def test_slo_burn_alert_fires_for_drill_traffic(drill: DrillRun) -> None:
    fired = drill.prom.query_range(
        'ALERTS{alertname="DrillSLOFastBurn", alertstate="firing", service="loadgen", traffic="drill"}',
        drill.start,
        drill.eval_at,
    )
    assert finite_values(fired), "DrillSLOFastBurn never fired for the drill traffic (the TTD signal)"
