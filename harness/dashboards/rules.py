"""Prometheus recording and alert rules for contracts §6 and §10, generated from `harness.core.status`
and the default plan (`harness.dashboards.plan_defaults`).

The status classes are decided once in `harness.core.status`; this module turns those
sets into the rules in `compose/prometheus/rules/`, so the dashboards, the alerts and
the Python analysis cannot disagree. `drill dashboards build` writes the YAML; a test
fails when the committed file is stale.

- **Plan window** (`rate3s` for a plan whose `slo.window_s` is 2): class rates per
  caller and per hop, error ratios, hop attempts, edge first attempts and the
  per-hop amplification. This is the runner's window, so the MTTR board's
  breach seconds are the runner's.
- **SLO ratio** `drill:slo_error_ratio:rate<W>`: server-fault ÷ (all − CANCELLED) of
  the edge callers' (`loadgen|locust`) calls of the SLO's traffic (organic), per
  `config`, at every burn-rate window.
- Every class series is zero-filled (a class with no calls is a 0 rate, not a
  missing series); every ratio divides by `(… > 0)`, so an idle or CANCELLED-only
  period has no sample instead of NaN.
- **Amplification** (contracts §10, the one definition): a hop's attempts (shed calls
  included: the admission layer counts them in `drill_server_calls_total`) ÷ the
  edge's first attempts, all traffic.

Burn-rate alerts follow the SRE workbook's multiwindow, multi-burn-rate recipe on the
organic edge traffic, long window = 12 × short: 1h/5m at 14.4× and 6h/30m at 6× the
budget (`scale="workbook"`, for the compose stack's long runs). A drill lasts seconds, so
a drill-scaled page (`scale="drill"`) uses the plan window as the short window and 12×
it as the long one, at 1× the budget: both windows over the plan's SLO. (A 14.4× burn of
a 5 % budget is a 72 % error rate, which no drill of ours reaches.)
"""

from __future__ import annotations

from typing import Any

import yaml

from harness.core.status import CLIENT_FAULT_CODES, SERVER_FAULT_CODES, StatusClass
from harness.dashboards.plan_defaults import EDGE_SERVICES, PlanDefaults, load

PLAN = load()
#: The plan window's PromQL range (`3s` for retry-storm's `window_s: 2`).
WINDOW = PLAN.window
#: The drill-scaled long window: 12 × the short one.
DRILL_LONG = f"{12 * int(WINDOW[:-1])}s"
#: Error budget of the SLO (the plan's `slo.max_error_rate`).
SLO_ERROR_BUDGET = PLAN.budget

#: (alert, scale, short window, long window, burn factor, severity, `for`).
BURN_ALERTS: tuple[tuple[str, str, str, str, float, str], ...] = (
    ("DrillSLOFastBurn", "drill", WINDOW, DRILL_LONG, 1.0, "page"),
    ("DrillSLOFastBurn", "workbook", "5m", "1h", 14.4, "page"),
    ("DrillSLOSlowBurn", "workbook", "30m", "6h", 6.0, "ticket"),
)
#: Every window the SLO ratio is recorded at, with its group's evaluation interval.
SLO_WINDOWS: tuple[tuple[str, str], ...] = ((WINDOW, "1s"), (DRILL_LONG, "1s"), ("5m", "15s"), ("30m", "15s"),
                                            ("1h", "15s"), ("6h", "15s"))  # fmt: skip

CLIENT_LABELS = ("service", "config", "traffic")
SERVER_LABELS = ("service", "traffic")
EDGE = f'service=~"{EDGE_SERVICES}"'


def _regex(codes: frozenset[str]) -> str:
    return "|".join(sorted(codes))


#: status_class label value -> label matcher on grpc_status. Mirrors harness.core.status.classify.
CLASS_MATCHERS: dict[str, str] = {
    StatusClass.OK.value: 'grpc_status="OK"',
    StatusClass.SERVER_FAULT.value: f'grpc_status=~"{_regex(SERVER_FAULT_CODES)}"',
    StatusClass.CLIENT_FAULT.value: f'grpc_status=~"{_regex(CLIENT_FAULT_CODES)}"',
    StatusClass.CANCELLED.value: 'grpc_status="CANCELLED"',
}


def _class_rule(record: str, metric: str, by: tuple[str, ...], status_class: str, window: str) -> dict[str, Any]:
    group = ", ".join(by)
    matcher = CLASS_MATCHERS[status_class]
    expr = (
        f"sum by ({group}) (rate({metric}{{{matcher}}}[{window}]))\n"
        f"  or 0 * sum by ({group}) (rate({metric}[{window}]))"
    )
    return {"record": record, "expr": expr, "labels": {"status_class": status_class}}


def _ratio(calls: str, by: str | None = None, matchers: str = "") -> str:
    """server-fault ÷ (all − CANCELLED) of a class-rate series; no sample when the denominator is 0."""
    agg = f"sum by ({by})" if by is not None else "sum without (status_class)"
    sep = ", " if matchers else ""
    return (
        f'{agg} ({calls}{{status_class="{StatusClass.SERVER_FAULT.value}"{sep}{matchers}}})\n'
        f'  / ({agg} ({calls}{{status_class!="{StatusClass.CANCELLED.value}"{sep}{matchers}}}) > 0)'
    )


