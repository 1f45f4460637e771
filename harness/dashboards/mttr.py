"""The "MTTR comparison" dashboard: resilience configurations side by side over the same drill.

MTTR itself comes from the runner's per-second analysis (results.json); this
dashboard shows the live signals it is computed from, per configuration.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models.dashboard import VariableOption

from harness.dashboards._common import (
    fault_annotations,
    label_variable,
    series,
    stat_panel,
    timeline,
    traffic_variable,
)

UID = "drill-mttr"

_F = 'service=~"$service", config=~"$config", traffic=~"$traffic"'
#: Error ratio per config, CANCELLED excluded (ratio of sums of the recorded class rates).
ERROR_BY_CONFIG = (
    f'sum by (config) (drill:client_calls:rate30s{{status_class="server-fault", {_F}}})\n'
    f'  / sum by (config) (drill:client_calls:rate30s{{status_class!="cancelled", {_F}}})'
)


def _slo_variable() -> db.TextBoxVariable:
    return (
        db.TextBoxVariable("slo")
        .label("SLO error budget")
        .default_value("0.01")
        .current(VariableOption(selected=True, text="0.01", value="0.01"))
    )


def build() -> db.Dashboard:
    d = (
        db.Dashboard("MTTR comparison")
        .uid(UID)
        .description("Resilience configurations side by side over the same drill: breach, recovery, retries, breakers.")
        .tags(["drill", "chaos", "grpc", "mttr"])
        .refresh("5s")
        .time("now-30m", "now")
        .timezone("browser")
        .editable()
        .with_variable(label_variable("config", "Config", "label_values(drill_client_calls_total, config)"))
        .with_variable(label_variable("service", "Caller", "label_values(drill_client_calls_total, service)"))
        .with_variable(traffic_variable())
        .with_variable(_slo_variable())
        .annotations(fault_annotations())
    )
    d = d.with_row(db.Row("Configurations side by side"))
    d = d.with_panel(
        series(
            "Error rate by config (CANCELLED excluded) vs SLO",
            "Client-side server-fault / (all − CANCELLED) per configuration; the flat line is the SLO error budget.",
            [(ERROR_BY_CONFIG, "{{config}}"), ("vector($slo)", "SLO")],
            unit="percentunit",
            w=24,
        )
    )
    d = d.with_panel(
        timeline(
            "In SLO breach (1 = breaching)",
            "Per configuration: the seconds that count toward TTD, TTM and TTR.",
            [(f"({ERROR_BY_CONFIG}) > bool $slo", "{{config}}")],
            w=24,
        )
    )
    d = d.with_panel(
        stat_panel(
            "Seconds in breach over the range",
            "Per configuration, at 1 s resolution: a live proxy for MTTR (the runner reports the exact value).",
            [(f"sum_over_time((({ERROR_BY_CONFIG}) > bool $slo)[$__range:1s])", "{{config}}")],
            unit="s",
            w=12,
        )
    )
    d = d.with_panel(
        stat_panel(
            "Peak error rate over the range",
            "Per configuration, the worst 30 s error rate seen.",
            [(f"max_over_time(({ERROR_BY_CONFIG})[$__range:1s])", "{{config}}")],
            unit="percentunit",
            w=12,
        )
    )
    d = d.with_panel(
        series(
            "Client p99 latency by config",
            "drill_client_latency_seconds p99 per configuration.",
            [
                (
                    "histogram_quantile(0.99, sum by (le, config) "
                    f"(rate(drill_client_latency_seconds_bucket{{{_F}}}[$__rate_interval])))",
                    "{{config}}",
                )
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
            "0 closed, 1 half-open, 2 open.",
            [('max by (config) (drill_breaker_state{config=~"$config"})', "{{config}}")],
            w=24,
        )
    )
    d = d.with_row(db.Row("One panel per configuration"))
    d = d.with_panel(
        series(
            "Error rate · $config",
            "Client error rate (CANCELLED excluded) of one configuration, organic vs drill traffic.",
            [(f"drill:client_error_ratio:rate30s{{{_F}}}", "{{service}} · {{traffic}}")],
            unit="percentunit",
            w=8,
        )
        .repeat("config")
        .repeat_direction("h")
        .max_per_row(3)
    )
    return d
