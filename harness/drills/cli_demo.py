"""`drill demo`: the retry-storm comparison on the embedded default topology, no Docker.

`drill demo` runs the shipped `retry-storm` plan as naive vs resilient, 3 trials
each, interleaved, with shorter phases (≤ 3 minutes on 2 cores: `DEMO`), and
prints per-configuration medians with trial counts and the verdict with its
confidence interval; `drill demo --quick` applies the plan's quick overrides
(one trial each, ≤ 60 s). `drill run retry-storm` is the full plan (naive vs
budget vs resilient, 3 trials of 42 s each). Load comes from the in-runner
aio driver so the demo needs nothing but this package.
"""

from __future__ import annotations

import argparse

from harness.drills import cli_run

DEMO_PLAN = "retry-storm"
#: merged over the demo plan unless --quick: 2 configurations × 3 trials × (19 s + ~7 s start/stop)
DEMO = {"configs": ["naive", "resilient"], "trials": 3, "phases": {"warmup": 3, "fault": 7, "recovery": 9}}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", default=DEMO_PLAN, help=f"plan to demo (default {DEMO_PLAN})")
    cli_run.add_common(p)


def run(args: argparse.Namespace) -> int:
    demo = DEMO if args.plan == DEMO_PLAN and not args.quick else None
    return cli_run.execute(args.plan, args, base=demo)
