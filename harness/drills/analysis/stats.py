"""Trials → per-configuration summary and pairwise tests (contracts §10, §12): breach probability, medians,
Fisher's exact test, bootstrap CIs of the outage and of the budget burn.

Pure: every function takes per-trial dicts as results.json holds them
(`harness.drills.analysis.trial.TrialResult.to_dict()` plus what the runner
adds: `guard`, `p99_during_fault_s`) and returns plain data. Dicts, not
`TrialResult`s, because the statistics are also taken of saved trials: a
`--fail-on regression:` baseline, a results.json from before a field existed.
"Never restored" is asked of `trial.never_restored_of`, never written here.
The bootstrap uses its own seeded generator so
the same trials always give the same interval. `harness.drills.analysis.verdict` turns
the pairwise comparisons into a ranking and a sentence.

For comparing configurations each trial's **outage** is used: 0 s when the SLO
held, else the seconds the SLO was lost (the fault's breach until restored for
good, or until the run's end when never restored, plus every post-fault
breach: the trial's `outage_s`). That is a statistic only; results keep
`mttr_s: null` for "held" and "never restored" alike. Trials with
`insufficient_data` are left out of every statistic and counted apart. A trial a
guard stopped (`guard` set) keeps its numbers here; the verdict judges it apart
(`harness.drills.analysis.verdict`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from harness.drills.analysis.trial import never_restored_of

ALPHA = 0.05
BOOTSTRAP_SAMPLES = 4000
MAX_TRIALS_ESTIMATE = 200
#: fewer valid trials than this on either side: a bootstrap interval is not taken as evidence
MIN_BOOTSTRAP_TRIALS = 3


def valid(trials: Sequence[Mapping]) -> list[Mapping]:
    return [t for t in trials if not t.get("insufficient_data")]


def outage_s(trial: Mapping) -> float | None:
    """Seconds the SLO was lost in a trial (see the module docstring); None for insufficient data."""
    if trial.get("insufficient_data"):
        return None
    if not trial.get("breached"):
        return 0.0
    if trial.get("outage_s") is not None:
        return float(trial["outage_s"])
    if trial.get("mttr_s") is not None:  # a results.json from before `outage_s`
        return float(trial["mttr_s"])
    bound = trial.get("mttr_lower_bound_s")
    return float(bound) if bound is not None else math.inf


def uncertainty(trial: Mapping, field: str) -> float:
    """The read-back ± of one of a trial's times (0 when exact)."""
    return float((trial.get("uncertainty_s") or {}).get(field) or 0.0)


def _spread(values: Sequence[float | None]) -> dict:
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(float(np.median(xs)), 3), "min": xs[0], "max": xs[-1], "n": len(xs)}


