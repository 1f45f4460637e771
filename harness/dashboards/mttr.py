"""The "MTTR comparison" dashboard: resilience configurations side by side over the same drill.

MTTR itself comes from the runner's per-second analysis (results.json); this board
shows the signals it is computed from, with the runner's definitions (contracts §10)
and, by default, the runner's inputs: the edge callers (`$caller` = loadgen|locust),
the SLO's traffic (`$traffic` = organic), the plan's SLO (`$slo`) and window
(`$window`). Over a range that holds one configuration's run, its stat panels give
the runner's numbers: seconds in breach, peak error rate, error rate over the fault
window (blast radius) and amplification per hop over the fault window.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from harness.core.status import StatusClass
from harness.dashboards._common import (
    BREACH_STATES,
    BREAKER_STATES,
    CLIENT,
    HOPS,
    ON_OFF,
    SERVER,
    SERVICE,
    caller_variable,
    fault_annotations,
    label_variable,
    series,
    slo_variable,
    stat_panel,
    timeline,
    traffic_variable,
    window_variable,
)
from harness.dashboards.plan_defaults import EDGE_SERVICES
from harness.dashboards.rules import CLASS_MATCHERS

UID = "drill-mttr"

#: The seconds the fault is on (the runner's `drill_fault_active`), as a filter for `and on ()`.
FAULT_ON = "on () (max(drill_fault_active) == 1)"


def _error_by_config(calls: str = "drill:client_calls:rate$window", extra: str = "") -> str:
    """server-fault ÷ (all − CANCELLED) per configuration; no sample when nothing but CANCELLED ran."""
    return (
        f'sum by (config) ({calls}{{status_class="server-fault", {CLIENT}}}{extra})\n'
        f'  / (sum by (config) ({calls}{{status_class!="cancelled", {CLIENT}}}{extra}) > 0)'
    )


#: Error ratio per config over the plan's window, CANCELLED excluded: the runner's per-second SLO signal.
ERROR_BY_CONFIG = _error_by_config()


def _over_fault(counter: str, by: str) -> str:
    """A counter's increase over the seconds the fault is on (in the range), as the runner counts it: each
    fault second covers (t-1, t], so the baseline is the value one scrape *before* the first fault second
    (`offset 1s` at 1-s scrapes) and the end is the value at the last. Exact, unlike a sum of windowed
    rates; a counter reset inside the fault window (a hop restarting mid-fault) undercounts it."""
    end = f"(sum by ({by}) ({counter}) and {FAULT_ON})[$__range:1s]"
    start = f"(sum by ({by}) ({counter} offset 1s) and {FAULT_ON})[$__range:1s]"
    return f"(max_over_time({end}) - min_over_time({start}))"


def _fault_error_rate() -> str:
    calls = f"drill_client_calls_total{{{CLIENT}"
    bad = _over_fault(f"{calls}, {CLASS_MATCHERS[StatusClass.SERVER_FAULT.value]}}}", "config")
    total = _over_fault(f'{calls}, grpc_status!="CANCELLED"}}', "config")
    return f"{bad}\n  / ({total} > 0)"


EDGE_CALLS = 'drill_client_calls_total{service=~"%s"}' % EDGE_SERVICES  # noqa: UP031 - braces

#: contracts §10: a hop's attempts (shed included) ÷ the edge's first attempts (all traffic), over the fault window.
AMPLIFICATION_OVER_FAULT = (
    f"{_over_fault(f'drill_server_calls_total{{{HOPS}}}', 'service')}\n"
    f"  / on () group_left () ({_over_fault(EDGE_CALLS, '')} > 0)"
)


def build() -> db.Dashboard:
    d = (
        db.Dashboard("MTTR comparison")
        .uid(UID)
        .description(
            "Resilience configurations side by side over the same drill, with the runner's definitions "
            "(contracts §10) and defaults: edge callers, the SLO's traffic, the plan's SLO and window."
        )
        .tags(["drill", "chaos", "grpc", "mttr"])
        .refresh("5s")
        .time("now-30m", "now")
        .timezone("browser")
        .editable()
        .with_variable(label_variable("config", "Config", "label_values(drill_client_calls_total, config)"))
        .with_variable(caller_variable())
        .with_variable(label_variable("service", "Hop", "label_values(drill_server_calls_total, service)"))
        .with_variable(traffic_variable())
        .with_variable(slo_variable())
        .with_variable(window_variable())
        .annotations(fault_annotations())
    )
    d = d.with_row(db.Row("Configurations side by side (what the runner measures)"))
    d = d.with_panel(
        series(
            "Error rate by config (CANCELLED excluded) vs SLO",
            "Edge server-fault ÷ (all − CANCELLED) per configuration over the plan's window; the flat line is the "
            "SLO error budget.",
            [(ERROR_BY_CONFIG, "{{config}}"), ("vector($slo)", "SLO")],
            unit="percentunit",
            w=24,
        )
    )
    d = d.with_panel(
        timeline(
            "In SLO breach",
            "Per configuration: the seconds that count toward TTD, TTM and TTR.",
            [(f"({ERROR_BY_CONFIG}) > bool $slo", "{{config}}")],
            states=BREACH_STATES,
            w=24,
        )
    )
    d = d.with_panel(
        stat_panel(
            "Seconds in breach over the range",
            "Per configuration, at 1 s resolution (the runner's bad seconds; MTTR adds the hold window).",
            [(f"sum_over_time((({ERROR_BY_CONFIG}) > bool $slo)[$__range:1s])", "{{config}}")],
            unit="s",
        )
    )
    d = d.with_panel(
        stat_panel(
            "Peak error rate over the range",
            "Per configuration, the worst error rate over the plan's window.",
            [(f"max_over_time(({ERROR_BY_CONFIG})[$__range:1s])", "{{config}}")],
            unit="percentunit",
        )
    )
    d = d.with_panel(
        stat_panel(
            "Error rate over the fault window",
            "Per configuration, over the seconds drill_fault_active is 1: with organic traffic, the blast radius.",
            [(_fault_error_rate(), "{{config}}")],
            unit="percentunit",
        )
    )
    d = d.with_panel(
        stat_panel(
            "Amplification over the fault window",
            "Per hop: attempts (shed included) ÷ edge first attempts (all traffic), over the fault window "
            "(contracts §10). The deepest hop's is the drill's amplification.",
            [(AMPLIFICATION_OVER_FAULT, "{{service}}")],
            unit="suffix:×",
        )
    )
    d = d.with_panel(
        series(
            "Amplification per hop",
            "Attempts/s at each hop (shed included) ÷ the edge's first attempts/s (all traffic), over the plan's "
            "window.",
            [(f"drill:hop_amplification:ratio$window{{{HOPS}}}", "{{service}}")],
            unit="suffix:×",
        )
    )
    d = d.with_panel(
        series(
            "Attempts/s per hop and edge first attempts/s",
            "The two sides of the amplification ratio.",
            [
                (f"drill:hop_attempts:rate$window{{{HOPS}}}", "{{service}}"),
                ("drill:edge_first_attempts:rate$window", "edge first attempts"),
            ],
            unit="reqps",
        )
    )
    d = d.with_panel(
        series(
            "Error rate per hop (shed included, CANCELLED excluded)",
            "Server-side server-fault ÷ (all − CANCELLED) per hop and traffic class; shed calls count as errors.",
            [(f"drill:server_error_ratio:rate$window{{{SERVER}}}", "{{service}} · {{traffic}}")],
            unit="percentunit",
        )
    )
    d = d.with_panel(
        series(
            "Shed calls/s per hop",
            "Calls a hop refused for lack of capacity (drill_server_shed_total; also in drill_server_calls_total).",
            [(f"sum by (service) (rate(drill_server_shed_total{{{SERVICE}}}[$__rate_interval]))", "{{service}}")],
            unit="reqps",
        )
    )
    d = d.with_panel(
        timeline(
            "SLO burn alerts firing",
            "DrillSLOFastBurn / DrillSLOSlowBurn on the organic edge traffic (drill scale and workbook scale).",
            [
                (
                    'max by (alertname, config, scale) (ALERTS{alertname=~"DrillSLO.*", alertstate="firing"})',
                    "{{alertname}} · {{config}} · {{scale}}",
                )
            ],
            states=ON_OFF,
            w=24,
        )
    )
    d = d.with_panel(
        series(
            "Client p99 and mean latency by config",
            "drill_client_latency_seconds of the selected callers, p99 (bucket interpolation) and mean.",
            [
                (
                    "histogram_quantile(0.99, sum by (le, config) "
                    f"(rate(drill_client_latency_seconds_bucket{{{CLIENT}}}[$__rate_interval])))",
                    "p99 {{config}}",
                ),
                (
                    f"sum by (config) (rate(drill_client_latency_seconds_sum{{{CLIENT}}}[$__rate_interval]))\n"
                    f"  / (sum by (config) (rate(drill_client_latency_seconds_count{{{CLIENT}}}[$__rate_interval]))"
                    " > 0)",
                    "mean {{config}}",
                ),
            ],
            unit="s",
        )
    )
    d = d.with_panel(
        series(
            "Retries/s and budget exhaustion by config",
            "What each configuration spends to mitigate.",
            [
                (
                    'sum by (config) (rate(drill_retry_attempts_total{config=~"$config"}[$__rate_interval]))',
                    "retries {{config}}",
                ),
                (
                    'sum by (config) (rate(drill_retry_budget_exhausted_total{config=~"$config"}[$__rate_interval]))',
                    "budget exhausted {{config}}",
                ),
            ],
            unit="reqps",
        )
    )
    d = d.with_panel(
        timeline(
            "Breaker state by config (max over backends)",
            "closed, half-open, open.",
            [('max by (config) (drill_breaker_state{config=~"$config"})', "{{config}}")],
            states=BREAKER_STATES,
            w=24,
        )
    )
    d = d.with_row(db.Row("One panel per configuration"))
    d = d.with_panel(
        series(
            "Error rate · $config",
            "Client error rate (CANCELLED excluded) of one configuration, per caller and traffic class.",
            [(f"drill:client_error_ratio:rate$window{{{CLIENT}}}", "{{service}} · {{traffic}}")],
            unit="percentunit",
            w=8,
        )
        .repeat("config")
        .repeat_direction("h")
        .max_per_row(3)
    )
    return d
