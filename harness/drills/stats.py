"""Trials → summary and verdict (DESIGN §10): breach probability, medians, Fisher's exact test, bootstrap CIs.

Pure: every function takes per-trial dicts (`harness.drills.analysis.analyze_run`'s
fields) and returns plain data; the bootstrap uses its own seeded generator so
the same trials always give the same interval.

For comparing configurations each trial's **outage** is used: 0 s when the SLO
held (nothing was lost), its MTTR when restored, and the run-end bound
(`mttr_lower_bound_s`) when never restored. That is a statistic only; results
keep `mttr_s: null` for "held" and "never restored" alike. Trials with
`insufficient_data` are left out of every statistic and counted apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import fisher_exact

ALPHA = 0.05
BOOTSTRAP_SAMPLES = 4000
MAX_TRIALS_ESTIMATE = 200
#: fewer valid trials than this on either side: a bootstrap interval is not taken as evidence
MIN_BOOTSTRAP_TRIALS = 3


def outage_s(trial: Mapping) -> float | None:
    """Seconds the SLO was lost in a trial (see the module docstring); None for insufficient data."""
    if trial.get("insufficient_data"):
        return None
    if not trial.get("breached"):
        return 0.0
    if trial.get("mttr_s") is not None:
        return float(trial["mttr_s"])
    bound = trial.get("mttr_lower_bound_s")
    return float(bound) if bound is not None else math.inf


def _spread(values: Sequence[float | None]) -> dict:
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(float(np.median(xs)), 3), "min": xs[0], "max": xs[-1], "n": len(xs)}


def _median(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return round(float(np.median(xs)), 3) if xs else None


def summarize(trials: Sequence[Mapping]) -> dict:
    """Per configuration: breach probability and the spread of MTTR/TTD/TTR over the breached trials."""
    valid = [t for t in trials if not t.get("insufficient_data")]
    breached = [t for t in valid if t.get("breached")]
    outages = [outage_s(t) for t in valid]
    return {
        "trials": len(trials),
        "valid_trials": len(valid),
        "insufficient_data": len(trials) - len(valid),
        "breaches": len(breached),
        "breach_probability": round(len(breached) / len(valid), 3) if valid else None,
        "never_restored": sum(1 for t in breached if t.get("mttr_s") is None),
        "mttr_s": _spread([t.get("mttr_s") for t in breached]),
        "ttd_s": _spread([t.get("ttd_s") for t in breached]),
        "ttr_s": _spread([t.get("ttr_s") for t in breached]),
        "median_outage_s": _median([o for o in outages if o is not None and math.isfinite(o)])
        if all(o is not None and math.isfinite(o) for o in outages)
        else (None if not outages else math.inf),
        "post_fault_breaches": sum(1 for t in valid if t.get("post_fault_breach")),
        "success_rate": _median([t.get("success_rate") for t in valid]),
        "attempts_per_success": _median([t.get("attempts_per_success") for t in valid]),
        "amplification": _median([t.get("amplification") for t in valid]),
        "blast_radius": _median([t.get("blast_radius") for t in valid]),
    }


def summary_key(summary: Mapping) -> tuple:
    """Rank configurations: any valid trial first, then breach probability, then median outage."""
    if not summary.get("valid_trials"):
        return (1, 0.0, 0.0)
    outage = summary.get("median_outage_s")
    return (0, summary["breach_probability"], math.inf if outage is None else outage)


def representative(trials: Sequence[Mapping]) -> int:
    """Index of the median trial (by outage; insufficient data last): its fields stand for the configuration."""
    order = sorted(range(len(trials)), key=lambda i: (outage_s(trials[i]) is None, outage_s(trials[i]) or 0.0, i))
    return order[(len(order) - 1) // 2] if order else 0


# --- tests --------------------------------------------------------------------------------------
def fisher_p(b1: int, n1: int, b2: int, n2: int) -> float:
    """Two-sided Fisher's exact test on breaches b of n trials, two configurations."""
    if n1 == 0 or n2 == 0:
        return 1.0
    return float(fisher_exact([[b1, n1 - b1], [b2, n2 - b2]])[1])


