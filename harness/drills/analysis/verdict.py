"""The verdict (contracts §12): which configuration is best, by a rule that looks at what users felt.

A configuration is **best** when, against every other configuration with data,
it is significantly better on at least one of recovery (breach probability by
Fisher's exact test, or the median outage by its bootstrap CI) and budget burn
(bootstrap CI of the median), and significantly worse on neither
(`harness.drills.analysis.stats.compare`). Better on one and worse on the other is a
named **trade-off**: no winner, both numbers with their CIs. Configurations
without a valid trial are **set aside** with the reason (to rerun), and the
others are compared without them. Several configurations may **tie at the
top**: each significantly better than every configuration outside the tie (by
the same rule) and no pair inside it separated. That is a finding, not an
inconclusive run: the verdict says who beat whom first, then the **secondary
measures** on which the tied ones differ (success rate, amplification, p99
during the fault), named as secondary, never as a winner. `top` holds the tie
(or the winner alone). Nothing significant either way is **inconclusive**, with
a rough count of the trials that would settle it.

A configuration a **guard** stopped in any trial (`harness.drills.trials.guard`: users were
hurt beyond what the plan allows, so the run stopped its fault) is judged, never set
aside as no data: against one no guard stopped it is worse on impact whatever its
numbers say (they end where the guard ended the fault), and it never wins.

The ranking follows the same rule: configurations no guard stopped first; then
those no other one beats, then those that beat the most; among those the rule
cannot separate, the sum of their places on recovery and on budget burn (point
estimates), lower burn first on a tie; configurations without data last.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from harness.drills.analysis import stats

RULE = "significantly better than every other configuration on recovery or error budget burned, and worse on neither"
GUARD_RULE = "a configuration a guard stopped counts as worse on impact and never wins"
NO_BEST = "No configuration is best (better than every other on recovery or error budget burned, worse on neither)"
_MIRROR = {"better": "worse", "worse": "better", "tradeoff": "tradeoff", "inconclusive": "inconclusive"}


def _mirror(c: dict) -> dict:
    """`compare(a, b)` seen from b: the same test, every difference negated (one bootstrap per pair)."""
    out = dict(c, breaches=c["other_breaches"], other_breaches=c["breaches"], better=c["worse"], worse=c["better"])
    out["outcome"] = _MIRROR[c["outcome"]]
    for diff, ci in (("median_outage_diff_s", "ci95_s"), ("budget_burn_diff", "budget_burn_ci95")):
        if c.get(diff) is not None:
            out[diff] = -c[diff]
            out[ci] = [-c[ci][1], -c[ci][0]]
    out["median_outage_s"] = list(reversed(c["median_outage_s"]))
    out["budget_burn"] = list(reversed(c["budget_burn"]))
    if "guard_trips" in c:
        out["guard_trips"] = list(reversed(c["guard_trips"]))
    return out


def _guarded(c: dict, a: tuple[int, int], b: tuple[int, int]) -> dict:
    """`compare(a, b)` with the guards' word: (trips, trials) of each side. One side stopped by a guard and the
    other not: the stopped one is worse on impact (and better on nothing), whatever the numbers say."""
    out = dict(c, guard_trips=[list(a), list(b)])
    if bool(a[0]) == bool(b[0]):
        return out
    if a[0]:
        out.update(better=[], worse=[*[m for m in c["worse"] if m != "guard"], "guard"], outcome="worse")
    else:
        out.update(better=[*[m for m in c["better"] if m != "guard"], "guard"], worse=[], outcome="better")
    out.pop("trials_needed", None)
    return out


def _places(names: Sequence[str], value) -> dict[str, int]:
    """Competition places (1, 2, 2, 4) by `value` ascending; None last."""
    key = {n: (value(n) is None, value(n) if value(n) is not None else 0.0) for n in names}
    return {n: 1 + sum(1 for m in names if key[m] < key[n]) for n in names}


def _recovery_key(s: Mapping) -> tuple:
    outage = s.get("median_outage_s")
    return (s.get("breach_probability") or 0.0, math.inf if outage is None else outage)


def set_aside_reason(summary: Mapping) -> str:
    return ", ".join(summary.get("insufficient_reasons") or ["insufficient data"])


# --- words ------------------------------------------------------------------------------------
def _seconds(d: float) -> str:
    return "the same" if abs(d) < 0.05 else f"{abs(d):.1f} s {'longer' if d > 0 else 'shorter'}"


def _ci_s(c: dict) -> str:
    lo, hi = c["ci95_s"]
    return f"95% CI {lo:+.1f} to {hi:+.1f} s" + ("" if c["ci_trusted"] else ", too few trials for a CI")


def _ci_burn(c: dict) -> str:
    lo, hi = c["budget_burn_ci95"]
    return f"95% CI of the difference {lo:+.2f} to {hi:+.2f}" + ("" if c["burn_ci_trusted"] else ", too few trials")


def detail(c: dict) -> str:
    """One comparison, A against B, every difference with its sign in words."""
    b, o = c["breaches"], c["other_breaches"]
    parts = [f"breaches {b[0]}/{b[1]} vs {o[0]}/{o[1]} (Fisher p={c['fisher_p']:.2g})"]
    (ta, na), (tb, nb) = c.get("guard_trips") or ((0, 0), (0, 0))
    if ta or tb:
        parts.insert(0, f"stopped by a guard in {ta}/{na} vs {tb}/{nb} trials")
    if c.get("median_outage_diff_s") is not None:
        parts.append(f"median outage {_seconds(c['median_outage_diff_s'])} ({_ci_s(c)})")
    if c.get("budget_burn_diff") is not None:
        ba, bb = c["budget_burn"]
        parts.append(f"budget burn {ba:.2f}× vs {bb:.2f}× ({_ci_burn(c)})")
    return ", ".join(parts)


def _words(c: dict, measure: str, other: str) -> str:
    """How A differs from B (`other`) on one measure it is significantly better or worse on."""
    b, o = c["breaches"], c["other_breaches"]
    if measure == "guard":
        (ta, na), (tb, nb) = c["guard_trips"]
        if measure in c["better"]:
            return f"was never stopped by a guard ({other}: {tb} of {nb} trials)"
        return f"was stopped by a guard in {ta} of {na} trials ({other}: never)"
    if measure == "breaches":
        way = "less" if measure in c["better"] else "more"
        return f"breaches {way} often ({b[0]}/{b[1]} vs {o[0]}/{o[1]} trials, Fisher p={c['fisher_p']:.2g})"
    if measure == "outage":
        (oa, ob), gap = c["median_outage_s"], abs(c["median_outage_diff_s"])
        way = "faster" if measure in c["better"] else "slower"
        return f"recovers {gap:.1f} s {way} (median outage {oa:.1f} vs {ob:.1f} s, {_ci_s(c)})"
    ba, bb = c["budget_burn"]
    if bb > 0:
        return f"burns {ba / bb:.2g}× the error budget {other} burns ({ba:.2f} vs {bb:.2f}, {_ci_burn(c)})"
    return f"burns {ba:.2f}× its error budget where {other} burns none ({_ci_burn(c)})"


def tradeoff_text(a: str, b: str, c: dict) -> str:
    """'A recovers 2.0 s faster (…) but burns 3.1× the error budget B burns (…)': the one better on
    recovery first; each measure with its numbers and CI."""
    if "budget_burn" in c["better"]:
        a, b, c = b, a, _mirror(c)
    good = " and ".join(_words(c, m, b) for m in c["better"])
    bad = " and ".join(_words(c, m, b) for m in c["worse"])
    return f"{a} {good} but {bad}"


def brief(c: dict) -> str:
    """One comparison in a few words, A's numbers first: '0/3 vs 3/3 breaches, median outage 22.0 s shorter,
    budget burn 0.00× vs 2.77×' (the CIs and Fisher's p are in `comparisons`)."""
    b, o = c["breaches"], c["other_breaches"]
    parts = [f"{b[0]}/{b[1]} vs {o[0]}/{o[1]} breaches"]
    (ta, na), (tb, nb) = c.get("guard_trips") or ((0, 0), (0, 0))
    if ta or tb:
        parts.insert(0, f"stopped by a guard in {ta}/{na} vs {tb}/{nb} trials")
    if c.get("median_outage_diff_s") is not None:
        parts.append(f"median outage {_seconds(c['median_outage_diff_s'])}")
    if c.get("budget_burn") and None not in c["budget_burn"]:
        parts.append(f"budget burn {c['budget_burn'][0]:.2f}× vs {c['budget_burn'][1]:.2f}×")
    return ", ".join(parts)


#: Measures the rule does not judge, shown for a tie at the top: (summary key, words, format of a value).
SECONDARY = (
    ("success_rate", "success rate", lambda x: f"{100 * x:.1f} %"),
    ("amplification", "amplification", lambda x: f"{x:.2f}×"),
    ("p99_during_fault_s", "p99 during the fault", lambda x: f"{x:.2f} s"),
)


def secondary_text(top: Sequence[str], summaries: Mapping[str, Mapping]) -> str:
    """'success rate resilient 94.7 %, resilient-p2c 99.7 %; amplification …': each secondary measure on which
    the tied configurations differ as shown (medians over their valid trials); '' when none does."""
    out = []
    for key, words, show in SECONDARY:
        values = {n: summaries[n].get(key) for n in top}
        if any(v is None for v in values.values()) or len({show(v) for v in values.values()}) < 2:
            continue
        out.append(f"{words} " + ", ".join(f"{n} {show(v)}" for n, v in values.items()))
    return "; ".join(out)


def top_tie(usable: Sequence[str], trips: Mapping[str, int], beats: Mapping[str, set], pair: Mapping) -> list[str]:
    """The configurations tied at the top (in `usable`'s order), or [] when there is no such tie.

    A tie is two or more configurations no guard stopped, each significantly better than every configuration
    outside it, no pair inside it separated (neither better, worse nor a trade-off). Such a set is unique: it
    must hold every configuration nobody beats, since its members beat everyone else.
    """
    top = [n for n in usable if not trips[n] and not any(n in beats[o] for o in usable)]
    rest = set(usable) - set(top)
    if len(top) < 2 or not rest:
        return []
    if not all(rest <= beats[a] for a in top):
        return []
    if any(pair[a, b]["outcome"] != "inconclusive" for a in top for b in top if a != b):
        return []
    return top


def _tie_text(top: Sequence[str], others: Sequence[str], pair: Mapping, n_min: int) -> str:
    """'resilient and resilient-p2c tie at the top after 3 trials: both beat naive (0/3 vs 3/3 breaches, …), and
    they do not differ significantly on recovery or error budget burned (…)': who beat whom, with the numbers;
    one set of numbers when every tied one has the same against an opponent."""

    def against(o: str) -> str:
        said = {a: brief(pair[a, o]) for a in top}
        if len(set(said.values())) == 1:
            return f"{o} ({said[top[0]]})"
        return f"{o} ({'; '.join(f'{a}: {t}' for a, t in said.items())})"

    inside = "; ".join(f"{a} vs {b}: {brief(pair[a, b])}" for i, a in enumerate(top) for b in top[i + 1 :])
    every = "both" if len(top) == 2 else "all"
    return (f"{_names(list(top))} tie at the top after {_plural(n_min, 'trial')}: {every} beat "
            f"{_names([against(o) for o in others])}, and they do not differ significantly on recovery or error "
            f"budget burned ({inside})")  # fmt: skip


def _names(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# --- the judgement ------------------------------------------------------------------------------
def judge(configs: Mapping[str, Mapping], *, seed: int = 0) -> tuple[list[str], dict]:
    """(ranking, verdict) of configurations; `configs[name]` has `trials` and `summary` (or is one trial)."""
    trials = {n: list(c.get("trials") or [c]) for n, c in configs.items()}
    summaries = {n: c.get("summary") or stats.summarize(trials[n]) for n, c in configs.items()}
    counts = {n: len(t) for n, t in trials.items()}
    n_min = min(counts.values()) if counts else 0
    trips = {n: sum(1 for t in trials[n] if t.get("guard")) for n in configs}
    usable = [n for n in configs if summaries[n].get("valid_trials") or trips[n]]  # a trip is never "no data"
    aside = {n: set_aside_reason(summaries[n]) for n in configs if n not in usable}
    pair: dict[tuple[str, str], dict] = {}
    for i, a in enumerate(usable):
        for b in usable[i + 1 :]:
            c = stats.compare(trials[a], trials[b], seed=seed)
            pair[a, b] = _guarded(c, (trips[a], counts[a]), (trips[b], counts[b]))
            pair[b, a] = _mirror(pair[a, b])
    beats = {a: {b for b in usable if b != a and pair[a, b]["outcome"] == "better"} for a in usable}
    beaten = {a: {b for b in usable if b != a and pair[a, b]["outcome"] == "worse"} for a in usable}
    rec_place = _places(usable, lambda n: _recovery_key(summaries[n]))
    burn_place = _places(usable, lambda n: summaries[n].get("budget_burn", {}).get("median"))

    def key(n: str) -> tuple:
        burn = summaries[n].get("budget_burn", {}).get("median")
        return (trips[n] > 0, len(beaten[n]), -len(beats[n]), rec_place[n] + burn_place[n],
                math.inf if burn is None else burn, _recovery_key(summaries[n]), n)  # fmt: skip

    ranking = sorted(usable, key=key) + [n for n in configs if n not in usable]
    comparisons = [{"config": a, "other": b, **pair[a, b]} for i, a in enumerate(ranking) for b in ranking[i + 1 :]
                   if (a, b) in pair]  # fmt: skip
    tradeoffs = [{"configs": [c["config"], c["other"]], "text": tradeoff_text(c["config"], c["other"], c)}
                 for c in comparisons if c["outcome"] == "tradeoff"]  # fmt: skip
    winner = next((n for n in usable if not trips[n] and len(usable) > 1 and len(beats[n]) == len(usable) - 1),
                  None)  # fmt: skip
    tie = [] if winner else [n for n in ranking if n in top_tie(usable, trips, beats, pair)]
    top = [winner] if winner else tie
    out = {"trials": counts, "comparisons": comparisons, "tradeoffs": tradeoffs, "set_aside": aside,
           "winner": winner, "top": top, "conclusive": bool(top), "best": ranking[0] if usable else None,
           "names": list(ranking), "guard_trips": {n: k for n, k in trips.items() if k}}  # fmt: skip
    rerun = "; ".join(f"{n} ({why})" for n, why in aside.items())
    if not usable:
        out.update(kind="no-data", text=f"No trial had enough data to judge: rerun {rerun}.")
        return ranking, out
    tail = f" Set aside, to rerun: {rerun}." if aside else ""
    tail = (f" {GUARD_RULE[0].upper()}{GUARD_RULE[1:]}." if any(trips.values()) else "") + tail
    best = ranking[0]
    if len(usable) > 1 and all(trips[n] for n in usable):
        stopped = ", ".join(f"{n} in {trips[n]} of {counts[n]} trials" for n in ranking if n in usable)
        out.update(kind="guard", text=f"No configuration is best: a guard stopped every one ({stopped}).{tail}")
        return ranking, out
    if len(usable) == 1:
        s = summaries[best]
        mttr, burn = s["mttr_s"]["median"], s.get("budget_burn", {}).get("median")
        said = f"a guard stopped {trips[best]} of {counts[best]} trials; " if trips[best] else ""
        said += f"breached in {s['breaches']} of {s['valid_trials']} trials"
        said += "" if mttr is None else f", median MTTR {mttr:.1f} s"
        said += f", {s['never_restored']} never restored" if s.get("never_restored") else ""
        said += "" if burn is None else f", median budget burn {burn:.2f}×"
        text = f"Only {best} has data to judge: {said}.{tail}" if aside else f"{best}: {said}."
        out.update(kind="single", text=text)
        return ranking, out
    if winner is not None:
        details = "; ".join(f"vs {o}: {detail(pair[winner, o])}" for o in ranking if o in usable and o != winner)
        stopped = [o for o in ranking if o in beats[winner] and "guard" in pair[winner, o]["better"]]
        if not stopped:
            why = RULE
        elif len(stopped) == len(usable) - 1:  # won on the guards alone: say so, not "significantly better"
            why = f"no guard stopped it, and one stopped {_names(stopped)}"
        else:
            why = f"no guard stopped it while one stopped {_names(stopped)}, and against the others it is {RULE}"
        out.update(kind="winner", text=f"{winner} is best: {why} ({details}).{tail}")
        return ranking, out
    if tie:
        others = [o for o in ranking if o in usable and o not in tie]
        text = _tie_text(tie, others, pair, n_min)
        extra = secondary_text(tie, summaries)
        if extra:
            text += f". Secondary measures, which the rule does not judge (no winner by them): {extra}"
        out.update(kind="tie", text=f"{text}.{tail}")
        return ranking, out
    if tradeoffs:
        joined = "; ".join(t["text"] for t in tradeoffs)
        text = f"{NO_BEST}: trade-off after {_plural(n_min, 'trial')}: {joined}.{tail}"
        out.update(kind="tradeoff", text=text)
        return ranking, out
    others = [o for o in ranking if o in usable and o != best]
    details = "; ".join(f"{best} vs {o}: {detail(pair[best, o])}" for o in others)
    open_pairs = [pair[best, o] for o in others if pair[best, o]["outcome"] == "inconclusive"]
    needed = [c.get("trials_needed") for c in open_pairs]
    have = min(summaries[n]["valid_trials"] for n in usable)
    kind_of = "trials" if have == n_min else "trials with enough data"
    if needed and all(needed):
        need = max(needed)
        more = f"; about {need} {kind_of} per configuration ({need - have} more) would likely settle it"
        out["trials_needed"] = need
    else:
        more = "; more trials are unlikely to separate them at the observed differences"
    short = [f"{n}: {summaries[n]['valid_trials']}" for n in usable if summaries[n]["valid_trials"] < n_min]
    after = _plural(n_min, "trial") + (f" ({', '.join(short)} with enough data)" if short else "")
    text = f"Inconclusive after {after}: no configuration is {RULE} ({details}){more}.{tail}"
    out.update(kind="inconclusive", text=text)
    return ranking, out
