"""The wiring, live: every query of every dashboard, with the dashboard's default variables, returns data on a
real Prometheus that scraped real processes (live_drill.py: three chained `drill serve` hops, a shedding hop and
this process's drill, organic and cancelled traffic); the class rules equal the client counters' error rate
exactly (CANCELLED excluded).

The MTTR board's logic (its numbers against the runner's) is checked exactly on recorded runs in
test_mttr_board.py; here its queries, with the defaults a user opens it with (the edge callers, organic
traffic, the plan's SLO and window), must return data like every other query.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import time
from collections.abc import Iterator

import pytest
import yaml

from harness.core.status import SERVER_FAULT_CODES, error_rate
from harness.dashboards import build_all, default_values, iter_queries, substitute
from harness.dashboards.rules import plan_window_rules
from harness.drills.cli.run import _prometheus
from harness.procs.prometheus import LocalPrometheus, finite_values
from tests.observability.live_drill import CONFIG, RULES, SERVICE, DrillRun, LiveDrill
from tests.observability.live_links import BLACKHOLE, RELAY, TOXICS

pytestmark = pytest.mark.slow

TOLERANCE = 0.01  # 1 percentage point


@pytest.fixture(scope="module")
def drill() -> Iterator[DrillRun]:
    live = LiveDrill()
    try:
        yield live.run()
    finally:
        live.stop()


def _evaluate(run: DrillRun, kind: str, expr: str, instant: bool, values: dict[str, str]) -> list[float] | list[str]:
    if kind == "variable":
        m = re.fullmatch(r"label_values\((?:\s*(.+?)\s*,)?\s*(\w+)\s*\)", expr)
        assert m, f"unsupported variable query {expr!r}"
        return run.prom.label_values(m.group(2), match=m.group(1))
    promql = substitute(expr, values, range_="5m")
    if instant:
        return finite_values(run.prom.query(promql, at=run.eval_at))
    return finite_values(run.prom.query_range(promql, run.start - 5, run.eval_at, step="1s"))


def test_every_query_of_every_dashboard_returns_data(drill: DrillRun) -> None:
    empty, count, board = [], 0, 0
    for model in build_all().values():
        values = default_values(model)
        for q in iter_queries(model):
            count += 1
            board += q.dashboard == "drill-mttr"
            if not _evaluate(drill, q.kind, q.expr, q.instant, values):
                empty.append(f"{q.name}: {q.expr}")
    print(f"\n{count} dashboard queries evaluated ({board} of the MTTR board), {count - len(empty)} returned data")
    assert count >= 40 and board >= 20
    assert not empty, "queries without data:\n" + "\n".join(empty)


def test_the_per_hop_error_rate_shows_the_hop_that_sheds(drill: DrillRun) -> None:
    """Shed calls are errors of the hop that sheds: the board's per-hop panel (defaults: organic) is above 0 there."""
    model = next(m for m in build_all().values() if m["uid"] == "drill-mttr")
    expr = next(q.expr for q in iter_queries(model) if q.title.startswith("Error rate per hop"))
    got = drill.prom.query('sum(increase(drill_server_shed_total{service="shed"}[5m]))', at=drill.eval_at)
    shed = float(got[0]["value"][1]) if got else 0.0
    assert shed > 0, "the shed hop shed nothing"
    result = drill.prom.query_range(substitute(expr, default_values(model)), drill.start, drill.eval_at)
    values = finite_values([s for s in result if s["metric"].get("service") == "shed"])
    print(f"\nshed hop: {shed:.0f} calls shed, peak organic error rate {max(values, default=0):.3f}")
    assert values and max(values) > 0


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
    # The identity is the rules' algebra, the same at every evaluation: one second whose window holds both
    # cancelled and failed calls gives it teeth. (How many seconds Prometheus evaluated depends on the box.)
    assert with_cancels >= 1


def test_server_side_error_rate_and_cancelled_are_recorded(drill: DrillRun) -> None:
    # over the drill, not at its end: by `eval_at` the last calls may have left the 3-s window (a loaded box
    # failed this once when it read one instant after the drill)
    ratios = drill.prom.query_range("drill:server_error_ratio:rate3s", drill.start, drill.eval_at)
    services = {s["metric"]["service"] for s in ratios if finite_values([s])}
    assert {"gateway", "edge", "leaf", "shed"} <= services
    cancelled = drill.prom.query_range(
        'drill:server_calls:rate3s{service="edge", status_class="cancelled"}', drill.start, drill.eval_at
    )
    assert max(finite_values(cancelled)) > 0, "the edge saw the client's cancellations"


