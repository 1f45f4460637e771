"""The "Drill overview" dashboard: what a drill does to errors, latency, resilience, connections and links."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from harness.dashboards._common import (
    BREAKER_STATES,
    CLIENT,
    HOPS,
    RESILIENCE,
    SERVER,
    SERVICE,
    caller_variable,
    fault_annotations,
    label_variable,
    series,
    timeline,
    traffic_variable,
    window_variable,
)
from harness.dashboards.links import link_variable, with_links_row

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
            "Errors (CANCELLED excluded, contracts §6), faults, latency, resilience, connections and links "
            "during a drill."
        )
        .tags(["drill", "chaos", "grpc"])
        .refresh("5s")
        .time("now-15m", "now")
        .timezone("browser")
        .editable()
        .with_variable(label_variable("config", "Config", "label_values(drill_client_calls_total, config)"))
        .with_variable(caller_variable())
        .with_variable(label_variable("service", "Hop", "label_values(drill_server_calls_total, service)"))
        .with_variable(traffic_variable())
        .with_variable(window_variable())
        .with_variable(link_variable())
        .annotations(fault_annotations())
    )
    d = d.with_row(db.Row("Errors (contracts §6: CANCELLED is neither error nor denominator)"))
    d = d.with_panel(
        series(
            "Client error rate (CANCELLED excluded)",
            "server-fault / (all − CANCELLED) as callers see it, from drill:client_error_ratio:rate$window.",
            [(f"drill:client_error_ratio:rate$window{{{CLIENT}}}", "{{service}} · {{config}} · {{traffic}}")],
            unit="percentunit",
        )
    )
    d = d.with_panel(
        series(
            "Server error rate per hop (shed included, CANCELLED excluded)",
            "server-fault / (all − CANCELLED) per serving hop, from drill:server_error_ratio:rate$window.",
            [(f"drill:server_error_ratio:rate$window{{{SERVER}}}", "{{service}} · {{traffic}}")],
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
                    f'(drill:client_calls:rate$window{{status_class="cancelled", {CLIENT}}})',
                    "client {{service}} · {{config}} · {{traffic}}",
                ),
                (
                    f'sum by (service, traffic) (drill:server_calls:rate$window{{status_class="cancelled", {SERVER}}})',
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
                    f"sum by (status_class) (drill:client_calls:rate$window{{{CLIENT}}})",
                    "client {{status_class}}",
                ),
                (
                    f"sum by (status_class) (drill:server_calls:rate$window{{{SERVER}}})",
                    "server {{status_class}}",
                ),
            ],
            unit="reqps",
        )
    )
    d = d.with_panel(
        series(
            "Shed calls/s per hop",
            "Calls refused for lack of capacity (drill_server_shed_total); they also count as errors above.",
            [(_rate("drill_server_shed_total", SERVICE, "service"), "{{service}}")],
            unit="reqps",
            w=24,
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
            "Deadline gap: server finished after the caller's deadline (p99 and mean)",
            "How long after the edge caller gave up a hop was still working: p99 (bucket interpolation) "
            "and the mean (sum ÷ count), per hop and fault mode.",
            [
                (
                    "histogram_quantile(0.99, sum by (le, service, fault_mode) "
                    f"(rate(drill_deadline_gap_seconds_bucket{{{SERVICE}}}[$__rate_interval])))",
                    "p99 {{service}} · {{fault_mode}}",
                ),
                (
                    f"{_rate('drill_deadline_gap_seconds_sum', SERVICE, 'service, fault_mode')}\n"
                    f"  / ({_rate('drill_deadline_gap_seconds_count', SERVICE, 'service, fault_mode')} > 0)",
                    "mean {{service}} · {{fault_mode}}",
                ),
            ],
            unit="s",
        )
    )
    d = d.with_panel(
        series(
            "Late calls/s (finished after the caller's deadline)",
            "drill_deadline_gap_seconds_count per hop and fault mode.",
            [
                (
                    _rate("drill_deadline_gap_seconds_count", SERVICE, "service, fault_mode"),
                    "{{service}} · {{fault_mode}}",
                )
            ],
            unit="reqps",
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
            "Breaker state",
            "drill_breaker_state per backend: closed, half-open, open.",
            [
                (
                    f"max by (service, backend, config) (drill_breaker_state{{{RESILIENCE}}})",
                    "{{service}} → {{backend}} · {{config}}",
                )
            ],
            states=BREAKER_STATES,
            h=8,
        )
    )
    d = d.with_panel(
        series(
            "Breaker transitions in the last 30 s",
            "Breaker transitions per backend over a fixed 30 s window (does not change with zoom).",
            [
                (
                    "sum by (service, backend, from, to) "
                    f"(increase(drill_breaker_transitions_total{{{RESILIENCE}}}[30s]))",
                    "{{service}} → {{backend}}: {{from}} → {{to}}",
                ),
            ],
            unit="short",
        )
    )
    d = d.with_panel(
        series(
            "Adaptive throttling: reject probability and local rejections/s",
            "Client-side adaptive throttling (SRE book): max(0, (requests − K·accepts)/(requests + 1)) over the "
            "throttle's window, per caller, and the attempts it rejected locally (drill_fail_fast_total{reason="
            '"throttle"}).',
            [
                (
                    f"max by (service, config) (drill_adaptive_throttle_reject_probability{{{RESILIENCE}}})",
                    "p(reject) {{service}} · {{config}}",
                ),
                (
                    "sum by (service, config) "
                    f'(rate(drill_fail_fast_total{{{RESILIENCE}, reason="throttle"}}[$__rate_interval]))',
                    "rejected/s {{service}} · {{config}}",
                ),
            ],
            unit="short",
        )
    )
    d = d.with_panel(
        series(
            "Queue depth per hop",
            "Calls waiting for a worker slot at each hop (drill_server_queue_depth): the queue that keeps an "
            "overload going after its trigger is gone (a metastable failure).",
            [(f"max by (service) (drill_server_queue_depth{{{HOPS}}})", "{{service}}")],
            unit="short",
        )
    )
    d = d.with_panel(
        series(
            "Balancer picks/s",
            "How the balancer spreads picks over backends.",
            [(_rate("drill_balancer_picks_total", RESILIENCE, "service, backend"), "{{service}} → {{backend}}")],
            unit="reqps",
        )
    )
    d = d.with_panel(
        series(
            "Amplification per hop",
            "Attempts/s at each hop (shed included) ÷ the edge's first attempts/s, all traffic (contracts §10).",
            [(f"drill:hop_amplification:ratio$window{{{HOPS}}}", "{{service}}")],
            unit="suffix:×",
        )
    )
    d = d.with_row(db.Row("Connections"))
    d = d.with_panel(
        series(
            "Open fds per hop instance",
            "process_open_fds of the topology hops: connections never reclaimed show up here (half-open drills).",
            [(f"process_open_fds{{{HOPS}}}", "{{service}} · {{instance}}")],
        )
    )
    d = d.with_panel(
        series(
            "TCP connections by state per instance",
            "drill_tcp_connections{port,state} from harness.demo.conntrack.",
            [(f"sum by (service, port, state) (drill_tcp_connections{{{HOPS}}})", "{{service}} :{{port}} {{state}}")],
        )
    )
    d = with_links_row(d)
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
