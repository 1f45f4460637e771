"""`drill sweep PLAN --vary KEY=LO..HI`: where each configuration of a plan stops recovering.

Per configuration, bisects the axis for the smallest trigger at which the chance of "never restored" reaches
one half (harness.drills.sweep), each point's trials the runner's own. Writes OUT/sweep.json after every point
and OUT/sweep.html; `--resume OUT` goes on from a sweep.json (its plan, axis and settings), repeating no trial.
Exit codes as `drill run`'s: 2 bad input, 1 a run failed, 4 a fault did not land, 5 a guard stopped a trial.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from harness.core import cliargs
from harness.core.errors import BadInput
from harness.drills.plan.files import shipped_plans

#: trials per point at most: a Wilson 95 % interval needs 4 unanimous trials to exclude one half
DEFAULT_MAX_TRIALS, QUICK_MAX_TRIALS, MAX_MAX_TRIALS = 4, 2, 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan", nargs="?", default=None,
                   help=f"plan YAML path, or a shipped plan name ({', '.join(shipped_plans())}); "
                        "not with --resume")  # fmt: skip
    p.add_argument("--vary", action="append", default=[], metavar="KEY=LO..HI",
                   help="the plan key to vary and its range, e.g. phases.fault=1..20, fault.ratio=10..100, "
                        "fault.delay=100..2000 (a delay:MS directive's milliseconds); twice for a phase diagram: "
                        "the first bisected at each of 5 values of the second")  # fmt: skip
    p.add_argument("--step", type=float, default=None,
                   help="the axis' resolution: the boundary is bracketed to within one step (default: the "
                        "range in 16 steps, whole numbers for whole-number keys)")  # fmt: skip
    p.add_argument("--max-trials", type=cliargs.integer(1, MAX_MAX_TRIALS, "trials"), default=None,
                   help=f"trials per point at most (default {DEFAULT_MAX_TRIALS}, {QUICK_MAX_TRIALS} with "
                        "--quick); fewer where the Wilson 95%% interval already excludes one half")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="the plan's quick: overrides, and fewer trials a point")
    p.add_argument("--configs", default=None, help="comma-separated configurations (default: the plan's)")
    p.add_argument("--seed", type=cliargs.seed, default=None, help="override the plan's seed")
    p.add_argument("--out", default="sweep-out", help="output directory (sweep.json, sweep.html, points/)")
    p.add_argument("--resume", type=pathlib.Path, default=None, metavar="DIR",
                   help="go on with the sweep saved in DIR (its plan, axis and settings)")  # fmt: skip
    p.add_argument("--budget-min", type=float, default=None, metavar="M",
                   help="stop before a point that would end after M minutes, and report what is known")  # fmt: skip
    p.add_argument("--at", type=float, default=None, metavar="VALUE",
                   help="run one point only, every configuration up to --max-trials times, no bisection (a point "
                        "run elsewhere; --collect merges them)")  # fmt: skip
    p.add_argument("--collect", nargs="+", type=pathlib.Path, default=None, metavar="DIR",
                   help="merge the sweep.json of sweeps run elsewhere (same settings) into one map in --out")
    p.add_argument("--render", choices=("k8s",), default=None,
                   help="print a Kubernetes Indexed Job that runs every value of the axis (--at), one pod per "
                        "point on nodes of their own, instead of running here")  # fmt: skip
    p.add_argument("--parallelism", type=cliargs.integer(1, 1000, "pods"), default=4,
                   help="--render k8s: points running at once (default 4)")  # fmt: skip


def _settings(args: argparse.Namespace):
    from harness.drills.plan.files import load_plan
    from harness.drills.sweep import axes
    from harness.drills.sweep.store import Settings, load

    if args.resume is not None:
        given = [f for f, v in (("PLAN", args.plan), ("--vary", args.vary), ("--step", args.step),
                                ("--max-trials", args.max_trials), ("--configs", args.configs),
                                ("--seed", args.seed), ("--quick", args.quick)) if v]  # fmt: skip
        if given:
            raise BadInput(f"sweep: --resume takes the plan, axis and settings from its sweep.json; drop "
                           f"{', '.join(given)}")  # fmt: skip
        settings, records = load(args.resume)
        return settings, records, args.resume
    if not args.plan:
        raise BadInput("sweep: name a plan (e.g. drill sweep metastable --vary phases.fault=1..20)")
    axis, axis2 = axes.parse_all(args.vary, args.plan, step=args.step, quick=args.quick)
    only = [c.strip() for c in args.configs.split(",") if c.strip()] if args.configs else None
    plan = load_plan(args.plan, quick=args.quick, only=only)
    configs = [v.name for v in plan.variants]
    max_trials = args.max_trials or (QUICK_MAX_TRIALS if args.quick else DEFAULT_MAX_TRIALS)
    out = pathlib.Path(args.out)
    if (out / "sweep.json").exists():
        raise BadInput(f"sweep: {out} holds a sweep already: --resume {out} goes on with it, or give another --out")
    return Settings(args.plan, axis, args.quick, max_trials, configs, args.seed, axis2), [], out


def run(args: argparse.Namespace) -> int:
    from harness.drills.sweep.engine import Sweep
    from harness.drills.trials.preflight import writable_out

    if args.budget_min is not None and not args.budget_min > 0:
        raise BadInput(f"sweep: --budget-min {args.budget_min:g}: must be above 0")
    modes = [m for m, on in (("--resume", args.resume), ("--at", args.at is not None), ("--collect", args.collect),
                             ("--render", args.render)) if on]  # fmt: skip
    if len(modes) > 1:
        raise BadInput(f"sweep: {' and '.join(modes)} do not go together")
    log = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    if args.collect:
        from harness.drills.sweep.elsewhere import collect
        from harness.drills.sweep.store import FILE

        out = pathlib.Path(args.out)
        if (out / FILE).exists() and out.resolve() not in {d.resolve() for d in args.collect}:
            raise BadInput(f"sweep: {out} holds a sweep already: give another --out for the merged map")
        writable_out(str(out), keep=True)
        settings, records = collect(args.collect, out)
        summary = Sweep(settings, out, records, log=log).write(None)
        log(f"sweep: merged {len(records)} trials from {len(args.collect)} sweeps")
        return _report(summary, out)
    settings, records, out = _settings(args)
    if settings.fixed is not None:
        raise BadInput(f"sweep: {out} is one row of a phase diagram: resume the diagram's directory, {out.parent}")
    if settings.axis2 is not None:
        if args.render or args.at is not None:
            raise BadInput(f"sweep: {'--render' if args.render else '--at'} takes one --vary axis")
        from harness.drills.sweep.plane import Plane

        writable_out(str(out), keep=True)
        if args.resume is not None:
            log(f"sweep: resuming {out}: each row from its own sweep.json")
        plane = Plane(settings, out, budget_s=None if args.budget_min is None else args.budget_min * 60, log=log)
        return _report(plane.run(), out)
    if args.render:
        from harness.drills.sweep.elsewhere import render_k8s

        print(render_k8s(settings, parallelism=args.parallelism), end="")
        return 0
    if args.at is not None and args.at not in settings.axis.values:
        grid = ", ".join(f"{v:g}" for v in settings.axis.values)
        raise BadInput(f"sweep: --at {args.at:g}: not a value of the axis ({grid})")
    writable_out(str(out), keep=True)
    sweep = Sweep(settings, out, records, budget_s=None if args.budget_min is None else args.budget_min * 60,
                  log=log)  # fmt: skip
    if args.at is not None:
        return _report(sweep.at(args.at), out)
    if records:
        log(f"sweep: resuming {out}: {len(records)} trials saved")
    return _report(sweep.run(), out)


def _report(summary: dict, out: pathlib.Path) -> int:
    print(summary["verdict"])
    print(f"wrote {out / 'sweep.json'} and {out / 'sweep.html'}")
    return 0