def test_the_runners_prometheus_loads_the_rules_the_dashboards_read(tmp_path: pathlib.Path, monkeypatch) -> None:
    """`drill run --prometheus auto` watches the run with the rule files the drill above is evaluated with, so the
    TSDB a drill leaves behind holds every recorded series and alert the dashboards read: all their groups are
    loaded. (Its wait for a first scrape, up to 20 s, is skipped: rules are loaded at start.)"""
    monkeypatch.setattr(LocalPrometheus, "wait_first_sample", lambda self, timeout_s=20.0: True)
    from harness.drills.plan.files import load_plan

    prom = _prometheus(argparse.Namespace(prometheus="auto", prometheus_sd=None), tmp_path, print, load_plan("basics"))
    assert prom is not None, "prometheus not on PATH"
    try:
        loaded = {g["name"]: len(g["rules"]) for g in prom.api("rules")["groups"]}
    finally:
        prom.stop()
    groups = {g["name"]: len(g["rules"]) for f in RULES for g in yaml.safe_load(f.read_text())["groups"]}
    assert groups and loaded == groups


def _overview_query(title: str) -> str:
    model = next(m for m in build_all().values() if m["uid"] == "drill-overview")
    return substitute(next(q.expr for q in iter_queries(model) if q.title == title), default_values(model))


def _link_scraped_after(drill: DrillRun, end: float, timeout_s: float = 30.0) -> float:
    """The time of the link process's last scrape once one came after `end` (the link's counters final)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        got = drill.prom.query(f'timestamp(drill_link_streams_reset_total{{link="{RELAY}"}})')
        if got and float(got[0]["value"][1]) > end:
            return float(got[0]["value"][1])
        time.sleep(0.25)
    raise AssertionError("Prometheus never scraped the link after the drill")


def _counted_by_rate(drill: DrillRun, title: str, at: float) -> dict[str, float]:
    """The panel's rate, over a window that holds the link's whole life, times that window: the count it shows.

    Exact, not an estimate: the window's first sample of each series is the 0 the link created it with (scraped
    before any call), and `at` is the last sample's own timestamp, so Prometheus' rate extrapolates to neither
    end (to the start it stops at the counter's zero point, here the first sample; to the end there is no gap):
    rate = (last − 0) / window.
    """
    span = int(at - drill.start) + 30
    expr = _overview_query(title).replace("[4s]", f"[{span}s]")
    return {s["metric"]["link"]: float(s["value"][1]) * span for s in drill.prom.query(expr, at=at)}


def test_the_link_panels_count_what_the_link_did(drill: DrillRun) -> None:
    """The Links row over the live drill equals what the link did, exactly: the drill streams its rst_stream toxic
    reset (its own record, and the calls the drill user saw CANCELLED), the connections each toxic acted on (each
    toxic's record), and nothing held or dropped by the kernel once it is over."""
    out = drill.links
    at = _link_scraped_after(drill, drill.end)
    reset = _counted_by_rate(drill, "Drill streams reset/s (rst_stream)", at)
    recorded_reset = sum(c["streams"]["drill"] for c in out.records[(RELAY, "rst_stream")]["connections"])
    print(f"\nlink {RELAY}: {out.drill_calls} drill calls, {out.drill_reset} CANCELLED by the reset, "
          f"{recorded_reset} drill streams in the toxic's record, panel {reset}; organic ok {out.organic_ok}, "
          f"failed {out.organic_failed}; {BLACKHOLE}: {out.blackhole_failed} calls timed out")  # fmt: skip
    assert recorded_reset > 0 and out.organic_ok > 0 and out.blackhole_failed > 0
    assert reset[RELAY] == pytest.approx(recorded_reset, rel=1e-9)
    assert reset[BLACKHOLE] == 0
    # every drill call the user sent was one stream, reset at its headers: the caller saw each one
    assert out.drill_reset == out.drill_calls == recorded_reset
    assert out.organic_failed == 0, "rst_stream reset an organic stream"

    title = "Connections a toxic acted on (since the link started)"
    faulted = {(s["metric"]["link"], s["metric"]["toxic"]): float(s["value"][1])
               for s in drill.prom.query(_overview_query(title), at=at)}  # fmt: skip
    recorded = {key: len(record["connections"]) for key, record in out.records.items()}
    print(f"connections faulted: panel {faulted}, records {recorded}")
    assert faulted == recorded == {(link, t["type"]): 1 for link, toxics in TOXICS.items() for t in toxics}

    accepted = _counted_by_rate(drill, "Link connections accepted/s", at)
    assert accepted == pytest.approx({RELAY: 1, BLACKHOLE: 1}, rel=1e-9), "one channel, one connection, each"

    for title in ("Bytes held by toxics now", "Connections the kernel drops now (kernel-mode blackhole)"):
        now = {s["metric"]["link"]: float(s["value"][1]) for s in drill.prom.query(_overview_query(title), at=at)}
        assert now == {RELAY: 0, BLACKHOLE: 0}, (title, now)
    # While the drill ran, the latency toxic held each answer (and each reset) of obs-relay 200 ms of its
    # user's ~230-ms cycle (200 ms held, then a 30-ms pause), two users: a scrape finds nothing held only in
    # the gaps both users' cycles leave at once (each about 15 % of its time), and the drill holds several scrapes.
    during = drill.prom.query_range(_overview_query("Bytes held by toxics now"), drill.start, drill.end)
    held = {s["metric"]["link"]: max(float(v) for _, v in s["values"]) for s in during}
    print(f"bytes held at most, per scrape during the drill: {held}")
    assert held[RELAY] > 0 and held[BLACKHOLE] == 0
