"""A sweep's result in words and numbers: each configuration's boundary with the points that bracket it."""

from __future__ import annotations

from harness.drills.sweep.axes import Axis
from harness.drills.sweep.search import BoundaryKind, Tally, search, wilson
from harness.drills.sweep.store import Record, tallies


def _count(t: Tally) -> str:
    return f"{t.k}/{t.n} never restored"


def boundary(axis: Axis, records: list[Record], config: str, max_trials: int) -> dict:
    """One configuration's boundary: its `kind` (a `BoundaryKind`), the bracketing
    values with their tallies, the verdict's sentence, and any point that breaks monotony."""
    values = axis.values
    t = tallies(records, config)
    b = search(values, t, max_trials)
    lab = axis.label
    rec = {"recovering": b.recovering, "failing": b.failing, "done": b.done, "kind": b.kind}
    if b.kind is BoundaryKind.ABOVE_RANGE:
        top = t[b.recovering]
        rec["text"] = f"{config} recovers from every trigger up to {lab(b.recovering)} ({_count(top)} there)"
    elif b.kind is BoundaryKind.BELOW_RANGE:
        rec["text"] = f"{config} does not recover even at {lab(b.failing)} ({_count(t[b.failing])} there)"
    elif b.kind is BoundaryKind.BETWEEN:
        rec["text"] = (f"{config} stops recovering between {lab(b.recovering)} and {lab(b.failing)} "
                       f"({_count(t[b.failing])} at {lab(b.failing)}, {t[b.recovering].k}/{t[b.recovering].n} "
                       f"at {lab(b.recovering)})")  # fmt: skip
    else:
        known = [f"{lab(v)}: {_count(x)}" for v, x in sorted(t.items())]
        rec["text"] = f"{config}: not bracketed yet ({'; '.join(known) if known else 'no trial yet'})"
    decided = {v: x for v, x in t.items() if x.decided(max_trials)}
    odd = [(lo, hi) for lo in decided for hi in decided if lo < hi and decided[lo].failing and not decided[hi].failing]
    if odd:
        lo, hi = min(odd)
        rec["not_monotone"] = [lo, hi]
        rec["text"] += f"; not monotone: fails at {lab(lo)} yet recovers at {lab(hi)}"
    return rec


def points(axis: Axis, records: list[Record], configs: list[str]) -> list[dict]:
    """Every value measured: per configuration its trials, never-restored count, Wilson interval, MTTRs, burns."""
    out = []
    for value in sorted({r.value for r in records}):
        row: dict = {"value": value, "label": axis.label(value), "configs": {}}
        for config in configs:
            rs = [r for r in records if r.value == value and r.config == config]
            if not rs:
                continue
            counted = [r for r in rs if not r.insufficient_data]
            k = sum(r.never_restored for r in counted)
            lo, hi = wilson(k, len(counted))
            row["configs"][config] = {
                "trials": len(counted), "never_restored": k, "insufficient_data": len(rs) - len(counted),
                "p_never_restored": k / len(counted) if counted else None, "ci95": [lo, hi],
                "breached": [r.breached for r in counted], "mttr_s": [r.mttr_s for r in counted],
                "budget_burn": [r.budget_burn for r in counted],
                "points": sorted({r.point for r in rs}),
            }  # fmt: skip
        out.append(row)
    return out


def summarize(axis: Axis, records: list[Record], configs: list[str], max_trials: int, *,
              stopped: str | None = None) -> dict:  # fmt: skip
    bounds = {c: boundary(axis, records, c, max_trials) for c in configs}
    complete = all(b["done"] for b in bounds.values())
    verdict = "; ".join(b["text"] for b in bounds.values())
    if not complete:
        verdict += f" (stopped: {stopped})" if stopped else " (not finished)"
    return {"complete": complete, "stopped": stopped, "verdict": verdict, "boundaries": bounds,
            "points": points(axis, records, configs)}  # fmt: skip