def _slo_matchers() -> str:
    return ", ".join(m for m in (EDGE, PLAN.traffic_matcher) if m)


def plan_window_rules(w: str = WINDOW) -> list[dict[str, Any]]:
    client_calls = f"drill:client_calls:rate{w}"
    server_calls = f"drill:server_calls:rate{w}"
    rules = [_class_rule(client_calls, "drill_client_calls_total", CLIENT_LABELS, c, w) for c in CLASS_MATCHERS]
    rules.append({"record": f"drill:client_error_ratio:rate{w}", "expr": _ratio(client_calls)})
    rules += [_class_rule(server_calls, "drill_server_calls_total", SERVER_LABELS, c, w) for c in CLASS_MATCHERS]
    rules.append({"record": f"drill:server_error_ratio:rate{w}", "expr": _ratio(server_calls)})
    rules.append({"record": f"drill:slo_error_ratio:rate{w}", "expr": _ratio(client_calls, "config", _slo_matchers())})
    # Amplification (contracts §10): hop attempts (shed included) ÷ edge first attempts, all traffic.
    attempts = f"sum by (service) (rate(drill_server_calls_total[{w}]))"
    rules.append({"record": f"drill:hop_attempts:rate{w}", "expr": attempts})
    rules.append(
        {"record": f"drill:edge_first_attempts:rate{w}", "expr": f"sum(rate(drill_client_calls_total{{{EDGE}}}[{w}]))"}
    )
    rules.append(
        {
            "record": f"drill:hop_amplification:ratio{w}",
            "expr": f"drill:hop_attempts:rate{w}\n  / on () group_left () (drill:edge_first_attempts:rate{w} > 0)",
        }
    )
    return rules


def slo_window_rules(w: str) -> list[dict[str, Any]]:
    """Edge class rates of the SLO's traffic per config, and their error ratio, at a burn window."""
    calls = f"drill:slo_calls:rate{w}"
    sel = f"drill_client_calls_total{{{_slo_matchers()}, %s}}"
    rules = []
    for cls, matcher in CLASS_MATCHERS.items():
        expr = (
            f"sum by (config) (rate({sel % matcher}[{w}]))\n"
            f"  or 0 * sum by (config) (rate(drill_client_calls_total{{{_slo_matchers()}}}[{w}]))"
        )
        rules.append({"record": calls, "expr": expr, "labels": {"status_class": cls}})
    rules.append({"record": f"drill:slo_error_ratio:rate{w}", "expr": _ratio(calls, "config")})
    return rules


def recording_groups() -> list[dict[str, Any]]:
    groups = [{"name": f"drill-plan-window-{WINDOW}", "interval": "1s", "rules": plan_window_rules()}]
    for w, interval in SLO_WINDOWS:
        if w != WINDOW:
            groups.append({"name": f"drill-slo-{w}", "interval": interval, "rules": slo_window_rules(w)})
    return groups


def alert_groups() -> list[dict[str, Any]]:
    """Multiwindow burn-rate alerts on the organic edge traffic (the SLO's), per configuration."""
    rules = []
    for name, scale, short, long, factor, severity in BURN_ALERTS:
        threshold = factor * SLO_ERROR_BUDGET
        rules.append(
            {
                "alert": name,
                "expr": (
                    f"drill:slo_error_ratio:rate{long} > {threshold:g}\n"
                    f"and drill:slo_error_ratio:rate{short} > {threshold:g}"
                ),
                "labels": {"severity": severity, "scale": scale},
                "annotations": {
                    "summary": f"{{{{ $labels.config }}}}: {PLAN.traffic} edge traffic burns its error budget "
                    f"{factor:g}x ({long}/{short})",
                    "description": (
                        f"Edge ({EDGE_SERVICES}) {PLAN.traffic} error ratio (CANCELLED excluded) above {threshold:g} "
                        f"over both {long} and {short}; SLO error budget {SLO_ERROR_BUDGET:g} (plan {PLAN.plan})."
                    ),
                },
            }
        )
    return [{"name": "drill-slo-burn", "interval": "1s", "rules": rules}]


HEADER = (
    "# GENERATED by `drill dashboards build` from harness/dashboards/rules.py, harness/core/status.py\n"
    f"# and the plan harness/plans/{PLAN.plan}.yaml (SLO budget {PLAN.budget:g}, window {PLAN.window_s} s).\n"
    "# Do not edit by hand: change the generator and rebuild (a test fails when this file is stale).\n"
)


class _Dumper(yaml.SafeDumper):
    """Multi-line expressions as literal blocks, so the YAML reads like hand-written rules."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render(groups: list[dict[str, Any]]) -> str:
    return HEADER + yaml.dump({"groups": groups}, Dumper=_Dumper, sort_keys=False, width=200)


def rule_files() -> dict[str, str]:
    """File name (under compose/prometheus/rules/) -> YAML text."""
    return {
        "drill-recording.yml": render(recording_groups()),
        "drill-alerts.yml": render(alert_groups()),
    }


__all__ = ["PlanDefaults", "rule_files"]