def _median(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return round(float(np.median(xs)), 3) if xs else None


def summarize(trials: Sequence[Mapping]) -> dict:
    """Per configuration: breach probability, the spread of MTTR/TTD/TTR over the breached trials, and of
    budget burn and bad seconds over every valid trial."""
    ok = valid(trials)
    breached = [t for t in ok if t.get("breached")]
    outages = [outage_s(t) for t in ok]
    out = {
        "trials": len(trials),
        "valid_trials": len(ok),
        "insufficient_data": len(trials) - len(ok),
        "breaches": len(breached),
        "breach_probability": round(len(breached) / len(ok), 3) if ok else None,
        "never_restored": sum(1 for t in trials if never_restored_of(t)),
        "mttr_s": _spread([t.get("mttr_s") for t in breached]),
        "ttd_s": _spread([t.get("ttd_s") for t in breached]),
        "ttr_s": _spread([t.get("ttr_s") for t in breached]),
        "median_outage_s": _median([o for o in outages if o is not None and math.isfinite(o)])
        if all(o is not None and math.isfinite(o) for o in outages)
        else (None if not outages else math.inf),
        "post_fault_breaches": sum(1 for t in ok if t.get("post_fault_breach")),
        "budget_burn": _spread([t.get("budget_burn") for t in ok]),
        "bad_s": _spread([t.get("bad_s") for t in ok]),
        "success_rate": _median([t.get("success_rate") for t in ok]),
        "attempts_per_success": _median([t.get("attempts_per_success") for t in ok]),
        "amplification": _median([t.get("amplification") for t in ok]),
        "blast_radius": _median([t.get("blast_radius") for t in ok]),
        "p99_during_fault_s": _median([t.get("p99_during_fault_s") for t in ok]),
        #: trials a guard stopped (`harness.drills.trials.guard`): counted over every trial, data or not
        "guard_trips": sum(1 for t in trials if t.get("guard")),
    }
    if len(ok) < len(trials):
        reasons = [(t.get("insufficient_reason") or "insufficient data").split(" (")[0] for t in trials]
        out["insufficient_reasons"] = sorted(
            {r for r, t in zip(reasons, trials, strict=True) if t.get("insufficient_data")}
        )
    if any("uncertainty_s" in t for t in ok):  # read back: the largest ± of each time over the trials it covers
        out["uncertainty_s"] = {
            f: round(max((uncertainty(t, f) for t in ok if t.get(f) is not None), default=0.0), 3)
            for f in ("mttr_s", "ttd_s", "ttr_s", "bad_s", "outage_s")
        }
        out["resolution_s"] = max((t.get("resolution_s") or 0.0 for t in ok), default=0.0) or None
    return out


def representative(trials: Sequence[Mapping]) -> int:
    """Index of the median trial (by outage; insufficient data last): its fields stand for the configuration."""
    order = sorted(range(len(trials)), key=lambda i: (outage_s(trials[i]) is None, outage_s(trials[i]) or 0.0, i))
    return order[(len(order) - 1) // 2] if order else 0


# --- tests --------------------------------------------------------------------------------------
def fisher_p(b1: int, n1: int, b2: int, n2: int) -> float:
    """Two-sided Fisher's exact test on breaches b of n trials, two configurations."""
    if n1 == 0 or n2 == 0:
        return 1.0
    from scipy.stats import fisher_exact  # here, not at import: scipy.stats costs ~1.5 s of every `drill` start

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


def _ci(xa: Sequence[float], xb: Sequence[float], seed: int) -> dict | None:
    """median(a) − median(b), its bootstrap 95 % CI, and whether there are trials enough to trust it."""
    if not xa or not xb or not all(math.isfinite(x) for x in [*xa, *xb]):
        return None
    diff, lo, hi = bootstrap_median_diff(xb, xa, seed=seed)
    return {"diff": round(diff, 3), "ci95": [round(lo, 3), round(hi, 3)],
            "trusted": min(len(xa), len(xb)) >= MIN_BOOTSTRAP_TRIALS}  # fmt: skip


def compare(a: Sequence[Mapping], b: Sequence[Mapping], *, seed: int = 0, outage_margin_s: float = 0.0) -> dict:
    """Configuration A's trials against B's, on recovery and on budget burn; every difference is A − B.

    Recovery: Fisher's exact test on breaches, bootstrap CI of the median outage; budget burn: bootstrap CI
    of the median burn. A is significantly `better` (or `worse`) on a measure when Fisher p < ALPHA with
    fewer (more) breaches, or a trusted CI lies wholly below (above) 0 — for the outage, below −margin
    (above +margin): `outage_margin_s` is how far read-back uncertainty alone could move the difference.
    """
    va, vb = valid(a), valid(b)
    ba, bb = sum(bool(t.get("breached")) for t in va), sum(bool(t.get("breached")) for t in vb)
    out: dict = {"breaches": [ba, len(va)], "other_breaches": [bb, len(vb)],
                 "fisher_p": round(fisher_p(ba, len(va), bb, len(vb)), 4)}  # fmt: skip
    better, worse = [], []
    if out["fisher_p"] < ALPHA and va and vb:
        (better if ba / len(va) < bb / len(vb) else worse).append("breaches")
    outage = _ci([outage_s(t) for t in va], [outage_s(t) for t in vb], seed)
    out["median_outage_s"] = [_median([outage_s(t) for t in va]), _median([outage_s(t) for t in vb])]
    out["median_outage_diff_s"] = outage["diff"] if outage else None
    out["ci95_s"] = outage["ci95"] if outage else None
    out["ci_trusted"] = bool(outage and outage["trusted"])
    if outage and outage["trusted"]:
        if outage["ci95"][1] < -outage_margin_s:
            better.append("outage")
        elif outage["ci95"][0] > outage_margin_s:
            worse.append("outage")
    burns_a = [t["budget_burn"] for t in va if t.get("budget_burn") is not None]
    burns_b = [t["budget_burn"] for t in vb if t.get("budget_burn") is not None]
    burn = _ci(burns_a, burns_b, seed)
    out["budget_burn"] = [_median(burns_a), _median(burns_b)]
    out["budget_burn_diff"] = burn["diff"] if burn else None
    out["budget_burn_ci95"] = burn["ci95"] if burn else None
    out["burn_ci_trusted"] = bool(burn and burn["trusted"])
    if burn and burn["trusted"]:
        if burn["ci95"][1] < 0:
            better.append("budget_burn")
        elif burn["ci95"][0] > 0:
            worse.append("budget_burn")
    out["better"], out["worse"] = better, worse
    if better and worse:
        out["outcome"] = "tradeoff"
    elif better or worse:
        out["outcome"] = "better" if better else "worse"
    else:
        out["outcome"] = "inconclusive"
        if va and vb:
            n = min(len(va), len(vb))
            estimates = [_trials_for_fisher(ba, len(va), bb, len(vb))]
            for ci in (outage, burn):
                if ci:
                    estimates.append(_trials_for_ci(n, ci["diff"], *ci["ci95"]))
            found = [e for e in estimates if e]
            out["trials_needed"] = min(found) if found else None
    return out


def regression(baseline: Sequence[Mapping], current: Sequence[Mapping], *, seed: int = 0) -> str | None:
    """Why `current` trials are significantly worse than `baseline` ones (recovery or budget burn), or None.

    The outage counts only beyond the read-back uncertainty: its CI's low bound must clear the sum of the
    two sides' largest ± (0 for a run measured by the runner itself).
    """
    margin = max((uncertainty(t, "outage_s") for t in valid(baseline)), default=0.0)
    margin += max((uncertainty(t, "outage_s") for t in valid(current)), default=0.0)
    c = compare(current, baseline, seed=seed, outage_margin_s=margin)
    if not c["worse"]:
        return None
    why = []
    if "breaches" in c["worse"]:
        why.append(f"breaches {c['breaches'][0]}/{c['breaches'][1]} vs {c['other_breaches'][0]}/"
                   f"{c['other_breaches'][1]} (Fisher p={c['fisher_p']:.2g})")  # fmt: skip
    if "outage" in c["worse"]:
        lo, hi = c["ci95_s"]
        beyond = f", beyond the read-back's ± {margin:.1f} s" if margin else ""
        why.append(f"median outage {c['median_outage_diff_s']:.1f} s longer (95% CI {lo:+.1f} to {hi:+.1f} s{beyond})")
    if "budget_burn" in c["worse"]:
        lo, hi = c["budget_burn_ci95"]
        why.append(f"median budget burn {c['budget_burn'][0]:.2f}× vs {c['budget_burn'][1]:.2f}× "
                   f"(95% CI of the difference {lo:+.2f} to {hi:+.2f})")  # fmt: skip
    return ", ".join(why)
