"""results.json, assembled once for `drill run` and `drill analyze` (see `model.Results`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from harness.drills import analysis, report
from harness.drills.model import Fault, Plan, Results, Slo
from harness.drills.series import RunSeries


def _stamp(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def assemble(
    series: Mapping[str, RunSeries],
    slo: Slo,
    hops: Sequence[str] | None,
    *,
    plan: Plan | None = None,
    plan_name: str | None = None,
    fault: Fault | None = None,
    extras: Mapping[str, dict] | None = None,
    started: float | None = None,
    source: dict | None = None,
) -> Results:
    """Analyse every configuration's series and wrap the numbers with what produced them."""
    extras = extras or {}
    configs = {name: {**analysis.analyze_run(s, slo, hops), **extras.get(name, {})} for name, s in series.items()}
    if hops is None:
        hops = sorted({h for c in configs.values() for h in c["amplification_by_hop"]})
    fault = fault or (plan.fault if plan else None)
    return Results(
        plan=plan.name if plan else plan_name,
        seed=plan.seed if plan else None,
        fault=fault.model_dump() if fault else {"directive": "(from Prometheus)", "target": None},
        slo=slo.model_dump(),
        hops=list(hops),
        configs=configs,
        ranking=analysis.rank(configs),
        verdict=report.verdict({"configs": configs}).text,
        started_at=_stamp(started) if started else None,
        finished_at=_stamp(),
        duration_s=round(time.time() - started, 1) if started else None,
        phases=plan.phases.model_dump() if plan else None,
        probe=plan.probe.model_dump() if plan and plan.probe else None,
        plan_spec=plan.to_dict() if plan else None,
        source=source,
    )
