"""sweep.html: the verdict, the map (the trigger across, one row per configuration, each measured value a dot
coloured by its outcome with its interval, the boundary shaded between the values that bracket it) and the
table of every point."""

from __future__ import annotations

import html
import pathlib

from harness.drills.sweep.search import Tally

#: map geometry (px)
WIDTH, LEFT, RIGHT, ROW, TOP = 880, 150, 40, 56, 40
COLOURS = {"failing": "#c0392b", "recovering": "#2e8b57", "open": "#d4a017"}


def _outcome(c: dict, max_trials: int) -> str:
    t = Tally(c["trials"], c["never_restored"])
    if not t.decided(max_trials):
        return "open"
    return "failing" if t.failing else "recovering"


def svg_map(settings, summary: dict) -> str:
    axis = settings.axis
    configs = settings.configs
    height = TOP + ROW * len(configs) + 40
    span = axis.hi - axis.lo

    def x(v: float) -> float:
        return LEFT + (v - axis.lo) / span * (WIDTH - LEFT - RIGHT)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" role="img" '
           f'aria-label="where each configuration stops recovering">']  # fmt: skip
    base = TOP + ROW * len(configs)
    out.append(f'<line x1="{LEFT}" y1="{base}" x2="{WIDTH - RIGHT}" y2="{base}" stroke="#444"/>')
    for v in axis.values:
        out.append(f'<line x1="{x(v):.1f}" y1="{base}" x2="{x(v):.1f}" y2="{base + 4}" stroke="#444"/>')
    for v in (axis.lo, axis.hi):
        out.append(f'<text x="{x(v):.1f}" y="{base + 18}" text-anchor="middle" font-size="12">'
                   f'{html.escape(axis.label(v))}</text>')  # fmt: skip
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{base + 34}" text-anchor="middle" font-size="12">'
               f'{html.escape(axis.key)}</text>')  # fmt: skip
    for i, config in enumerate(configs):
        y = TOP + ROW * i + ROW / 2
        b = summary["boundaries"][config]
        out.append(f'<text x="{LEFT - 10}" y="{y + 4:.0f}" text-anchor="end" font-size="13">{html.escape(config)}'
                   "</text>")  # fmt: skip
        out.append(f'<line x1="{LEFT}" y1="{y}" x2="{WIDTH - RIGHT}" y2="{y}" stroke="#ddd"/>')
        lo = b["recovering"] if b["recovering"] is not None else None
        hi = b["failing"] if b["failing"] is not None else None
        if b["done"] and (lo is not None or hi is not None):
            a = x(lo) if lo is not None else LEFT
            z = x(hi) if hi is not None else WIDTH - RIGHT
            if lo is not None and hi is not None:
                out.append(f'<rect class="boundary" x="{a:.1f}" y="{y - ROW / 2 + 6:.1f}" width="{z - a:.1f}" '
                           f'height="{ROW - 12}" fill="#f5c6c0" opacity="0.6"><title>{html.escape(b["text"])}'
                           "</title></rect>")  # fmt: skip
                mid = (a + z) / 2
                out.append(f'<line class="boundary" x1="{mid:.1f}" y1="{y - ROW / 2 + 4:.1f}" x2="{mid:.1f}" '
                           f'y2="{y + ROW / 2 - 4:.1f}" stroke="#c0392b" stroke-dasharray="4 3"/>')  # fmt: skip
        for p in summary["points"]:
            c = p["configs"].get(config)
            if not c or not c["trials"]:
                continue
            kind = _outcome(c, settings.max_trials)
            lo_ci, hi_ci = c["ci95"]
            tip = (f"{config} at {p['label']}: {c['never_restored']}/{c['trials']} never restored "
                   f"(95% CI {lo_ci:.2f}–{hi_ci:.2f})")  # fmt: skip
            out.append(f'<circle class="{kind}" cx="{x(p["value"]):.1f}" cy="{y}" r="7" fill="{COLOURS[kind]}">'
                       f"<title>{html.escape(tip)}</title></circle>")  # fmt: skip
            out.append(f'<text x="{x(p["value"]):.1f}" y="{y - 11}" text-anchor="middle" font-size="10">'
                       f'{c["never_restored"]}/{c["trials"]}</text>')  # fmt: skip
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
    """One configuration's phase diagram: the trigger across, the second key up, each measured value a dot
    coloured by its outcome, each row's bracket shaded."""
    axis, axis2 = settings.axis, settings.axis2
    rows = summary["rows"]
    height = TOP + ROW * max(1, len(axis2.values)) + 40
    span = axis.hi - axis.lo

    def x(v: float) -> float:
        return LEFT + (v - axis.lo) / span * (WIDTH - LEFT - RIGHT)

    def y(i: int) -> float:  # the lowest value of the second axis at the bottom
        return TOP + ROW * (len(axis2.values) - 1 - i) + ROW / 2

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" role="img" '
           f'aria-label="{html.escape(config)}: where it stops recovering, by {html.escape(axis2.key)}">']  # fmt: skip
    base = TOP + ROW * len(axis2.values)
    out.append(f'<line x1="{LEFT}" y1="{base}" x2="{WIDTH - RIGHT}" y2="{base}" stroke="#444"/>')
    for v in (axis.lo, axis.hi):
        out.append(f'<text x="{x(v):.1f}" y="{base + 18}" text-anchor="middle" font-size="12">'
                   f"{html.escape(axis.label(v))}</text>")  # fmt: skip
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{base + 34}" text-anchor="middle" font-size="12">'
               f"{html.escape(axis.key)}</text>")  # fmt: skip
    out.append(f'<text x="10" y="{TOP - 14}" font-size="12">{html.escape(axis2.key)}</text>')
    for i, v2 in enumerate(axis2.values):
        out.append(f'<text x="{LEFT - 10}" y="{y(i) + 4:.0f}" text-anchor="end" font-size="12">'
                   f"{html.escape(axis2.label(v2))}</text>")  # fmt: skip
        out.append(f'<line x1="{LEFT}" y1="{y(i)}" x2="{WIDTH - RIGHT}" y2="{y(i)}" stroke="#eee"/>')
        row = next((r for r in rows if r["value"] == v2), None)
        if row is None:
            continue
        b = row["boundaries"][config]
        if b["kind"] == "between":
            a, z = x(b["recovering"]), x(b["failing"])
            out.append(f'<rect class="boundary" x="{a:.1f}" y="{y(i) - ROW / 2 + 6:.1f}" width="{z - a:.1f}" '
                       f'height="{ROW - 12}" fill="#f5c6c0" opacity="0.6"><title>{html.escape(b["text"])}</title>'
                       "</rect>")  # fmt: skip
        for p in row["points"]:
            c = p["configs"].get(config)
            if not c or not c["trials"]:
                continue
            kind = _outcome(c, settings.max_trials)
            tip = f"{config} at {p['label']}, {axis2.key} {axis2.label(v2)}: {c['never_restored']}/{c['trials']}"
            out.append(f'<circle class="{kind}" cx="{x(p["value"]):.1f}" cy="{y(i)}" r="6" fill="{COLOURS[kind]}">'
                       f"<title>{html.escape(tip)} never restored</title></circle>")  # fmt: skip
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
