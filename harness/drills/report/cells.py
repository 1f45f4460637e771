"""How each number of results.json reads in a table cell: the terminal's table and the report's alike.

Per configuration the cells show the median over its trials with (min–max) and
trial counts; a one-trial configuration (or an older results.json without
`summary`) shows its own numbers. A time read back from Prometheus carries its
± (`uncertainty_s`, the largest over the trials the median covers); an exact
time shows none.
"""

from __future__ import annotations

from collections.abc import Mapping


def fmt(x: float | None, suffix: str = "", digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}{suffix}"


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def plus_minus(x: float | None) -> str:
    """' ± 2.0 s' for a read-back uncertainty, '' when exact."""
    return f" ± {x:.1f} s" if x else ""


def _summary(c: Mapping) -> Mapping | None:
    s = c.get("summary")
    return s if s and s.get("trials", 1) > 1 else None


def _pm(c: Mapping, field: str) -> float | None:
    s = _summary(c)
    return ((s or c).get("uncertainty_s") or {}).get(field)


def seconds(x: float | None, *, breached: bool = True, insufficient: bool = False) -> str:
    if insufficient:
        return "insufficient data"
    if not breached:
        return "held (no breach)"
    return "never" if x is None else f"{x:.1f} s"


def mttr_text(c: Mapping) -> str:
    """MTTR of a configuration: median over its breached trials, with how many breached / never restored."""
    s = _summary(c)
    if s is None:
        text = seconds(c.get("mttr_s"), breached=c.get("breached", True), insufficient=c.get("insufficient_data"))
        if c.get("mttr_s") is not None and not c.get("insufficient_data"):
            text += plus_minus(_pm(c, "mttr_s"))
        return text + " (load fell behind)" if c.get("load_fell_behind") else text
    if not s["valid_trials"]:
        return f"insufficient data ({s['trials']} trials)"
    if not s["breaches"]:
        return f"held in {s['valid_trials']}/{s['valid_trials']}"
    med = s["mttr_s"]["median"]
    head = "never" if med is None else f"{med:.1f} s{plus_minus(_pm(c, 'mttr_s'))}"
    tail = f", {s['never_restored']} never restored" if s["never_restored"] else ""
    return f"{head} (breached {s['breaches']}/{s['valid_trials']}{tail})"


def spread_text(c: Mapping, field: str, unit: str = " s", digits: int = 1) -> str:
    """`median unit (min–max)` of one field over the trials (its ± when read back); a trial's own value."""
    s = _summary(c)
    pm = plus_minus(_pm(c, field)) if unit == " s" else ""
    if s is None:
        x = c.get(field)
        return "—" if x is None else f"{x:.{digits}f}{unit}{pm}"
    spread = s.get(field) or {}
    if spread.get("median") is None:
        return "—"
    if spread["n"] == 1 or spread["min"] == spread["max"]:
        return f"{spread['median']:.{digits}f}{unit}{pm}"
    return f"{spread['median']:.{digits}f}{unit}{pm} ({spread['min']:.{digits}f}–{spread['max']:.{digits}f})"


def burn_text(c: Mapping) -> str:
    """Error budget burned from fault-on to the end: 1.00× = exactly the SLO's allowance."""
    return spread_text(c, "budget_burn", "×", 2)


def post_fault_text(c: Mapping) -> str:
    """How many valid trials had a breach that started after the fault and its grace."""
    s = _summary(c)
    if s is None:
        p = c.get("post_fault_breach")
        return f"at +{p['start_s']:.1f} s" if p else "—"
    if not s.get("valid_trials") or not s.get("post_fault_breaches"):
        return "—"
    return f"{s['post_fault_breaches']}/{s['valid_trials']}"


def value_and_detail(text: str) -> tuple[str, str]:
    """'7.0 s (breached 2/3, …)' → ('7.0 s', '(breached 2/3, …)'); '3.10× (1.20–4.00)' likewise: a table
    shows the detail on a second line. Text without such a detail → (text, '')."""
    head, sep, tail = text.partition(" (")
    if not sep or not (tail[:1].isdigit() or tail.startswith("breached")):
        return text, ""
    return head, f"({tail}"


def offered_text(trial: Mapping, traffic: str) -> str:
    """`achieved / planned req/s` of one traffic class over the fault window, `behind` when it fell behind."""
    o = (trial.get("offered_rps") or {}).get(traffic)
    if not o:
        return "—"
    return f"{o['achieved']:.1f} / {o['planned']:.1f}" + (" behind" if o.get("fell_behind") else "")


def readback_note(results: Mapping) -> str | None:
    """A line under the table when times were read back from Prometheus (None when every time is exact)."""
    res = [
        t.get("resolution_s")
        for c in results["configs"].values()
        for t in c.get("trials") or [c]
        if "uncertainty_s" in t
    ]
    if not res:
        return None
    gap = max((r for r in res if r), default=None)
    at = f" at scrapes up to {gap:g} s apart" if gap else ""
    return (
        f"Times read from Prometheus{at}: each ± is how far the read-back's edges may lie from the "
        "runner's 1-s grid (a duration's ± is its two edges' together)."
    )
