"""sweep.html: the verdict, the map (the trigger across, one row per configuration, each measured value a dot
coloured by its outcome with its interval, the boundary shaded between the values that bracket it) and the
table of every point."""

from __future__ import annotations

import html
import pathlib

from harness.drills.sweep.search import BoundaryKind, Outcome, Tally

#: map geometry (px)
WIDTH, LEFT, RIGHT, ROW, TOP = 880, 150, 40, 56, 40
COLOURS = {Outcome.FAILING: "#c0392b", Outcome.RECOVERING: "#2e8b57", Outcome.OPEN: "#d4a017"}


def _outcome(c: dict, max_trials: int) -> Outcome:
    """A point's outcome for one configuration, from its counts in the summary (`summary.points`)."""
    return Tally(c["trials"], c["never_restored"]).outcome(max_trials)


def _x(axis, v: float) -> float:
    return LEFT + (v - axis.lo) / (axis.hi - axis.lo) * (WIDTH - LEFT - RIGHT)


def _frame(axis, rows: int, label: str) -> tuple[list[str], float]:
    """The SVG's opening, the trigger axis under `rows` rows (ticks at the grid, the ends labelled); its base y."""
    height = TOP + ROW * max(1, rows) + 40
    base = TOP + ROW * max(1, rows)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" role="img" '
           f'aria-label="{html.escape(label)}">',
           f'<line x1="{LEFT}" y1="{base}" x2="{WIDTH - RIGHT}" y2="{base}" stroke="#444"/>']  # fmt: skip
    for v in axis.values:
        out.append(f'<line x1="{_x(axis, v):.1f}" y1="{base}" x2="{_x(axis, v):.1f}" y2="{base + 4}" stroke="#444"/>')
    for v in (axis.lo, axis.hi):
        out.append(f'<text x="{_x(axis, v):.1f}" y="{base + 18}" text-anchor="middle" font-size="12">'
                   f"{html.escape(axis.label(v))}</text>")  # fmt: skip
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{base + 34}" text-anchor="middle" font-size="12">'
               f"{html.escape(axis.key)}</text>")  # fmt: skip
    return out, base


def _row(out: list[str], settings, y: float, name: str, boundary: dict, points: list[dict], config: str,
         where: str) -> None:  # fmt: skip
    """One row: its name, the bracket shaded (with a dashed middle) when both sides are in range, and each
    measured value a dot coloured by its outcome, its count above it and its interval on hover."""
    axis = settings.axis
    out.append(f'<text x="{LEFT - 10}" y="{y + 4:.0f}" text-anchor="end" font-size="12">{html.escape(name)}</text>')
    out.append(f'<line x1="{LEFT}" y1="{y}" x2="{WIDTH - RIGHT}" y2="{y}" stroke="#ddd"/>')
    if boundary["kind"] == BoundaryKind.BETWEEN:
        a, z = _x(axis, boundary["recovering"]), _x(axis, boundary["failing"])
        out.append(f'<rect class="boundary" x="{a:.1f}" y="{y - ROW / 2 + 6:.1f}" width="{z - a:.1f}" '
                   f'height="{ROW - 12}" fill="#f5c6c0" opacity="0.6"><title>{html.escape(boundary["text"])}</title>'
                   "</rect>")  # fmt: skip
        out.append(f'<line x1="{(a + z) / 2:.1f}" y1="{y - ROW / 2 + 4:.1f}" x2="{(a + z) / 2:.1f}" '
                   f'y2="{y + ROW / 2 - 4:.1f}" stroke="#c0392b" stroke-dasharray="4 3"/>')  # fmt: skip
    for p in points:
        c = p["configs"].get(config)
        if not c or not c["trials"]:
            continue
        kind, cx = _outcome(c, settings.max_trials), _x(axis, p["value"])
        lo_ci, hi_ci = c["ci95"]
        tip = (f"{config} at {p['label']}{where}: {c['never_restored']}/{c['trials']} never restored "
               f"(95% CI {lo_ci:.2f}–{hi_ci:.2f})")  # fmt: skip
        out.append(f'<circle class="{kind}" cx="{cx:.1f}" cy="{y}" r="7" fill="{COLOURS[kind]}">'
                   f"<title>{html.escape(tip)}</title></circle>")  # fmt: skip
        out.append(f'<text x="{cx:.1f}" y="{y - 11}" text-anchor="middle" font-size="10">'
                   f'{c["never_restored"]}/{c["trials"]}</text>')  # fmt: skip


def svg_map(settings, summary: dict) -> str:
    """One axis: a row per configuration."""
    out, _ = _frame(settings.axis, len(settings.configs), "where each configuration stops recovering")
    for i, config in enumerate(settings.configs):
        _row(out, settings, TOP + ROW * i + ROW / 2, config, summary["boundaries"][config], summary["points"],
             config, "")  # fmt: skip
    out.append("</svg>")
    return "\n".join(out)


