"""report.html: the verdict, the MTTR comparison table, every trial as a point, the trials guards stopped, then
plots over time, then per-hop numbers; the run's notes once, as a list, at the foot.

Every table sits in a box of its own that scrolls sideways when the table is wider than the page
(`.wide` in `_template`), and long text cells wrap, so the page itself keeps to the window's width.

`render` is pure (the pictures are `harness.drills.report.charts`, the cells'
wording `harness.drills.report.cells`, shared with the terminal's table);
`write_outputs` writes results.json, series.json and report.html.
"""

from __future__ import annotations

import dataclasses
import html
import json
import pathlib
import re
import time
from collections.abc import Mapping, Sequence

from harness.drills.analysis import landing
from harness.drills.analysis import verdict as judging
from harness.drills.analysis.results import as_trials, config_entry, representative_series
from harness.drills.readings.series import RunSeries, series_document
from harness.drills.report._template import PAGE
from harness.drills.report.cells import (
    burn_text,
    fmt,
    mttr_text,
    offered_text,
    pct,
    post_fault_text,
    readback_note,
    spread_text,
    value_and_detail,
)
from harness.drills.report.charts import COLORS, impact_points, plots, trial_points

__all__ = ["Verdict", "mttr_text", "offered_text", "render", "verdict", "write_outputs"]

