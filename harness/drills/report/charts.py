"""The report's pictures: hand-written inline SVG (no JavaScript, no network).

`trial_points` (every trial's MTTR on one axis), `impact_points` (every trial's
outage against its error budget burned: the trade-off at a glance) and
`line_chart`/`plots` (one quantity over time, a line per configuration, time
relative to fault-on so runs line up, the fault window shaded). Pure: each
returns a `<figure>` string. The p99 chart says under its title how its values
are estimated (`p99_note`): from histogram buckets, so calls that end at their
deadline read as slower than the deadline.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

from harness.drills.analysis import slo as a
from harness.drills.analysis.stats import outage_s
from harness.drills.analysis.trial import never_restored_of
from harness.drills.readings.series import RunSeries
from harness.drills.report.cells import mttr_text, plus_minus

COLORS = ("#d1495b", "#2e86ab", "#2e8b57", "#edae49", "#7b4b94", "#00798c", "#66462c")


def _trials(configs: Mapping[str, dict], order: Sequence[str]) -> dict[str, list[dict]]:
    return {n: configs[n].get("trials") or [configs[n]] for n in order}


def trial_points(results: dict, order: Sequence[str], colors: dict[str, str], width: int = 540) -> str:
    """Every trial as a point: x = its MTTR; held trials at 0 (hollow), never restored at the right edge (×)."""
    configs = results["configs"]
    rows = _trials(configs, order)
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
            elif never_restored_of(t):
                x = sx(t.get("mttr_lower_bound_s") or x1)
                parts.append(f'<text x="{x:.1f}" y="{y + 5}" text-anchor="middle" fill="{colors[name]}" '
                             f'class="trial never">×<title>{label}</title></text>')  # fmt: skip
            else:
                parts.append(f'<circle cx="{sx(t["mttr_s"]):.1f}" cy="{y}" r="5" fill="{colors[name]}" '
                             f'opacity="0.75" class="trial"><title>{label}</title></circle>')  # fmt: skip
    parts.append("</svg>")
    caption = "<figcaption>MTTR of every trial (hollow = SLO held, × = never restored)</figcaption>"
    return f"<figure id='trials'>{caption}{''.join(parts)}</figure>"


def impact_points(results: dict, order: Sequence[str], colors: dict[str, str], width: int = 540) -> str:
    """Every trial as a point: x = its outage (s), y = the error budget it burned; hollow = SLO held."""
    rows = _trials(results["configs"], order)
    pts = [(n, t, outage_s(t), t.get("budget_burn")) for n in order for t in rows[n]
           if outage_s(t) is not None and t.get("budget_burn") is not None]  # fmt: skip
    if not pts:
        return ""
    left, right, top, bottom = 56, 16, 10, 40
    height = 240
    pw, ph = width - left - right, height - top - bottom
    x1 = max(max(p[2] for p in pts) * 1.1, 1.0)
    y1 = max(max(p[3] for p in pts) * 1.1, 1.0)

    def sx(x: float) -> float:
        return left + x / x1 * pw

    def sy(y: float) -> float:
        return top + ph - y / y1 * ph

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" role="img" '
        f'aria-label="Outage against error budget burned, every trial" data-chart="impact">',
        f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#9aa3b2"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#9aa3b2"/>',
    ]
    if y1 >= 1.0:  # the SLO's allowance: below the line the trial stayed within its error budget
        y = f"{sy(1.0):.1f}"
        parts.append(f'<line x1="{left}" y1="{y}" x2="{left + pw}" y2="{y}" stroke="#b23b3b" stroke-dasharray="4 3" '
                     f'class="allowance"><title>1× = the SLO\'s allowance</title></line>')  # fmt: skip
    for frac in (0.0, 0.5, 1.0):
        parts.append(f'<text x="{sx(x1 * frac):.1f}" y="{top + ph + 16}" text-anchor="middle">{x1 * frac:.0f}s</text>')
        parts.append(f'<text x="{left - 4}" y="{sy(y1 * frac) + 4:.1f}" text-anchor="end">{y1 * frac:.1f}×</text>')
    parts.append(f'<text x="{left + pw / 2:.1f}" y="{height - 4}" text-anchor="middle">outage (s)</text>')
    parts.append(f'<text x="12" y="{top + ph / 2:.1f}" text-anchor="middle" '
                 f'transform="rotate(-90 12 {top + ph / 2:.1f})">budget burn</text>')  # fmt: skip
    for name, t, x, y in pts:
        pm = plus_minus((t.get("uncertainty_s") or {}).get("outage_s"))
        label = html.escape(f"{name} trial {t.get('trial', 1)}: outage {x:.1f} s{pm}, budget burn {y:.2f}×")
        fill = "none" if not t.get("breached") else colors[name]
        parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="5" fill="{fill}" stroke="{colors[name]}" '
                     f'stroke-width="2" opacity="0.8" class="impact{" held" if not t.get("breached") else ""}" '
                     f'data-config="{html.escape(name)}"><title>{label}</title></circle>')  # fmt: skip
    parts.append("</svg>")
    legend = " ".join(
        f'<span><span class="swatch" style="background:{colors[n]}"></span>{html.escape(n)}</span>'
        for n in order if n in {p[0] for p in pts}
    )  # fmt: skip
    caption = ("<figcaption>What users felt, every trial: outage (s) against error budget burned "
               "(× the SLO's allowance; hollow = SLO held, dashed = 1×)</figcaption>")  # fmt: skip
    return f"<figure id='impact'>{caption}{''.join(parts)}<div>{legend}</div></figure>"


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
    note: str = "",
) -> str:
    """An inline SVG line chart; x = seconds since fault-on; gaps where a value is None; `note`, when given, in
    small type under the title (what the reader needs to read the line right)."""
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
    if unit == "%":
        y1 = min(y1, 1.0)  # a share never goes past 100 %

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
    small = f'<br><small class="chart-note">{html.escape(note)}</small>' if note else ""
    caption = f"<figcaption>{html.escape(title)}{small}</figcaption>"
    return f"<figure>{caption}{''.join(parts)}<div>{legend}</div></figure>"


def p99_note(bounds: Sequence[float], deadline_s: float | None) -> str:
    """How the p99 line is estimated, and why calls that end at the deadline read as slower than it.

    `quantile_from_buckets` (Prometheus' `histogram_quantile`) interpolates linearly inside the bucket that
    holds the 99th percentile. A call that ends at its deadline lasts a little over it, so it counts in the
    bucket above the deadline's bound; with a share f > 1 % of a second's calls there (and nothing else in
    that bucket) the estimate is lo + (hi − lo)·(1 − 0.01/f): near the bucket's top, past the deadline.
    """
    text = ("Estimated each second from the latency histogram, as Prometheus' histogram_quantile does: by "
            "linear interpolation inside the bucket that holds the 99th percentile.")  # fmt: skip
    finite = sorted(b for b in bounds if math.isfinite(b))
    above = [b for b in finite if b > (deadline_s or 0.0)]
    if deadline_s is None or not above:
        return text
    lo = max((b for b in finite if b <= deadline_s), default=0.0)
    hi = above[0]
    text += (f" A call that ends at the edge's {deadline_s:g}-s deadline lasts a little over {deadline_s:g} s and "
             f"counts in the ({lo:g}, {hi:g}] s bucket; once such calls are over 1 % of a second's calls the "
             f"estimate lands inside that bucket")  # fmt: skip
    if lo == deadline_s:
        at_tenth = lo + (hi - lo) * (1 - 0.01 / 0.10)
        text += (f", past the deadline ({at_tenth:g} s when a tenth of the calls end there), though no call "
                 f"lasted much longer than {deadline_s:g} s")  # fmt: skip
    return text + "."


def _ratio(num: Sequence[float | None], den: Sequence[float | None]) -> list[float | None]:
    return [n / d if n is not None and d else None for n, d in zip(num, den, strict=False)]


def plots(
    series: dict[str, RunSeries], colors: dict[str, str], hops: Sequence[str] | None, *, deadline_s: float | None = None
) -> str:
    """The four required charts (plus traffic) for every configuration, aligned on fault-on; `deadline_s` is the
    edge calls' deadline when known (the p99 chart's note uses it)."""
    rel = {}
    fault = (0.0, 0.0)
    for name, s in series.items():
        rel[name] = [x - s.fault_on for x in s.t]
        fault = (0.0, max(fault[1], s.fault_off - s.fault_on))
    charts = []

    def chart(title, fn, unit="", cid="", note=""):
        lines = {name: (rel[name], fn(s)) for name, s in series.items()}
        charts.append(line_chart(title, lines, colors, fault, unit=unit, chart_id=cid, note=note))

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
    bounds = {float(k.le) for s in series.values() for k in s.select("lat")}
    note = p99_note(sorted(bounds), deadline_s)
    chart("p99 latency at the edge (s)", lambda s: a.p99_series(s, "all"), "", "p99", note)

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