def write_page(out: pathlib.Path, settings, summary: dict) -> pathlib.Path:
    rows = []
    for p in summary["points"]:
        for config, c in p["configs"].items():
            lo, hi = c["ci95"]
            breached = c.get("breached") or [True] * len(c["mttr_s"])
            mttr = ", ".join("held" if not b else "never" if m is None else f"{m:g} s"
                             for b, m in zip(breached, c["mttr_s"], strict=True)) or "—"  # fmt: skip
            burn = ", ".join("—" if b is None else f"{b:.2f}×" for b in c["budget_burn"]) or "—"
            rows.append(f"<tr><td>{html.escape(p['label'])}</td><td>{html.escape(config)}</td><td>{c['trials']}</td>"
                        f"<td>{c['never_restored']}</td><td>{lo:.2f}–{hi:.2f}</td><td>{html.escape(mttr)}</td>"
                        f"<td>{html.escape(burn)}</td></tr>")  # fmt: skip
    state = "complete" if summary["complete"] else f"not complete ({html.escape(summary['stopped'] or 'stopped')})"
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>drill sweep {html.escape(settings.plan)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;padding:0 1em}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}
.map{{overflow-x:auto}}</style></head><body>
<h1>Where each configuration stops recovering</h1>
<p>Plan <b>{html.escape(settings.plan)}</b>, {html.escape(settings.axis.key)} from
{html.escape(settings.axis.label(settings.axis.lo))} to {html.escape(settings.axis.label(settings.axis.hi))} in
steps of {settings.axis.step:g}; up to {settings.max_trials} trials a point; {state}.</p>
<p class="verdict">{html.escape(summary["verdict"])}</p>
<div class="map">{svg_map(settings, summary)}</div>
<p>Red: never restored in at least half the trials there; green: restored; amber: not decided yet. The shaded
band lies between the highest value that recovered and the lowest that did not: the boundary is inside it.
The figure over each dot is never restored / trials; hover for its Wilson 95 % interval.</p>
<h2>Points</h2>
<table><tr><th>{html.escape(settings.axis.key)}</th><th>configuration</th><th>trials</th><th>never restored</th>
<th>95% CI</th><th>MTTR per trial</th><th>budget burn per trial</th></tr>
{"".join(rows)}</table></body></html>
"""
    path = out / "sweep.html"
    path.write_text(page)
    return path


def svg_plane(settings, summary: dict, config: str) -> str:
    """One configuration's phase diagram: a row per value of the second key, the lowest at the bottom."""
    axis2 = settings.axis2
    values = axis2.values
    out, _ = _frame(settings.axis, len(values), f"{config}: where it stops recovering, by {axis2.key}")
    out.append(f'<text x="10" y="{TOP - 14}" font-size="12">{html.escape(axis2.key)}</text>')
    for i, v2 in enumerate(values):
        row = next((r for r in summary["rows"] if r["value"] == v2), None)
        y = TOP + ROW * (len(values) - 1 - i) + ROW / 2
        if row is None:  # not run yet: the row's line, no dots
            _row(out, settings, y, axis2.label(v2), {"kind": BoundaryKind.OPEN}, [], config, "")
            continue
        _row(out, settings, y, axis2.label(v2), row["boundaries"][config], row["points"], config,
             f", {axis2.key} {axis2.label(v2)}")  # fmt: skip
    out.append("</svg>")
    return "\n".join(out)


def write_plane_page(out: pathlib.Path, settings, summary: dict) -> pathlib.Path:
    state = "complete" if summary["complete"] else f"not complete ({html.escape(summary['stopped'] or 'stopped')})"
    panels = "".join(f'<h2>{html.escape(c)}</h2><div class="map">{svg_plane(settings, summary, c)}</div>'
                     for c in settings.configs)  # fmt: skip
    rows = "".join(f'<li><a href="{html.escape(r["dir"])}/sweep.html">{html.escape(settings.axis2.key)} = '
                   f'{html.escape(r["label"])}</a>: {html.escape(r["verdict"])}</li>'
                   for r in summary["rows"])  # fmt: skip
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>drill sweep {html.escape(settings.plan)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;padding:0 1em}}
.map{{overflow-x:auto}}</style></head><body>
<h1>Where each configuration stops recovering, by {html.escape(settings.axis2.key)}</h1>
<p>Plan <b>{html.escape(settings.plan)}</b>: {html.escape(settings.axis.key)} bisected from
{html.escape(settings.axis.label(settings.axis.lo))} to {html.escape(settings.axis.label(settings.axis.hi))} at each
{html.escape(settings.axis2.key)} from {html.escape(settings.axis2.label(settings.axis2.lo))} to
{html.escape(settings.axis2.label(settings.axis2.hi))}; up to {settings.max_trials} trials a point; {state}.</p>
<p class="verdict">{html.escape(summary["verdict"])}</p>
{panels}
<p>Each row is a sweep of its own (its page and sweep.json in its directory). Red: never restored in at least
half the trials there; green: restored; amber: not decided yet; the shaded band holds the row's boundary.</p>
<ul>{rows}</ul></body></html>
"""
    path = out / "sweep.html"
    path.write_text(page)
    return path
