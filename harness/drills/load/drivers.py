"""Which driver sends a trial's load, chosen once from the plan: the one place that knows all three.

A stack whose file names its own load (`stack.load`) gets it, started by command (`command`); a plan whose
traffic says `driver: locust` gets Locust headless (`locust`); every other plan the runner's own grpc.aio
users (`aio`), which file their calls in the runner's per-second edge counts. The runner then only asks the
driver the questions of `schedule.LoadDriver`.
"""

from __future__ import annotations

import pathlib

from harness.core.snapshots import EdgeCounts
from harness.drills.load.aio import AioLoad
from harness.drills.load.command import CommandLoad
from harness.drills.load.locust import LocustLoad
from harness.drills.load.schedule import LoadDriver
from harness.drills.plan.model import Plan, Variant
from harness.drills.stack.targets import DrillTarget


def driver_for(
    plan: Plan, variant: Variant, trial: int, workdir: pathlib.Path, target: DrillTarget, *, counts: EdgeCounts,
    metrics_url: str,
) -> LoadDriver:  # fmt: skip
    """The driver of trial `trial` of `variant`; `counts` and `metrics_url` are the runner's (the aio load files
    its calls there and is scraped there)."""
    label, tr, fault = variant.name, variant.traffic, variant.fault
    if plan.stack is not None and plan.stack.load is not None:  # the stack's own load, by command
        return CommandLoad(
            plan=plan.name, seed=plan.seed, config_label=label, traffic=tr, fault=fault, phases=plan.phases,
            spec=plan.stack.load, prometheus=plan.stack.prometheus, workdir=workdir, trial=trial,
            edge=plan.stack.edge,
        )  # fmt: skip
    if tr.driver == "locust":  # the plan checked the profile exists
        return LocustLoad(
            plan=plan.name, seed=plan.seed, config_label=label, traffic=tr, fault=fault,
            phases=plan.phases, workdir=workdir, trial=trial,
        )  # fmt: skip
    return AioLoad(
        plan=plan.name, seed=plan.seed, config_label=label, traffic=tr, fault=fault,
        phases=plan.phases, edge_call=target.edge_call(variant), counts=counts, metrics_url=metrics_url,
        trial=trial,
    )  # fmt: skip
