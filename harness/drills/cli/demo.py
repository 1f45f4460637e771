"""`drill demo`: the retry-storm comparison on the embedded default topology, no Docker.

`drill demo` runs the shipped `retry-storm` plan as naive vs resilient, 4 trials
each, interleaved, with shorter phases (`DEMO`), and prints per-configuration
medians with trial counts and the verdict with its confidence interval. Four
trials so that breach counts alone can name a winner: the verdict's Fisher test
is two-sided at 0.05, and a clean split (naive breaches every trial, resilient
none) is p = 0.10 at 3 + 3 trials and p = 0.029 at 4 + 4. (Its bootstrap CIs
of the outage and the budget burn can name one from 3 + 3, but only when every
trial of one configuration is better than every trial of the other.) Eight
trials of 15 s of phases plus ~5–7 s to start and stop a chain fit in 3 minutes
on 2 cores. `drill demo --quick` applies the plan's quick overrides (one trial
each, ≤ 60 s). `drill run retry-storm` is the full plan (naive, budget,
resilient; 3 trials of 42 s of phases each). Load comes from the in-runner aio
driver so the demo needs nothing but this package.
"""

from __future__ import annotations

import argparse

from harness.drills.cli.run import add_common, execute

DEMO_PLAN = "retry-storm"
#: merged over the demo plan unless --quick: 2 configurations × 4 trials × (15 s + ~5–7 s start/stop) ≤ 3 min
DEMO = {"configs": ["naive", "resilient"], "trials": 4, "phases": {"warmup": 3, "fault": 6, "recovery": 6}}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", default=DEMO_PLAN, help=f"plan to demo (default {DEMO_PLAN})")
    add_common(p)


def run(args: argparse.Namespace) -> int:
    demo = DEMO if args.plan == DEMO_PLAN and not args.quick else None
    # the dry run heads its output with what the user typed, not the plan's `drill run` it stands for
    typed = "drill demo" + (f" --plan {args.plan}" if args.plan != DEMO_PLAN else "")
    typed += " --quick" if args.quick else ""
    return execute(args.plan, args, base=demo, command=typed)
