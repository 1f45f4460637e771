"""Shared pieces of the dashboards: the datasource, label filters and small panel builders.

Panels are built with grafana-foundation-sdk (pinned to the Grafana version the
compose file runs). Every query gets an explicit `refId` and the datasource uid
that `compose/grafana/provisioning/datasources/` provisions.
"""

from __future__ import annotations

from collections.abc import Sequence

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, timeseries
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    ValueMap,
    ValueMappingResult,
    VariableOption,
    VariableRefresh,
)

from harness.dashboards.names import DATASOURCE_UID, DRILL_TAG
from harness.dashboards.plan_defaults import EDGE_SERVICES, load
from harness.dashboards.rules import WINDOW

DATASOURCE = DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)

#: The plan the defaults come from (SLO budget, window, traffic).
PLAN = load()

#: Label filters bound to the dashboard variables: `$caller` picks the client series (default the
#: edge, `loadgen|locust`), `$service` the hops, `$traffic` the traffic class (default the SLO's).
CLIENT = 'service=~"$caller", config=~"$config", traffic=~"$traffic"'
SERVER = 'service=~"$service", traffic=~"$traffic"'
SERVICE = 'service=~"$service"'
RESILIENCE = 'service=~"$service", config=~"$config"'
#: Topology hops only: not the edge callers, not Prometheus or anything without a service.
HOPS = f'service=~"$service", service!~"({EDGE_SERVICES})?"'

REF_IDS = "ABCDEFGHIJ"

#: A target: (PromQL, legend format).
Target = tuple[str, str]


def targets(builder, queries: Sequence[Target], *, instant: bool = False):
    """Attach queries to a panel builder with refIds A, B, C... and the fixed datasource."""
    for ref, (expr, legend) in zip(REF_IDS, queries, strict=False):
        q = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DATASOURCE)
        builder = builder.with_target(q.instant() if instant else q.range())
    return builder


def _base(builder, title: str, description: str, unit: str, w: int, h: int):
    return builder.title(title).description(description).datasource(DATASOURCE).unit(unit).span(w).height(h)


def series(
    title: str, description: str, queries: Sequence[Target], *, unit: str = "short", w: int = 12, h: int = 8
) -> timeseries.Panel:
    """A time series panel with a table legend (last, max)."""
    legend = (
        cb.VizLegendOptions()
        .display_mode(cm.LegendDisplayMode.TABLE)
        .placement(cm.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["lastNotNull", "max"])
    )
    panel = _base(timeseries.Panel(), title, description, unit, w, h).legend(legend).fill_opacity(10)
    return targets(panel, queries)


#: Value mappings of the state timelines: value -> (text, color).
BREACH_STATES = {"0": ("within SLO", "green"), "1": ("breach", "red")}
BREAKER_STATES = {"0": ("closed", "green"), "1": ("half-open", "yellow"), "2": ("open", "red")}
ON_OFF = {"0": ("off", "transparent"), "1": ("on", "orange")}


def timeline(
    title: str,
    description: str,
    queries: Sequence[Target],
    *,
    states: dict[str, tuple[str, str]] = ON_OFF,
    w: int = 12,
    h: int = 6,
):
    """A state timeline (drill phases, breaker state, SLO breach) with a value mapping per state."""
    mapping = ValueMap(
        options={v: ValueMappingResult(text=t, color=c, index=i) for i, (v, (t, c)) in enumerate(states.items())}
    )
    panel = (
        _base(statetimeline.Panel(), title, description, "short", w, h)
        .show_value(cm.VisibilityMode.NEVER)
        .mappings([mapping])
    )
    return targets(panel, queries)


def stat_panel(title: str, description: str, queries: Sequence[Target], *, unit: str, w: int = 6, h: int = 6):
    """A single-value panel over the dashboard's range (instant queries)."""
    panel = _base(stat.Panel(), title, description, unit, w, h)
    return targets(panel, queries, instant=True)


def label_variable(name: str, label: str, query: str) -> db.QueryVariable:
    """A multi-select variable from `label_values(...)`, All = `.*`."""
    return (
        db.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .include_all(True)
        .all_value(".*")
        .multi(True)
        .current(VariableOption(selected=True, text="All", value="$__all"))
    )


def traffic_variable() -> db.CustomVariable:
    """Traffic class, default the SLO's (organic: drill traffic fails by design)."""
    default = PLAN.traffic if PLAN.traffic != "all" else "$__all"
    return (
        db.CustomVariable("traffic")
        .label("Traffic")
        .values("organic,drill")
        .include_all(True)
        .all_value(".*")
        .multi(True)
        .current(VariableOption(selected=True, text=default if default != "$__all" else "All", value=default))
    )


def caller_variable() -> db.CustomVariable:
    """Whose client series: the edge callers (default), or every caller including the hops' own calls."""
    return (
        db.CustomVariable("caller")
        .label("Caller")
        .values(f"edge : {EDGE_SERVICES},every caller (hops too) : .*")
        .current(VariableOption(selected=True, text="edge", value=EDGE_SERVICES))
    )


def slo_variable() -> db.TextBoxVariable:
    """The SLO error budget, default the plan's `slo.max_error_rate`."""
    value = f"{PLAN.budget:g}"
    return (
        db.TextBoxVariable("slo")
        .label(f"SLO error budget ({PLAN.plan})")
        .default_value(value)
        .current(VariableOption(selected=True, text=value, value=value))
    )


def window_variable() -> db.CustomVariable:
    """The rate window: the recorded rules' suffix. Default the plan's `slo.window_s` (a range one scrape
    longer holds that many seconds of increments at 1 s scrapes)."""
    text = f"{PLAN.window_s}s (plan)"
    return (
        db.CustomVariable("window")
        .label("Window")
        .values(f"{text} : {WINDOW}")
        .current(VariableOption(selected=True, text=text, value=WINDOW))
    )


#: Grafana's own annotation store (where `harness.dashboards.annotations` posts drill events).
GRAFANA_DATASOURCE = DataSourceRef(type_val="grafana", uid="-- Grafana --")

def fault_annotations() -> list[db.AnnotationQuery]:
    """Built-in annotations, drill events posted by the runner (tag `drill`),
    the fault phase from `drill_fault_active` (a region while the fault is on), and SLO burn alerts."""
    return [
        db.AnnotationQuery()
        .name("Annotations & Alerts")
        .datasource(GRAFANA_DATASOURCE)
        .built_in(1)
        .type("dashboard")
        .enable(True)
        .hide(True)
        .icon_color("rgba(0, 211, 255, 1)"),
        db.AnnotationQuery()
        .name("Drill events")
        .datasource(GRAFANA_DATASOURCE)
        .enable(True)
        .icon_color("purple")
        .target(db.AnnotationTarget().type("tags").tags([DRILL_TAG]).match_any(True).limit(100)),
        db.AnnotationQuery()
        .name("Fault active")
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color("red")
        .expr("max by (plan) (drill_fault_active) > 0"),
        db.AnnotationQuery()
        .name("SLO burn alerts")
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color("orange")
        .expr('max by (alertname, config, scale) (ALERTS{alertname=~"DrillSLO.*", alertstate="firing"})'),
    ]


#: Extra fields the Prometheus annotation editor stores (the SDK model has no slot for them).
ANNOTATION_EXTRAS: dict[str, dict[str, object]] = {
    "Fault active": {"titleFormat": "fault on: {{plan}}", "tagKeys": "plan", "step": "1s"},
    "SLO burn alerts": {"titleFormat": "{{alertname}} ({{scale}})", "tagKeys": "config,scale", "step": "1s"},
}
