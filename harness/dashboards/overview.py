"""The "Drill overview" dashboard: what a drill does to errors, latency, resilience and connections."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from harness.dashboards._common import (
    CLIENT,
    RESILIENCE,
    SERVER,
    SERVICE,
    fault_annotations,
    label_variable,
    series,
    timeline,
    traffic_variable,
)

UID = "drill-overview"
QUANTILES = (("p50", "0.5"), ("p99", "0.99"), ("p99.9", "0.999"))


def _quantiles(metric: str, filters: str, by: str) -> list[tuple[str, str]]:
    return [
        (
            f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{{{filters}}}[$__rate_interval])))",
            f"{name} " + " · ".join(f"{{{{{lbl.strip()}}}}}" for lbl in by.split(",")),
        )
        for name, q in QUANTILES
    ]


def _rate(metric: str, filters: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}{{{filters}}}[$__rate_interval]))"


def build() -> db.Dashboard:
    d = (
        db.Dashboard("Drill overview")
        .uid(UID)
        .description(
            "Errors (CANCELLED excluded, DESIGN §6), faults, latency, resilience and connections during a drill."
        )
        .tags(["drill", "chaos", "grpc"])
        .refresh("5s")
        .time("now-15m", "now")
        .timezone("browser")
        .editable()
        .with_variable(label_variable("config", "Config", "label_values(drill_client_calls_total, config)"))
        .with_variable(label_variable("service", "Service", "label_values(service)"))
        .with_variable(traffic_variable())
        .annotations(fault_annotations())
    )
    d = d.with_row(db.Row("Errors (DESIGN §6: CANCELLED is neither error nor denominator)"))
    d = d.with_panel(
        series(
            "Client error rate (CANCELLED excluded)",
            "server-fault / (all − CANCELLED) as callers see it, from drill:client_error_ratio:rate30s.",
            [(f"drill:client_error_ratio:rate30s{{{CLIENT}}}", "{{service}} · {{config}} · {{traffic}}")],
            unit="percentunit",
        )
    )
    d = d.with_panel(
        series(
            "Server error rate per hop (CANCELLED excluded)",
            "server-fault / (all − CANCELLED) per serving hop, from drill:server_error_ratio:rate30s.",
            [(f"drill:server_error_ratio:rate30s{{{SERVER}}}", "{{service}} · {{traffic}}")],
            unit="percentunit",
        )
    )
    d = d.with_panel(
        series(
            "CANCELLED calls/s (not errors)",
            "Calls cancelled by the caller: excluded from the error rate, shown here on their own.",
            [
                (
                    "sum by (service, config, traffic) "
                    f'(drill:client_calls:rate30s{{status_class="cancelled", {CLIENT}}})',
                    "client {{service}} · {{config}} · {{traffic}}",
                ),
                (
                    f'sum by (service, traffic) (drill:server_calls:rate30s{{status_class="cancelled", {SERVER}}})',
                    "server {{service}} · {{traffic}}",
                ),
            ],
            unit="reqps",
        )
    )
    d = d.with_panel(
        series(
            "Calls/s by status class",
            "ok, server-fault, client-fault and cancelled as the recording rules classify them.",
            [
                (
                    f"sum by (status_class) (drill:client_calls:rate30s{{{CLIENT}}})",
                    "client {{status_class}}",
                ),
                (
                    f"sum by (status_class) (drill:server_calls:rate30s{{{SERVER}}})",
                    "server {{status_class}}",
                ),
            ],
            unit="reqps",
        )
    )
    d = d.with_row(db.Row("Faults"))
    d = d.with_panel(
        series(
            "Fault hits/s by mode",
            "Faults actually injected, per hop and mode.",
            [(_rate("drill_fault_hits_total", SERVICE, "service, mode"), "{{service}} · {{mode}}")],
            unit="reqps",
        )
    )
    d = d.with_panel(
        series(
            "Directives skipped / rejected by reason",
            "Skipped: a gate said no (switch, tenant, ratio, instance, target, token). Rejected: malformed or unsafe.",
            [
                (
                    _rate("drill_fault_skipped_total", SERVICE, "service, reason"),
                    "skipped {{service}} · {{reason}}",
                ),
                (
                    _rate("drill_fault_rejected_total", SERVICE, "service, reason"),
                    "rejected {{service}} · {{reason}}",
                ),
            ],
            unit="reqps",
        )
    )
    d = d.with_row(db.Row("Latency"))
    d = d.with_panel(
        series(
            "Client latency p50 / p99 / p99.9 by fault mode and traffic",
            "drill_client_latency_seconds: the requested fault mode, as callers see it.",
            _quantiles("drill_client_latency_seconds", CLIENT, "fault_mode, traffic"),
            unit="s",
        )
    )
    d = d.with_panel(
        series(
            "Server latency p50 / p99 / p99.9 by fault mode and traffic",
            "drill_server_latency_seconds: the fault actually injected, per hop.",
            _quantiles("drill_server_latency_seconds", SERVER, "fault_mode, traffic"),
            unit="s",
        )
    )
    d = d.with_panel(
        series(
            "Deadline gap: server finished after the caller's deadline",
            "How long after the edge caller gave up a hop was still working (p99), and how often it happens.",
            [
                (
                    "histogram_quantile(0.99, sum by (le, service, fault_mode) "
                    f"(rate(drill_deadline_gap_seconds_bucket{{{SERVICE}}}[$__rate_interval])))",
                    "p99 {{service}} · {{fault_mode}}",
                ),
                (
                    _rate("drill_deadline_gap_seconds_count", SERVICE, "service, fault_mode"),
                    "late/s {{service}} · {{fault_mode}}",
                ),
            ],
            unit="s",
            w=24,
        )
    )
    d = d.with_row(db.Row("Resilience and amplification"))
    d = d.with_panel(
        series(
            "Retries/s and retry budget exhaustion",
            "Retry attempts beyond the first, and retries the budget refused.",
            [
                (
                    _rate("drill_retry_attempts_total", RESILIENCE, "service, config"),
                    "retries {{service}} · {{config}}",
                ),
                (
                    _rate("drill_retry_budget_exhausted_total", RESILIENCE, "service, config"),
                    "budget exhausted {{service}} · {{config}}",
                ),
            ],
            unit="reqps",
        )
    )
    d = d.with_panel(
        timeline(
            "Breaker state (0 closed, 1 half-open, 2 open)",
            "drill_breaker_state per backend.",
            [
                (
                    f"max by (service, backend, config) (drill_breaker_state{{{RESILIENCE}}})",
                    "{{service}} → {{backend}} · {{config}}",
                )
            ],
            h=8,
        )
    )
    d = d.with_panel(
        series(
            "Breaker transitions and balancer picks",
            "Breaker transitions per backend, and how the balancer spreads picks.",
            [
                (
                    "sum by (service, backend, from, to) "
                    f"(increase(drill_breaker_transitions_total{{{RESILIENCE}}}[$__rate_interval]))",
                    "{{service}} → {{backend}}: {{from}} → {{to}}",
                ),
                (
                    _rate("drill_balancer_picks_total", RESILIENCE, "service, backend"),
                    "picks/s {{service}} → {{backend}}",
                ),
            ],
        )
    )
    d = d.with_panel(
        series(
            "Amplification per hop (calls/s ÷ organic ingress calls/s)",
            "Server calls/s at each hop divided by the organic calls/s the load generators send; retries multiply it.",
            [
                (f"drill:hop_amplification:ratio30s{{{SERVICE}}}", "{{service}}"),
                (f"sum by (service) (drill:server_calls:rate30s{{{SERVER}}})", "calls/s {{service}}"),
            ],
        )
    )
    d = d.with_row(db.Row("Connections"))
    d = d.with_panel(
        series(
            "Open fds per instance",
            "process_open_fds: connections that are never reclaimed show up here (half-open drills).",
            [("process_open_fds", "{{job}} · {{instance}}")],
        )
    )
    d = d.with_panel(
        series(
            "TCP connections by state per instance",
            "drill_tcp_connections{port,state} from harness.demo.conntrack.",
            [("sum by (instance, port, state) (drill_tcp_connections)", "{{instance}} :{{port}} {{state}}")],
        )
    )
    d = d.with_row(db.Row("Drill timeline"))
    d = d.with_panel(
        timeline(
            "Drill phase",
            "drill_phase{plan,phase}: 1 for the current phase (warm-up, fault, recovery).",
            [("max by (plan, phase) (drill_phase) > 0", "{{plan}} · {{phase}}")],
        )
    )
    d = d.with_panel(
        timeline(
            "Fault active",
            "drill_fault_active{plan}: the source of the dashboard's fault annotations.",
            [("max by (plan) (drill_fault_active)", "{{plan}}")],
        )
    )
    return d
