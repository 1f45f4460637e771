"""results.json, assembled once for `drill run` and `drill analyze` (see `plan.outputs.Results`).

Per configuration: `trials` (each trial's `TrialResult.to_dict()`, from
`trial.analyze_run`, plus what the runner adds), `summary` (`stats.summarize`), and, at the top level of
`configs[NAME]`, the fields of its representative trial (the median one,
`representative_trial` names its index) so a one-trial reader keeps working.
`ranking` and `verdict` come from `verdict.judge`. `notes` start with what the
trials' `hits` say when the fault did not land as predicted (`landing.summary`).
Each trial also carries `p99_during_fault_s`, the edge's p99 over the fault
window (`fault_p99`): a secondary measure the verdict shows for a tie at the top.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from harness.drills.analysis import landing, stats, verdict
from harness.drills.analysis.links import link_notes
from harness.drills.analysis.slo import quantile_from_buckets, samples_in
from harness.drills.analysis.traffic import refused_by_hop
from harness.drills.analysis.trial import analyze_run
from harness.drills.plan.model import Plan
from harness.drills.plan.outputs import Results
from harness.drills.plan.sections import Fault, Slo
from harness.drills.readings.series import RunSeries

Trials = Mapping[str, Sequence[RunSeries]]


def _stamp(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def as_trials(series: Mapping[str, RunSeries | Sequence[RunSeries]]) -> dict[str, list[RunSeries]]:
    """`{config: RunSeries}` (one trial each) or `{config: [RunSeries, …]}` → the latter."""
    return {n: [s] if isinstance(s, RunSeries) else list(s) for n, s in series.items()}


def fault_p99(series: RunSeries) -> float | None:
    """p99 of every edge call that ended in the fault window, from the latency histogram's buckets summed over
    the window (Prometheus' `histogram_quantile` over the window's increase); None without calls."""
    win = samples_in(series, series.fault_on, series.fault_off)
    buckets: dict[float, float] = {}
    for key in series.select("lat"):
        le = float(key.le)
        buckets[le] = buckets.get(le, 0.0) + sum(series.values[key][i] or 0.0 for i in win)
    p99 = quantile_from_buckets(0.99, list(buckets.items()))
    return None if p99 is None else round(p99, 3)


def config_entry(trials: Sequence[dict]) -> dict:
    """`configs[NAME]`: the representative trial's fields, `trials`, `summary`."""
    rep = stats.representative(trials)
    return {**trials[rep], "representative_trial": rep, "trials": list(trials), "summary": stats.summarize(trials)}


def representative_series(series: Trials, configs: Mapping[str, dict]) -> dict[str, RunSeries]:
    """The series of each configuration's representative trial (what the report plots over time)."""
    return {n: s[configs[n].get("representative_trial", 0)] for n, s in series.items() if s}


def refusal_notes(trials: Mapping[str, Sequence[RunSeries]]) -> list[str]:
    """One note per configuration whose hops refused calls at their own limits (`traffic.refused_by_hop`): a hop
    whose process was full answered RESOURCE_EXHAUSTED (its in-flight limit) or CANCELLED (its core backlog: no
    error rate counts those), so the trial's numbers show that process's capacity as much as the fault's effect."""
    notes = []
    for name, runs in trials.items():
        per_hop: dict[str, tuple[float, list[int]]] = {}
        for k, s in enumerate(runs, 1):
            for hop, n in refused_by_hop(s).items():
                total, which = per_hop.get(hop, (0.0, []))
                per_hop[hop] = (total + n, [*which, k])
        for hop, (total, which) in sorted(per_hop.items()):
            where = f"trial{'s' if len(which) > 1 else ''} {', '.join(map(str, which))}"
            notes.append(f"{name}: hop {hop} refused {round(total):,} calls at its own limits in {where} (its "
                         "in-flight limit answers RESOURCE_EXHAUSTED, its core backlog CANCELLED, which no error rate "
                         "counts): its process was full, so those trials measure it as much as the fault; give it "
                         "more room (--max-in-flight, --max-backlog, --workers) or less load")  # fmt: skip
    return notes


def assemble(
    series: Mapping[str, RunSeries | Sequence[RunSeries]],
    slo: Slo,
    hops: Sequence[str] | None,
    *,
    plan: Plan | None = None,
    plan_name: str | None = None,
    fault: Fault | None = None,
    extras: Mapping[str, dict | Sequence[dict]] | None = None,
    started: float | None = None,
    source: dict | None = None,
) -> Results:
    """Analyse every trial of every configuration and wrap the numbers with what produced them."""
    trials = as_trials(series)
    extras = extras or {}
    configs = {}
    for name, runs in trials.items():
        extra = extras.get(name, {})
        per = [extra] * len(runs) if isinstance(extra, Mapping) else list(extra)
        configs[name] = config_entry(
            [{"trial": i + 1, **analyze_run(s, slo, hops).to_dict(), "p99_during_fault_s": fault_p99(s),
              **(per[i] if i < len(per) else {}),
              **({"guard": s.guard} if s.guard else {})} for i, s in enumerate(runs)]
        )  # fmt: skip
    if hops is None:
        hops = sorted({h for c in configs.values() for h in c["amplification_by_hop"]})
    fault = fault or (plan.fault if plan else None)
    ranking, judged = verdict.judge(configs, seed=plan.seed if plan else 0)
    return Results(
        plan=plan.name if plan else plan_name,
        seed=plan.seed if plan else None,
        fault=fault.model_dump() if fault else {"directive": "(from Prometheus)", "target": None},
        slo=slo.model_dump(),
        hops=list(hops),
        configs=configs,
        ranking=ranking,
        verdict=judged,
        notes=landing.summary(configs) + refusal_notes(trials) + link_notes(configs),
        started_at=_stamp(started) if started else None,
        finished_at=_stamp(),
        duration_s=round(time.time() - started, 1) if started else None,
        phases=plan.phases.model_dump() if plan else None,
        probe=plan.probe.model_dump() if plan and plan.probe else None,
        plan_spec=plan.to_dict() if plan else None,
        source=source,
    )