def bootstrap_median_diff(
    a: Sequence[float], b: Sequence[float], *, samples: int = BOOTSTRAP_SAMPLES, seed: int = 0
) -> tuple[float, float, float]:
    """median(b) − median(a) and its bootstrap 95 % CI (resample each side with replacement)."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = float(np.median(xb) - np.median(xa))
    rng = np.random.default_rng(seed)
    ma = np.median(rng.choice(xa, size=(samples, len(xa)), replace=True), axis=1)
    mb = np.median(rng.choice(xb, size=(samples, len(xb)), replace=True), axis=1)
    lo, hi = np.percentile(mb - ma, [2.5, 97.5])
    return diff, float(lo), float(hi)


def _trials_for_fisher(b1: int, n1: int, b2: int, n2: int) -> int | None:
    """Trials per configuration at which the observed breach proportions would give p < ALPHA."""
    p1, p2 = b1 / n1, b2 / n2
    if p1 == p2:
        return None
    for n in range(max(n1, n2) + 1, MAX_TRIALS_ESTIMATE + 1):
        if fisher_p(round(p1 * n), n, round(p2 * n), n) < ALPHA:
            return n
    return None


def _trials_for_ci(n: int, diff: float, lo: float, hi: float) -> int | None:
    """Trials per configuration at which the CI (shrinking as 1/√n) would exclude 0."""
    half = (hi - lo) / 2
    if diff == 0 or not math.isfinite(half):
        return None
    if half == 0 or n < MIN_BOOTSTRAP_TRIALS:
        return max(n + 1, MIN_BOOTSTRAP_TRIALS)
    need = max(n + 1, math.ceil(n * (half / abs(diff)) ** 2))
    return need if need <= MAX_TRIALS_ESTIMATE else None


def compare(best: Sequence[Mapping], other: Sequence[Mapping], *, seed: int = 0) -> dict:
    """Is `other` significantly worse than `best`? Fisher on breaches, bootstrap CI on median outage."""
    vb = [t for t in best if not t.get("insufficient_data")]
    vo = [t for t in other if not t.get("insufficient_data")]
    bb, bo = sum(bool(t.get("breached")) for t in vb), sum(bool(t.get("breached")) for t in vo)
    out: dict = {"breaches": [bb, len(vb)], "other_breaches": [bo, len(vo)]}
    out["fisher_p"] = round(fisher_p(bb, len(vb), bo, len(vo)), 4)
    ob, oo = [outage_s(t) for t in vb], [outage_s(t) for t in vo]
    finite = ob and oo and all(math.isfinite(x) for x in ob + oo)
    if finite:
        diff, lo, hi = bootstrap_median_diff(ob, oo, seed=seed)
        out["median_outage_diff_s"] = round(diff, 3)
        out["ci95_s"] = [round(lo, 3), round(hi, 3)]
        enough = min(len(ob), len(oo)) >= MIN_BOOTSTRAP_TRIALS
        out["ci_trusted"] = enough
        ci_significant = enough and (lo > 0 or hi < 0)
        ci_worse = enough and lo > 0
    else:
        out["median_outage_diff_s"], out["ci95_s"] = None, None
        ci_significant = ci_worse = False
        diff, lo, hi = 0.0, 0.0, 0.0
    fisher_significant = out["fisher_p"] < ALPHA
    out["significant"] = bool(fisher_significant or ci_significant)
    more_breaches = bo / max(1, len(vo)) > bb / max(1, len(vb))
    out["worse"] = bool((fisher_significant and more_breaches) or ci_worse)
    if not out["significant"] and vb and vo:
        n = min(len(vb), len(vo))
        estimates = [e for e in (_trials_for_fisher(bb, len(vb), bo, len(vo)), _trials_for_ci(n, diff, lo, hi)) if e]
        out["trials_needed"] = min(estimates) if estimates else None
    return out


def _num(x: float | None, unit: str = " s") -> str:
    return "—" if x is None else ("never" if not math.isfinite(x) else f"{x:.1f}{unit}")


def verdict(configs: Mapping[str, Mapping], order: Sequence[str], *, seed: int = 0) -> dict:
    """The best configuration against each other one; a winner only when every difference is significant.

    `configs[name]` has `trials` (per-trial dicts) and `summary` (`summarize`); `order` is the ranking.
    """
    trials = {n: list(configs[n].get("trials") or [configs[n]]) for n in order}
    counts = {n: len(t) for n, t in trials.items()}
    n_min = min(counts.values()) if counts else 0
    base = {"trials": counts, "comparisons": {}}
    valid = [n for n in order if configs[n].get("summary", {}).get("valid_trials", 1)]
    if not valid:
        return {**base, "text": "No trial had enough data to judge (see insufficient_data).", "winner": None,
                "conclusive": False, "best": None}  # fmt: skip
    best = valid[0]
    if len(order) < 2:
        s = configs[best].get("summary") or summarize(trials[best])
        text = (
            f"{best}: breached in {s['breaches']} of {s['valid_trials']} trials, "
            f"median MTTR {_num(s['mttr_s']['median'])}."
        )
        return {**base, "text": text, "winner": None, "conclusive": False, "best": best, "names": [best]}
    parts, settled, needed = [], True, []
    for other in order:
        if other == best:
            continue
        if other not in valid:
            parts.append(f"{other} had insufficient data")
            settled = False
            continue
        c = compare(trials[best], trials[other], seed=seed)
        base["comparisons"][other] = c
        ci = c["ci95_s"]
        ci_text = f", 95% CI {ci[0]:+.1f} to {ci[1]:+.1f} s" if ci else ""
        if ci and not c.get("ci_trusted"):
            ci_text += " (too few trials for a CI)"
        diff = c["median_outage_diff_s"]
        parts.append(
            f"vs {other}: breaches {c['breaches'][0]}/{c['breaches'][1]} vs {c['other_breaches'][0]}/"
            f"{c['other_breaches'][1]} (Fisher p={c['fisher_p']:.2g}), median outage "
            f"{_num(diff)} longer{ci_text}"
        )
        if not c["worse"]:
            settled = False
            if c.get("trials_needed"):
                needed.append(c["trials_needed"])
    detail = "; ".join(parts)
    if settled:
        text = f"{best} recovers best ({detail})."
        return {**base, "text": text, "winner": best, "conclusive": True, "best": best, "names": list(order)}
    more = (
        f"; about {max(needed)} trials per configuration ({max(needed) - n_min} more) would likely settle it"
        if needed and len(needed) == len(base["comparisons"])
        else "; more trials are unlikely to separate them at the observed difference"
    )
    text = f"Inconclusive after {n_min} trial{'' if n_min == 1 else 's'}: {best} looks best ({detail}){more}."
    out = {**base, "text": text, "winner": None, "conclusive": False, "best": best, "names": list(order)}
    if needed:
        out["trials_needed"] = max(needed)
    return out


def regression(baseline: Sequence[Mapping], current: Sequence[Mapping], *, seed: int = 0) -> str | None:
    """Why `current` trials are significantly worse than `baseline` ones, or None."""
    c = compare(baseline, current, seed=seed)
    if not c["worse"]:
        return None
    why = []
    if c["fisher_p"] < ALPHA:
        why.append(
            f"breaches {c['other_breaches'][0]}/{c['other_breaches'][1]} vs {c['breaches'][0]}/{c['breaches'][1]} "
            f"(Fisher p={c['fisher_p']:.2g})"
        )
    if c["ci95_s"] and c["ci95_s"][0] > 0:
        why.append(f"median outage {c['median_outage_diff_s']:+.1f} s (95% CI {c['ci95_s'][0]:+.1f} to "
                   f"{c['ci95_s'][1]:+.1f} s)")  # fmt: skip
    return ", ".join(why) or "significantly worse"
