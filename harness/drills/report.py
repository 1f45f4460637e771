"""report.html: the MTTR comparison table first, then plots over time with the fault window shaded.

Plots are hand-written inline SVG (no JavaScript, no network), one chart per
quantity with a line per configuration, time relative to fault-on so runs line
up. `render` is pure; `write_outputs` writes results.json, series.json and
report.html.
"""

from __future__ import annotations

import dataclasses
import html
import json
import pathlib
import re
import time
from collections.abc import Mapping, Sequence

from harness.drills import analysis as a
from harness.drills import stats
from harness.drills._template import PAGE
from harness.drills.results import as_trials, config_entry, representative_series
from harness.drills.series import RunSeries

COLORS = ("#d1495b", "#2e86ab", "#2e8b57", "#edae49", "#7b4b94", "#00798c", "#66462c")


def _fmt_s(x: float | None, *, breached: bool = True, insufficient: bool = False) -> str:
    if insufficient:
        return "insufficient data"
    if not breached:
        return "held (no breach)"
    return "never" if x is None else f"{x:.1f} s"


def _fmt(x, suffix: str = "", digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}{suffix}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The one-sentence verdict as plain text, whether it is good news, and the configuration
    names it mentions (the HTML report emphasises those; terminals and JSON take `text`)."""

    text: str
    ok: bool
    names: tuple[str, ...] = ()

    def html(self) -> str:
        """`text` escaped, with each configuration name in bold."""
        out = html.escape(self.text)
        for name in sorted(set(self.names), key=len, reverse=True):
            esc = html.escape(name)
            out = re.sub(rf"(?<![\w-]){re.escape(esc)}(?![\w-])", f"<b>{esc}</b>", out)
        return out


def verdict(results: dict) -> Verdict:
    """The verdict of results.json (`stats.verdict`), computed from `configs` when absent."""
    v = results.get("verdict")
    if not isinstance(v, dict):
        configs = {
            n: c if "summary" in c else config_entry(c.get("trials") or [c]) for n, c in results["configs"].items()
        }
        v = stats.verdict(configs, a.rank(configs))
    return Verdict(v["text"], bool(v.get("best")), tuple(v.get("names") or ()))


def _median_cell(c: dict, field: str) -> str:
    s = c.get("summary")
    if not s:
        return _fmt(c.get(field), " s", 1)
    spread = s[field]
    if spread["median"] is None:
        return "—"
    if spread["n"] == 1:
        return f"{spread['median']:.1f} s"
    return f"{spread['median']:.1f} s <small>({spread['min']:.1f}–{spread['max']:.1f})</small>"


def mttr_text(c: dict) -> str:
    """MTTR of a configuration: median over its breached trials, with how many breached / never restored."""
    s = c.get("summary")
    if not s or s["trials"] == 1:
        text = _fmt_s(c.get("mttr_s"), breached=c.get("breached", True), insufficient=c.get("insufficient_data"))
        return text + " (load fell behind)" if c.get("load_fell_behind") else text
    if not s["valid_trials"]:
        return f"insufficient data ({s['trials']} trials)"
    if not s["breaches"]:
        return f"held in {s['valid_trials']}/{s['valid_trials']}"
    med = s["mttr_s"]["median"]
    head = "never" if med is None else f"{med:.1f} s"
    tail = f", {s['never_restored']} never restored" if s["never_restored"] else ""
    return f"{head} (breached {s['breaches']}/{s['valid_trials']}{tail})"


def _rows(results: dict, color: dict[str, str]) -> str:
    configs = results["configs"]
    order = a.rank(configs)
    out = []
    for i, name in enumerate(order):
        c = configs[name]
        s = c.get("summary") or {}
        br = c.get("breached", True)
        cls = ' class="best"' if i == 0 and len(order) > 1 else ""
        null = ' class="null"' if br and c.get("mttr_s") is None else ""
        amp = s.get("amplification", c.get("amplification"))
        ok = s.get("success_rate", c.get("success_rate"))
        aps = s.get("attempts_per_success", c.get("attempts_per_success"))
        blast = s.get("blast_radius", c.get("blast_radius"))
        out.append(
            f'<tr{cls} data-config="{html.escape(name)}"><td><span class="swatch" '
            f'style="background:{color[name]}"></span>{html.escape(name)}</td>'
            f"<td>{s.get('trials', 1)}</td>"
            f"<td{null}>{html.escape(mttr_text(c))}</td>"
            f"<td>{_median_cell(c, 'ttd_s')}</td><td>{_fmt(c.get('ttm_s'), ' s', 1)}</td>"
            f"<td>{_median_cell(c, 'ttr_s')}</td><td>{_fmt(amp, '×')}</td>"
            f"<td>{_pct(ok)}</td><td>{_fmt(aps, '', 2)}</td>"
            f"<td>{_pct(blast)}</td><td>{_pct(c.get('error_rate_during_fault'))}</td>"
            f"<td>{c.get('requests', 0):,}</td></tr>"
        )
    return "\n".join(out)


def trial_points(results: dict, colors: dict[str, str], width: int = 540) -> str:
    """Every trial as a point: x = its MTTR; held trials at 0 (hollow), never restored at the right edge (×)."""
    configs = results["configs"]
    order = a.rank(configs)
    rows = {n: configs[n].get("trials") or [configs[n]] for n in order}
    xs = [t["mttr_s"] for ts in rows.values() for t in ts if t.get("mttr_s") is not None]
    xs += [t["mttr_lower_bound_s"] for ts in rows.values() for t in ts if t.get("mttr_lower_bound_s") is not None]
    x1 = max(xs, default=1.0) * 1.1 or 1.0
    left, right, row_h = 110, 16, 26
    height = row_h * len(order) + 30
    pw = width - left - right

    def sx(x: float) -> float:
        return left + x / x1 * pw

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" role="img" '
        f'aria-label="MTTR of every trial" data-chart="trials">',
        f'<line x1="{left}" y1="{height - 24}" x2="{left + pw}" y2="{height - 24}" stroke="#9aa3b2"/>',
    ]
    for frac in (0.0, 0.5, 1.0):
        parts.append(f'<text x="{sx(x1 * frac):.1f}" y="{height - 8}" text-anchor="middle">{x1 * frac:.0f}s</text>')
    for r, name in enumerate(order):
        y = 14 + r * row_h
        parts.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end">{html.escape(name)}</text>')
        for t in rows[name]:
            label = html.escape(f"{name} trial {t.get('trial', 1)}: {mttr_text({**t, 'summary': None})}")
            if t.get("insufficient_data"):
                continue
            if not t.get("breached"):
                parts.append(f'<circle cx="{sx(0):.1f}" cy="{y}" r="5" fill="none" stroke="{colors[name]}" '
                             f'stroke-width="2" class="trial held"><title>{label}</title></circle>')  # fmt: skip
            elif t.get("mttr_s") is None:
                x = sx(t.get("mttr_lower_bound_s") or x1)
                parts.append(f'<text x="{x:.1f}" y="{y + 5}" text-anchor="middle" fill="{colors[name]}" '
                             f'class="trial never">×<title>{label}</title></text>')  # fmt: skip
            else:
                parts.append(f'<circle cx="{sx(t["mttr_s"]):.1f}" cy="{y}" r="5" fill="{colors[name]}" '
                             f'opacity="0.75" class="trial"><title>{label}</title></circle>')  # fmt: skip
    parts.append("</svg>")
    caption = "<figcaption>MTTR of every trial (hollow = SLO held, × = never restored)</figcaption>"
    return f"<figure id='trials'>{caption}{''.join(parts)}</figure>"


def line_chart(
    title: str,
    lines: dict[str, tuple[Sequence[float], Sequence[float | None]]],
    colors: dict[str, str],
    fault: tuple[float, float],
    *,
    unit: str = "",
    chart_id: str = "",
    width: int = 540,
    height: int = 220,
) -> str:
    """An inline SVG line chart; x = seconds since fault-on; gaps where a value is None."""
    left, right, top, bottom = 48, 10, 10, 26
    pw, ph = width - left - right, height - top - bottom
    xs = [x for t, _ in lines.values() for x in t]
    ys = [y for _, v in lines.values() for y in v if y is not None]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    x0, x1 = min(x0, fault[0]), max(x1, fault[1])
    if x1 <= x0:
        x1 = x0 + 1
    y1 = max(ys) if ys else 1.0
    y1 = y1 * 1.08 if y1 > 0 else 1.0

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + ph - (y / y1) * ph

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
        f'role="img" aria-label="{html.escape(title)}" data-chart="{html.escape(chart_id)}">',
        f'<rect x="{sx(fault[0]):.1f}" y="{top}" width="{max(0.0, sx(fault[1]) - sx(fault[0])):.1f}" '
        f'height="{ph}" fill="#f3c9c9" opacity="0.55" class="fault-window"><title>fault on</title></rect>',
        f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#9aa3b2"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#9aa3b2"/>',
    ]
    for frac in (0.0, 0.5, 1.0):
        y = y1 * frac
        label = f"{100 * y:.0f}%" if unit == "%" else (f"{y:.2g}" if y < 100 else f"{y:.0f}")
        parts.append(f'<text x="{left - 4}" y="{sy(y) + 4:.1f}" text-anchor="end">{label}</text>')
        parts.append(f'<line x1="{left}" y1="{sy(y):.1f}" x2="{left + pw}" y2="{sy(y):.1f}" stroke="#eceef2"/>')
    step = 10 if (x1 - x0) > 40 else 5
    tick = int(x0 // step) * step
    while tick <= x1:
        if tick >= x0:
            parts.append(f'<text x="{sx(tick):.1f}" y="{height - 8}" text-anchor="middle">{tick:g}s</text>')
        tick += step
    for name, (t, v) in lines.items():
        segs: list[list[str]] = [[]]
        for x, y in zip(t, v, strict=False):
            if y is None:
                if segs[-1]:
                    segs.append([])
                continue
            segs[-1].append(f"{sx(x):.1f},{sy(y):.1f}")
        for seg in segs:
            if len(seg) == 1:
                seg.append(seg[0])
            if seg:
                parts.append(
                    f'<polyline fill="none" stroke="{colors[name]}" stroke-width="1.8" '
                    f'points="{" ".join(seg)}" data-config="{html.escape(name)}"/>'
                )
    parts.append("</svg>")
    legend = " ".join(
        f'<span><span class="swatch" style="background:{colors[n]}"></span>{html.escape(n)}</span>' for n in lines
    )
    caption = f"<figcaption>{html.escape(title)}</figcaption>"
    return f"<figure>{caption}{''.join(parts)}<div>{legend}</div></figure>"


def _ratio(num: Sequence[float | None], den: Sequence[float | None]) -> list[float | None]:
    return [n / d if n is not None and d else None for n, d in zip(num, den, strict=False)]


def plots(series: dict[str, RunSeries], colors: dict[str, str], hops: Sequence[str] | None) -> str:
    """The four required charts (plus traffic) for every configuration, aligned on fault-on."""
    rel = {}
    fault = (0.0, 0.0)
    for name, s in series.items():
        rel[name] = [x - s.fault_on for x in s.t]
        fault = (0.0, max(fault[1], s.fault_off - s.fault_on))
    charts = []

    def chart(title, fn, unit="", cid=""):
        lines = {name: (rel[name], fn(s)) for name, s in series.items()}
        charts.append(line_chart(title, lines, colors, fault, unit=unit, chart_id=cid))

    chart(
        "Error rate, all traffic (CANCELLED excluded)",
        lambda s: a.error_rate_series(s, "all", 1),
        "%",
        "error",
    )
    chart(
        "Error rate, organic traffic (blast radius)",
        lambda s: a.error_rate_series(s, "organic", 1),
        "%",
        "organic-error",
    )
    chart("p99 latency at the edge (s)", lambda s: a.p99_series(s, "all"), "", "p99")

    def amp(s: RunSeries):
        per_hop = a.hop_series(s)
        names = list(hops) if hops else sorted(per_hop)
        deepest = per_hop.get(names[-1], []) if names else []
        ingress = a.rps_series(s, "all")
        return _ratio(a.rolling_mean(deepest, 3), a.rolling_mean(ingress, 3))

    chart("Amplification: deepest hop req/s ÷ ingress req/s", amp, "", "amplification")

    def fds(s: RunSeries):
        keys = s.select("fds")
        return [sum(s.values[k][i] or 0.0 for k in keys) if keys else None for i in range(len(s.t))]

    chart("Open file descriptors, all services", fds, "", "fds")
    if any(s.select("tcp") for s in series.values()):

        def close_wait(s: RunSeries):
            keys = [k for k in s.select("tcp") if k.status.upper() == "CLOSE_WAIT"]
            return [sum(s.values[k][i] or 0.0 for k in keys) for i in range(len(s.t))]

        def established(s: RunSeries):
            keys = [k for k in s.select("tcp") if k.status.upper() == "ESTABLISHED"]
            return [sum(s.values[k][i] or 0.0 for k in keys) for i in range(len(s.t))]

        chart("TCP connections ESTABLISHED (server ports)", established, "", "tcp-established")
        chart("TCP connections CLOSE_WAIT (server ports)", close_wait, "", "tcp-close-wait")
    chart("Edge requests/s (all traffic)", lambda s: a.rps_series(s, "all"), "", "rps")
    return "\n".join(charts)


def _hop_table(results: dict) -> str:
    configs = results["configs"]
    hops: list[str] = []
    for c in configs.values():
        for h in c.get("amplification_by_hop", {}):
            if h not in hops:
                hops.append(h)
    if not hops:
        return "<p class='notes'>no per-hop data</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in hops)
    rows = []
    for name in a.rank(configs):
        c = configs[name]
        cells = "".join(f"<td>{_fmt(c.get('amplification_by_hop', {}).get(h), '×')}</td>" for h in hops)
        gaps = c.get("deadline_gaps", {})
        gap = sum(g.get("count", 0) for g in gaps.values())
        fdp = c.get("fd_peaks", {})
        fd = max(fdp.values()) if fdp else None
        rows.append(f"<tr><td>{html.escape(name)}</td>{cells}<td>{gap:,.0f}</td><td>{_fmt(fd, '', 0)}</td></tr>")
    return (
        f"<table id='hop-table'><thead><tr><th>configuration (attempts ÷ edge first attempts)</th>{head}"
        f"<th>deadline-gap calls</th><th>fd peak</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def offered_text(trial: dict, traffic: str) -> str:
    """`achieved / planned req/s` of one traffic class over the fault window, `behind` when it fell behind."""
    o = (trial.get("offered_rps") or {}).get(traffic)
    if not o:
        return "—"
    return f"{o['achieved']:.1f} / {o['planned']:.1f}" + (" behind" if o.get("fell_behind") else "")


def _offered_table(results: dict) -> str:
    """Per trial: the load each traffic class offered during the fault, against the plan (the drill's self-check)."""
    rows = []
    for name in a.rank(results["configs"]):
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
        "<h2>Offered load during the fault</h2><table id='offered-table'><thead><tr><th>configuration</th>"
        "<th>trial</th><th>driver</th><th>organic req/s (achieved / planned)</th>"
        "<th>drill req/s (achieved / planned)</th><th>load fell behind (&lt; 90 %)</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _probe_table(results: dict) -> str:
    rows = []
    for name in a.rank(results["configs"]):
        p = results["configs"][name].get("probe")
        if not p:
            continue
        rows.append(
            f"<tr><td>{html.escape(name)}</td><td>{p.get('connections', 0)}</td><td>{p.get('eof', 0)}</td>"
            f"<td>{p.get('reset', 0)}</td><td>{p.get('open', 0)}</td><td>{p.get('refused', 0)}</td>"
            f"<td>{_fmt(p.get('closed_after_s_max'), ' s', 3)}</td></tr>"
        )
    if not rows:
        return ""
    return (
        "<h2>Half-open probe</h2><table id='probe-table'><thead><tr><th>configuration</th><th>connections</th>"
        "<th>closed (eof)</th><th>reset</th><th>still open</th><th>refused</th><th>last closed after</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def render(results: dict, series: dict[str, RunSeries]) -> str:
    """The whole report.html text."""
    names = list(results["configs"])
    colors = {n: COLORS[i % len(COLORS)] for i, n in enumerate(names)}
    for n in series:
        colors.setdefault(n, COLORS[len(colors) % len(COLORS)])
    v = verdict(results)
    slo = results.get("slo", {})
    limit = 100 * slo.get("max_error_rate", 0.05)
    slo_text = f"error rate ≤ {limit:.0f}% ({slo.get('traffic', 'all')} traffic)"
    if slo.get("max_p99_s"):
        slo_text += f", p99 ≤ {slo['max_p99_s']} s"
    slo_text += f", hold {slo.get('hold_s', 3)} s"
    return PAGE.substitute(
        plan=html.escape(str(results.get("plan", "?"))),
        seed=html.escape(str(results.get("seed", "?"))),
        directive=html.escape(str(results.get("fault", {}).get("directive", "?"))),
        target=html.escape(str(results.get("fault", {}).get("target") or "first hop")),
        slo=html.escape(slo_text),
        when=html.escape(results.get("finished_at", time.strftime("%Y-%m-%d %H:%M:%S"))),
        verdict=v.html(),
        verdict_class="" if v.ok else "bad",
        rows=_rows(results, colors),
        trials=trial_points(results, colors),
        plots=plots(series, colors, results.get("hops")),
        hops=_hop_table(results) + _offered_table(results) + _probe_table(results),
        notes=html.escape(" ".join(results.get("notes", []))),
    )


def write_outputs(
    out: pathlib.Path, results: dict, series: Mapping[str, RunSeries | Sequence[RunSeries]], *, plan: dict | None = None
) -> None:
    """results.json, series.json (every trial, see docs/drills.md) and report.html (the representative trials)."""
    trials = as_trials(series)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    (out / "series.json").write_text(json.dumps(series_document(results, trials)) + "\n")
    (out / "report.html").write_text(render(results, representative_series(trials, results["configs"])))


SERIES_FORMAT = 2


def series_document(results: dict, trials: Mapping[str, Sequence[RunSeries]]) -> dict:
    """series.json: format 2 = `{format, plan, seed, slo, hops, configs: {NAME: [trial series, …]}}`."""
    return {
        "format": SERIES_FORMAT,
        "plan": results.get("plan"),
        "seed": results.get("seed"),
        "slo": results.get("slo"),
        "hops": results.get("hops"),
        "fault": results.get("fault"),
        "configs": {n: [s.to_json() for s in runs] for n, runs in trials.items()},
    }


def read_series_document(data: dict) -> tuple[dict, dict[str, list[RunSeries]]]:
    """(header, trials) from series.json; format 1 (`{NAME: series}`, one trial each) is read too."""
    if isinstance(data, dict) and data.get("format") == SERIES_FORMAT:
        trials = {n: [RunSeries.from_json(s) for s in runs] for n, runs in data["configs"].items()}
        return {k: v for k, v in data.items() if k != "configs"}, trials
    return {"format": 1}, {n: [RunSeries.from_json(s)] for n, s in data.items()}
