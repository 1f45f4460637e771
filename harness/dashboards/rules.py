"""Prometheus recording and alert rules for DESIGN §6, generated from `harness.core.status`.

The status classes are decided once in `harness.core.status`; this module turns those
sets into the recording rules in `compose/prometheus/rules/`, so the dashboards,
the alerts and the Python analysis cannot disagree. `drill dashboards build`
writes the YAML; a test fails when the committed file is stale.

Every class series is zero-filled (a class with no calls is a 0 rate, not a
missing series) so ratios exist as soon as a group has any traffic.
"""

from __future__ import annotations

from typing import Any

import yaml

from harness.core.status import CLIENT_FAULT_CODES, SERVER_FAULT_CODES, StatusClass

#: Rate windows recorded. 30s drives the panels and the fast alert; 2m and 10m the slower burn windows.
WINDOWS: tuple[str, ...] = ("30s", "2m", "10m")

#: Availability SLO the burn-rate alerts assume (99%: an error budget of 1%).
SLO_ERROR_BUDGET = 0.01
#: (alert, short window, long window, burn factor, severity): the SRE workbook's multiwindow pairs,
#: scaled to drills.
BURN_ALERTS: tuple[tuple[str, str, str, float, str], ...] = (
    ("DrillSLOFastBurn", "30s", "2m", 14.4, "page"),
    ("DrillSLOSlowBurn", "2m", "10m", 6.0, "ticket"),
)

CLIENT_LABELS = ("service", "config", "traffic")
SERVER_LABELS = ("service", "traffic")


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


def _ratio_rule(record: str, calls: str) -> dict[str, Any]:
    expr = (
        f'sum without (status_class) ({calls}{{status_class="{StatusClass.SERVER_FAULT.value}"}})\n'
        f'  / sum without (status_class) ({calls}{{status_class!="{StatusClass.CANCELLED.value}"}})'
    )
    return {"record": record, "expr": expr}


def recording_groups() -> list[dict[str, Any]]:
    """One group per window: class rates, error ratios (CANCELLED excluded), ingress and amplification."""
    groups = []
    for w in WINDOWS:
        rules: list[dict[str, Any]] = []
        client_calls = f"drill:client_calls:rate{w}"
        server_calls = f"drill:server_calls:rate{w}"
        for cls in CLASS_MATCHERS:
            rules.append(_class_rule(client_calls, "drill_client_calls_total", CLIENT_LABELS, cls, w))
        rules.append(_ratio_rule(f"drill:client_error_ratio:rate{w}", client_calls))
        for cls in CLASS_MATCHERS:
            rules.append(_class_rule(server_calls, "drill_server_calls_total", SERVER_LABELS, cls, w))
        rules.append(_ratio_rule(f"drill:server_error_ratio:rate{w}", server_calls))
        # Organic ingress: client calls from callers that are not themselves topology services
        # (the load generators), whatever job scraped them.
        rules.append(
            {
                "record": f"drill:ingress_calls:rate{w}",
                "expr": (
                    f'sum(rate(drill_client_calls_total{{traffic="organic"}}[{w}])\n'
                    "  unless on (service) drill_server_calls_total)"
                ),
            }
        )
        rules.append(
            {
                "record": f"drill:hop_amplification:ratio{w}",
                "expr": (
                    f"sum by (service) ({server_calls})\n"  # fmt: skip
                    f"  / on () group_left () drill:ingress_calls:rate{w}"
                ),
            }
        )
        groups.append({"name": f"drill-status-classes-{w}", "rules": rules})
    return groups


def alert_groups() -> list[dict[str, Any]]:
    """SLO burn alerts on the client-side error ratio: the time-to-detect signal."""
    rules = []
    for name, short, long, factor, severity in BURN_ALERTS:
        threshold = factor * SLO_ERROR_BUDGET
        rules.append(
            {
                "alert": name,
                "expr": (
                    f"drill:client_error_ratio:rate{short} > {threshold:g}\n"
                    f"and drill:client_error_ratio:rate{long} > {threshold:g}"
                ),
                "labels": {"severity": severity},
                "annotations": {
                    "summary": "{{ $labels.service }} ({{ $labels.config }}, {{ $labels.traffic }}) "
                    f"burns its error budget {factor:g}x too fast",
                    "description": (
                        f"Error ratio (CANCELLED excluded) above {threshold:g} over both {short} and {long}; "
                        f"SLO error budget {SLO_ERROR_BUDGET:g}."
                    ),
                },
            }
        )
    return [{"name": "drill-slo-burn", "rules": rules}]


HEADER = (
    "# GENERATED by `drill dashboards build` from harness/dashboards/rules.py and harness/core/status.py.\n"
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
