"""Every query a dashboard runs: panel targets, annotation queries and variable queries.

Tests evaluate each one against a real Prometheus; `substitute` replaces
Grafana's variables with concrete PromQL (`.*` for All, a fixed window for
`$__rate_interval`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any


@dataclasses.dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    kind: str  # "panel" | "annotation" | "variable"
    title: str
    ref_id: str
    expr: str
    instant: bool = False

    @property
    def name(self) -> str:
        return f"{self.dashboard} / {self.kind} {self.title!r} / {self.ref_id}"


def _panels(model: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in model.get("panels", []):
        yield panel
        yield from panel.get("panels", []) or []


def iter_queries(model: dict[str, Any]) -> Iterator[PanelQuery]:
    uid = model.get("uid", "?")
    for panel in _panels(model):
        for target in panel.get("targets", []) or []:
            yield PanelQuery(
                uid,
                "panel",
                panel.get("title", ""),
                target.get("refId", ""),
                target.get("expr", ""),
                bool(target.get("instant")) and not target.get("range"),
            )
    for ann in model.get("annotations", {}).get("list", []):
        if ann.get("expr"):
            yield PanelQuery(uid, "annotation", ann.get("name", ""), "annotation", ann["expr"])
    for var in model.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var.get("query")
            expr = query.get("query", "") if isinstance(query, dict) else str(query)
            yield PanelQuery(uid, "variable", var.get("name", ""), "variable", expr)


def default_values(model: dict[str, Any]) -> dict[str, str]:
    """Each template variable's default as PromQL sees it: its `current` value, All as its `allValue`."""
    out: dict[str, str] = {}
    for var in model.get("templating", {}).get("list", []):
        current = var.get("current") or {}
        value = current.get("value", "")
        if isinstance(value, list):
            value = "|".join(value)
        if value in ("$__all", "") and var.get("includeAll"):
            value = var.get("allValue") or ".*"
        out[var["name"]] = value
    return out


_VAR = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)\]\]|\$(\w+)")


def substitute(
    expr: str, values: dict[str, str] | None = None, *, rate_interval: str = "4s", range_: str = "5m"
) -> str:
    """Replace Grafana variables: built-ins by fixed windows (`$__rate_interval` is 4 s at 1 s scrapes),
    dashboard variables by `values` (`default_values(model)` for the dashboard's defaults; missing = `.*`)."""
    builtins = {
        "__rate_interval": rate_interval,
        "__interval": "1s",
        "__range": range_,
    }
    values = values or {}

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name in builtins:
            return builtins[name]
        return values.get(name, ".*")

    return _VAR.sub(repl, expr)
