"""Grafana dashboards as code (grafana-foundation-sdk) and the Prometheus rules they read.

`build_all()` returns the classic dashboard JSON models keyed by file name;
`drill dashboards build` writes them to `dashboards/` and the generated rule
files to `compose/prometheus/rules/`. Panel ids and uids are fixed so a rebuild
is byte-identical and a re-import updates rather than duplicates.
"""

from __future__ import annotations

import json
from typing import Any

from harness.core.errors import need_extra
from harness.dashboards.names import DATASOURCE_UID
from harness.dashboards.queries import PanelQuery, default_values, iter_queries, substitute

__all__ = ["DATASOURCE_UID", "PanelQuery", "build_all", "default_values", "iter_queries", "render", "substitute"]


def _finish(model: dict[str, Any]) -> dict[str, Any]:
    """Fixed panel ids in layout order, and the annotation fields the SDK model lacks."""
    from harness.dashboards._common import ANNOTATION_EXTRAS

    next_id = 1
    for panel in model.get("panels", []):
        panel["id"] = next_id
        next_id += 1
        for inner in panel.get("panels", []) or []:
            inner["id"] = next_id
            next_id += 1
    for ann in model.get("annotations", {}).get("list", []):
        ann.update(ANNOTATION_EXTRAS.get(ann.get("name", ""), {}))
    model.setdefault("id", None)
    model["version"] = 1
    return model


def build_all() -> dict[str, dict[str, Any]]:
    """File name -> classic dashboard JSON model (not a v2 resource/manifest)."""
    JSONEncoder = need_extra(  # noqa: N806
        "grafana_foundation_sdk.cog.encoder", "dashboards", "building the Grafana dashboards"
    ).JSONEncoder

    from harness.dashboards import mttr, overview

    out = {}
    for name, module in (("drill-overview.json", overview), ("drill-mttr.json", mttr)):
        encoded = JSONEncoder(sort_keys=True, indent=2).encode(module.build().build())
        out[name] = _finish(json.loads(encoded))
    return out


def render(model: dict[str, Any]) -> str:
    """The committed text of one dashboard: stable key order, trailing newline."""
    return json.dumps(model, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