#: the verdict box's class by kind: green for a winner or a tie at the top (both are findings of the rule)
BOX = {"winner": "good", "tie": "good", "tradeoff": "tradeoff", "no-data": "bad"}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The one-sentence verdict as plain text, its kind (winner, tie, tradeoff, inconclusive, single, no-data),
    and the configuration names it mentions (the HTML report emphasises those; terminals and JSON take `text`)."""

    text: str
    kind: str
    names: tuple[str, ...] = ()
    winner: str | None = None

    @property
    def ok(self) -> bool:
        """Good news: one configuration is best by the rule."""
        return self.winner is not None

    def html(self) -> str:
        """`text` escaped, with each configuration name in bold."""
        out = html.escape(self.text)
        for name in sorted(set(self.names), key=len, reverse=True):
            esc = html.escape(name)
            out = re.sub(rf"(?<![\w-]){re.escape(esc)}(?![\w-])", f"<b>{esc}</b>", out)
        return out


def judged(results: dict) -> dict:
    """results with `ranking` and `verdict` (`harness.drills.analysis.verdict.judge`), computed from `configs`
    when absent."""
    if isinstance(results.get("verdict"), dict) and results.get("ranking"):
        return results
    configs = {n: c if "summary" in c else config_entry(c.get("trials") or [c]) for n, c in results["configs"].items()}
    ranking, v = judging.judge(configs, seed=results.get("seed") or 0)
    return {**results, "ranking": ranking, "verdict": v}


def verdict(results: dict) -> Verdict:
    """The verdict of results.json (computed from `configs` when absent)."""
    v = judged(results)["verdict"]
    winner = v.get("winner")
    kind = v.get("kind") or ("winner" if winner else "inconclusive")
    return Verdict(v["text"], kind, tuple(v.get("names") or ()), winner)


def _two_lines(text: str) -> str:
    """The value, and below it, smaller, its detail (`cells.value_and_detail`)."""
    head, tail = value_and_detail(text)
    return f"{html.escape(head)}<br><small>{html.escape(tail)}</small>" if tail else html.escape(text)


def _rows(results: dict, order: Sequence[str], color: dict[str, str]) -> str:
    configs = results["configs"]
    v = results["verdict"]
    top = v.get("top") or ([v["winner"]] if v.get("winner") else [])  # the winner, or the tie at the top
    out = []
    for name in order:
        c = configs[name]
        s = c.get("summary") or {}
        br = c.get("breached", True)
        cls = ' class="best"' if name in top else ""
        null = ' class="null"' if br and c.get("mttr_s") is None else ""
        amp = s.get("amplification", c.get("amplification"))
        ok = s.get("success_rate", c.get("success_rate"))
        aps = s.get("attempts_per_success", c.get("attempts_per_success"))
        blast = s.get("blast_radius", c.get("blast_radius"))
        stopped = f"<br><small>stopped by a guard: {s['guard_trips']} of {s.get('trials', 1)}</small>" if s.get(
            "guard_trips") else ""  # fmt: skip
        out.append(
            f'<tr{cls} data-config="{html.escape(name)}"><td><span class="swatch" '
            f'style="background:{color[name]}"></span>{html.escape(name)}{stopped}</td>'
            f"<td>{s.get('trials', 1)}</td>"
            f"<td{null}>{_two_lines(mttr_text(c))}</td>"
            f"<td>{html.escape(post_fault_text(c))}</td>"
            f"<td>{_two_lines(spread_text(c, 'bad_s'))}</td><td>{_two_lines(burn_text(c))}</td>"
            f"<td>{_two_lines(spread_text(c, 'ttd_s'))}</td><td>{fmt(c.get('ttm_s'), ' s', 1)}</td>"
            f"<td>{_two_lines(spread_text(c, 'ttr_s'))}</td><td>{fmt(amp, '×')}</td>"
            f"<td>{pct(ok)}</td><td>{fmt(aps, '', 2)}</td>"
            f"<td>{pct(blast)}</td><td>{pct(c.get('error_rate_during_fault'))}</td>"
            f"<td>{c.get('requests', 0):,}</td></tr>"
        )
    return "\n".join(out)


def _hop_table(results: dict, order: Sequence[str]) -> str:
    configs = results["configs"]
    hops: list[str] = []
    for c in configs.values():
        for h in c.get("amplification_by_hop", {}):
            if h not in hops:
                hops.append(h)
    if not hops:
        return "<h2>Per hop</h2><p class='notes'>no per-hop data</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in hops)
    rows = []
    for name in order:
        c = configs[name]
        cells = "".join(f"<td>{fmt(c.get('amplification_by_hop', {}).get(h), '×')}</td>" for h in hops)
        gaps = c.get("deadline_gaps", {})
        gap = sum(g.get("count", 0) for g in gaps.values())
        fdp = c.get("fd_peaks", {})
        fd = max(fdp.values()) if fdp else None
        rows.append(f"<tr><td>{html.escape(name)}</td>{cells}<td>{gap:,.0f}</td><td>{fmt(fd, '', 0)}</td></tr>")
    return (
        f"<h2>Per hop</h2><div class='wide'><table id='hop-table'><thead><tr><th>configuration (attempts ÷ edge "
        f"first attempts)</th>{head}<th>deadline-gap calls</th><th>fd peak</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _offered_table(results: dict, order: Sequence[str]) -> str:
    """Per trial: the load each traffic class offered during the fault, against the plan (the drill's self-check)."""
    rows = []
    for name in order:
        c = results["configs"][name]
        for t in c.get("trials") or [c]:
            if not t.get("offered_rps"):
                continue
            behind = t.get("load_fell_behind")
            cls = ' class="null"' if behind else ""
            rows.append(
                f"<tr{cls}><td>{html.escape(name)}</td><td>{t.get('trial', 1)}</td>"
                f"<td>{html.escape(str(t.get('driver', '—')))}</td><td>{offered_text(t, 'organic')}</td>"
                f"<td>{offered_text(t, 'drill')}</td>"
                f"<td>{'yes: insufficient data' if behind else 'no'}</td></tr>"
            )
    if not rows:
        return ""
    return (
        "<h2>Offered load during the fault</h2><div class='wide'><table id='offered-table'><thead><tr>"
        "<th>configuration</th><th>trial</th><th>driver</th><th>organic req/s (achieved / planned)</th>"
        "<th>drill req/s (achieved / planned)</th><th>load fell behind (&lt; 90 %)</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _probe_table(results: dict, order: Sequence[str]) -> str:
    rows = []
    for name in order:
        p = results["configs"][name].get("probe")
        if not p:
            continue
        rows.append(
            f"<tr><td>{html.escape(name)}</td><td>{p.get('connections', 0)}</td><td>{p.get('eof', 0)}</td>"
            f"<td>{p.get('reset', 0)}</td><td>{p.get('open', 0)}</td><td>{p.get('refused', 0)}</td>"
            f"<td>{fmt(p.get('closed_after_s_max'), ' s', 3)}</td></tr>"
        )
    if not rows:
        return ""
    return (
        "<h2>Half-open probe</h2><div class='wide'><table id='probe-table'><thead><tr><th>configuration</th>"
        "<th>connections</th><th>closed (eof)</th><th>reset</th><th>still open</th><th>refused</th>"
        f"<th>last closed after</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _guard_table(results: dict, order: Sequence[str]) -> str:
    """Every trial a guard stopped: which guard, when, what it saw, what the run stopped; and trials skipped."""
    rows = []
    for name in order:
        c = results["configs"][name]
        for t in c.get("trials") or [c]:
            g = t.get("guard")
            if not g:
                continue
            acts = "; ".join(f"{k}: {v}" for k, v in (g.get("actions") or {}).items())
            rows.append(
                f"<tr class='null'><td>{html.escape(name)}</td><td>{t.get('trial', 1)}</td>"
                f"<td>{html.escape(g['name'])}</td><td>{g['tripped_at_s']:g} s</td>"
                f"<td>{html.escape(g['text'])}</td><td>{html.escape(acts) or '—'}</td></tr>"
            )
        skipped = (c.get("summary") or {}).get("skipped_trials")
        if skipped:
            rows.append(f"<tr><td>{html.escape(name)}</td><td colspan='5'>{skipped} later trial"
                        f"{'s' if skipped > 1 else ''} skipped (guard.after_trip: skip)</td></tr>")  # fmt: skip
    if not rows:
        return ""
    return (
        "<h2>Safeguards</h2><div class='wide'><table id='guard-table' class='text'><thead><tr><th>configuration</th>"
        "<th>trial</th><th>guard</th><th>tripped at (s into the trial)</th><th>what it saw</th>"
        f"<th>what the run stopped</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def render(results: dict, series: dict[str, RunSeries]) -> str:
    """The whole report.html text."""
    results = judged(results)
    order = results["ranking"]
    names = list(results["configs"])
    colors = {n: COLORS[i % len(COLORS)] for i, n in enumerate(names)}
    for n in series:
        colors.setdefault(n, COLORS[len(colors) % len(COLORS)])
    v = verdict(results)
    slo = results.get("slo", {})
    limit = 100 * slo.get("max_error_rate", 0.05)
    slo_text = f"error rate ≤ {limit:g}% ({slo.get('traffic', 'all')} traffic)"
    if slo.get("max_p99_s"):
        slo_text += f", p99 ≤ {slo['max_p99_s']} s"
    slo_text += f", hold {slo.get('hold_s', 3)} s"
    seed = results.get("seed")
    note = readback_note(results)
    return PAGE.substitute(
        plan=html.escape(str(results.get("plan", "?"))),
        seed="" if seed is None else f"seed {html.escape(str(seed))} · ",
        directive=html.escape(str(results.get("fault", {}).get("directive", "?"))),
        target=html.escape(str(results.get("fault", {}).get("target") or "first hop")),
        slo=html.escape(slo_text),
        when=html.escape(results.get("finished_at", time.strftime("%Y-%m-%d %H:%M:%S"))),
        verdict=v.html(),
        verdict_class=BOX.get(v.kind, "open"),
        rows=_rows(results, order, colors),
        readback=(f'<p class="notes" id="readback">{html.escape(note)}</p>' if note else "") + _hits_lines(results),
        trials=trial_points(results, order, colors) + impact_points(results, order, colors),
        plots=plots(series, colors, results.get("hops"), deadline_s=_deadline_s(results)),
        guards=_guard_table(results, order),
        hops=_hop_table(results, order) + _offered_table(results, order) + _probe_table(results, order),
        notes=_notes(results),
    )


def _deadline_s(results: dict) -> float | None:
    """The edge calls' deadline (the plan's `traffic.timeout_s`), when results.json knows the plan."""
    traffic = (results.get("plan_spec") or {}).get("traffic") or {}
    value = traffic.get("timeout_s")
    return float(value) if isinstance(value, int | float) else None


def _hits_lines(results: dict) -> str:
    """What the trials' hits say when the fault did not land as predicted (`landing.summary`), under the table,
    one item per line."""
    lines = landing.summary(results.get("configs") or {})
    if not lines:
        return ""
    items = "".join(f"<li><strong>{html.escape(line)}</strong></li>" for line in lines)
    return f'<ul class="notes" id="hits">{items}</ul>'


def _notes(results: dict) -> str:
    """results.json's `notes` at the foot, one item per note, leaving out the hit lines already shown under the
    table (`notes` starts with the same `landing.summary` lines); nothing when no note is left."""
    shown = set(landing.summary(results.get("configs") or {}))
    items = "".join(f"<li>{html.escape(n)}</li>" for n in results.get("notes") or [] if n not in shown)
    return f'<h2>Notes</h2><ul class="notes" id="notes">{items}</ul>' if items else ""


def write_outputs(
    out: pathlib.Path, results: dict, series: Mapping[str, RunSeries | Sequence[RunSeries]], *, plan: dict | None = None
) -> None:
    """results.json, series.json (every trial, see docs/drills.md) and report.html (the representative trials)."""
    trials = as_trials(series)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    (out / "series.json").write_text(json.dumps(series_document(results, trials)) + "\n")
    (out / "report.html").write_text(render(results, representative_series(trials, results["configs"])))
