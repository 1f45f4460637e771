"""`drill demo`: the retry-storm comparison on the embedded default topology, no Docker.

`drill demo` runs the shipped `retry-storm` plan (naive vs budget vs resilient,
≤ 3 minutes on 2 cores); `drill demo --quick` applies its quick overrides
(naive vs resilient, shorter phases, ≤ 60 s). Load comes from the in-runner
aio driver so the demo needs nothing but this package.
"""

from __future__ import annotations

import argparse

from harness.drills import cli_run

DEMO_PLAN = "retry-storm"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", default=DEMO_PLAN, help=f"plan to demo (default {DEMO_PLAN})")
    cli_run.add_common(p)


def run(args: argparse.Namespace) -> int:
    return cli_run.execute(args.plan, args)
