"""Every number a plan holds has a finite lower and upper bound, and docs/drills.md lists each one as the code has it.

Read from the plan's JSON Schema (generated from `harness.drills.plan`, shipped for editors), so a field
added without a bound, or a bound changed without the doc, fails here.
"""

from __future__ import annotations

import math
import re

import pytest

from harness.drills.plan.files import from_dict, schema
from tests.conftest import ROOT


def numeric_fields() -> dict[str, tuple[float | None, bool, float | None]]:
    """`key.path` (`[]` for list items) → (lower bound, lower bound excluded, upper bound), from the schema."""
    doc = schema()
    defs = doc.get("$defs", {})
    out: dict[str, tuple[float | None, bool, float | None]] = {}

    def walk(node: dict, path: str) -> None:
        if "$ref" in node:
            walk(defs[node["$ref"].rsplit("/", 1)[-1]], path)
            return
        for alt in node.get("anyOf", []):
            walk(alt, path)
        if node.get("type") in ("integer", "number"):
            low = node.get("minimum", node.get("exclusiveMinimum"))
            out[path] = (low, "exclusiveMinimum" in node, node.get("maximum", node.get("exclusiveMaximum")))
        for key, sub in node.get("properties", {}).items():
            walk(sub, f"{path}.{key}" if path else key)
        if isinstance(node.get("items"), dict):
            walk(node["items"], path + "[]")

    walk(doc, "")
    return out


FIELDS = numeric_fields()


def test_the_walk_finds_the_plan_numbers():
    assert {"phases.fault", "traffic.organic_rate", "slo.hold_s", "topology.hops[].queue", "seed"} <= set(FIELDS)


@pytest.mark.parametrize("path", sorted(FIELDS))
def test_every_plan_number_is_bounded_on_both_sides(path):
    low, _, high = FIELDS[path]
    assert low is not None and high is not None, f"{path}: needs a lower and an upper bound (harness.core.limits)"
    assert math.isfinite(low) and math.isfinite(high) and low < high


def _documented() -> dict[str, str]:
    text = (ROOT / "docs" / "drills.md").read_text()
    rows = {}
    for first, second in re.findall(r"^\| ((?:`[^`]+`(?:, )?)+) \| ([\[(][^|]*[\])]) \|", text, re.M):
        for key in re.findall(r"`([^`]+)`", first):
            rows[key] = second
    return rows


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def test_docs_list_every_plan_number_with_the_bound_the_code_has():
    documented = _documented()
    expected = {p: f"{'(' if excl else '['}{_fmt(lo)}, {_fmt(hi)}]" for p, (lo, excl, hi) in FIELDS.items()}
    missing, extra = sorted(set(expected) - set(documented)), sorted(set(documented) - set(expected))
    assert not missing and not extra, f"undocumented: {missing}; not plan numbers: {extra}"
    assert {p: documented[p] for p in expected} == expected


@pytest.mark.parametrize(
    "driver, workers, ok", [("aio", 1, False), ("locust", 1, False), ("locust", 2, True)]
)  # fmt: skip
def test_all_users_together_offer_what_their_load_processes_can(driver, workers, ok, monkeypatch):
    """10 users × 1000/s + 1 × 10/s = 10,010 calls/s: one process may offer 10,000, two Locust workers 20,000."""
    from harness.drills.plan import files as plan

    monkeypatch.setattr(plan, "_check_locust_profile", lambda *a: None)  # about Locust being installed, not bounds
    data = {"topology": {"hops": [{"name": "gateway"}]}, "fault": {"directive": "abort:UNAVAILABLE"},
            "traffic": {"organic_users": 10, "organic_rate": 1000, "driver": driver, "workers": workers}}  # fmt: skip
    if ok:
        assert from_dict(data).traffic.workers == workers
    else:
        with pytest.raises(plan.PlanError, match=r"traffic: users × rate offer 10010 calls/s in all"):
            from_dict(data)
