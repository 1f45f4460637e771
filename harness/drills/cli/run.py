"""`drill run PLAN.yaml`: run a drill plan and write OUT/results.json and OUT/report.html."""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import sys

from harness.core import cliargs
from harness.core import limits as lim
from harness.core.errors import BadInput, FaultNotLanded
from harness.drills.plan.files import load_plan, shipped_plans


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan", help=f"plan YAML path, or a shipped plan name ({', '.join(shipped_plans())})")
    add_common(p)


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="drill-out", help="output directory (results.json, report.html, logs/)")
    p.add_argument("--seed", type=cliargs.seed, default=None, help="override the plan's seed")
    p.add_argument("--configs", default=None, help="comma-separated configurations (or variant names) to run, in order")
    p.add_argument("--quick", action="store_true", help="apply the plan's quick: overrides (shorter phases)")
    p.add_argument(
        "--trials", type=cliargs.integer(1, lim.MAX_TRIALS, "trials"), default=None,
        help="trials per configuration, run interleaved (A B C A B C …) under the same seed (plan default)",
    )  # fmt: skip
    add_fail_on(p)
    p.add_argument(
        "--prometheus",
        default="off",
        help="also watch the run with Prometheus: 'auto' = start the prometheus on PATH (1-s scrapes, fresh "
        "TSDB in OUT/prometheus); a URL = a Prometheus that scrapes the targets written to --prometheus-sd; "
        "'off' (default) = the runner's own scraper only. results.json gets a cross-check from it",
    )
    p.add_argument("--prometheus-sd", type=cliargs.new_file, default=None,
                   help="file_sd targets file to keep current (with a URL)")  # fmt: skip
    p.add_argument(
        "--grafana",
        type=cliargs.http_url,
        default=None,
        metavar="URL",
        help="post phase changes and each trial's fault window to this Grafana as annotations "
        "(credentials from DRILL_GRAFANA_TOKEN, or DRILL_GRAFANA_USER/DRILL_GRAFANA_PASSWORD)",
    )
    p.add_argument("--no-live", action="store_true", help="plain progress lines instead of the live view")
    p.add_argument(
        "--driver",
        choices=("aio", "locust"),
        default=None,
        help="load driver: the in-runner aio load (reproducible request ids) or Locust headless (plan default)",
    )
    p.add_argument("--profile", default=None, help="Locust profile (loadtests/profiles/NAME.conf) for --driver locust")
    p.add_argument(
        "--workers", type=cliargs.integer(1, lim.MAX_WORKERS, "workers"), default=None,
        help="--driver locust: Locust worker processes on this machine (its master/worker mode; default 1)",
    )  # fmt: skip
    p.add_argument(
        "--dry-run", action="store_true",
        help="check the plan and the stack, print every trial's timeline, load, expected hits, guards and the "
        "run's duration; start, switch and send nothing (exit 0, or the error a run would give)",
    )  # fmt: skip


def output_dir(text: str) -> pathlib.Path:
    """`--out`: a directory we can write (created if missing, a file written there and removed), refused
    before anything starts otherwise."""
    from harness.drills.trials.preflight import writable_out

    return writable_out(text, keep=True)


def add_fail_on(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fail-on", action="append", default=[], metavar="COND",
        help="exit 3 when a condition holds: 'breach' (any configuration breached the SLO in any trial, "
        "post-fault breaches included), 'expect' (a configuration missed its link fault's expect: "
        "fault.link.expect.detect_within_s), 'mttr>SECONDS' (a configuration's median MTTR above SECONDS, or never "
        "restored; a time read from Prometheus counts less its ±), 'budget>X' (a configuration's median error "
        "budget burn above X, 1 = the SLO's allowance), 'regression:BASELINE.json' (breach probability, median "
        "outage beyond the read-back ± or budget burn significantly worse than the baseline's); repeatable",
    )  # fmt: skip


def overrides_from(args: argparse.Namespace) -> dict:
    over: dict = {}
    if args.seed is not None:
        over["seed"] = args.seed
    if getattr(args, "trials", None) is not None:
        over["trials"] = args.trials
    traffic = {}
    if getattr(args, "driver", None):
        traffic["driver"] = args.driver
    if getattr(args, "profile", None):
        traffic["profile"] = args.profile
    if getattr(args, "workers", None):
        traffic["workers"] = args.workers
    if traffic:
        over["traffic"] = traffic
    return over


def _prometheus(args: argparse.Namespace, out: pathlib.Path, log, plan):
    """The Prometheus that watches the run (`--prometheus`), started; None for `off`."""
    if args.prometheus == "auto":
        import shutil

        from harness.procs.prometheus import PROMETHEUS, LocalPrometheus

        if shutil.which(PROMETHEUS) is None:
            print(f"drill: warning: --prometheus auto: no {PROMETHEUS!r} on PATH, so no Prometheus cross-check in "
                  "this run (Debian: apt-get install prometheus)", file=sys.stderr)  # fmt: skip
            return None
        from harness.drills.trials.metrics_server import initial_targets

        rules = sorted((pathlib.Path(__file__).resolve().parents[3] / "compose/prometheus/rules").glob("*.yml"))
        prom = LocalPrometheus(out / "prometheus", rule_files=rules).start()  # the compose stack's rules
        prom.set_targets(initial_targets(plan))
        ready = prom.wait_first_sample()
        log(f"prometheus watching the run at {prom.url}" + ("" if ready else " (no sample yet)"))
        return prom
    if args.prometheus not in ("off", "", None):
        from harness.drills.readings.prom import ExternalPrometheus

        sd = pathlib.Path(args.prometheus_sd) if args.prometheus_sd else None
        return ExternalPrometheus(args.prometheus, sd)
    return None


def _annotator(args: argparse.Namespace):
    """`--grafana URL`: a DrillAnnotator with credentials from the environment; None without the flag."""
    url = getattr(args, "grafana", None)
    if not url:
        return None
    from harness.drills.plan.guards import url_problem

    problem = url_problem(url)
    if problem:
        raise BadInput(f"--grafana: an http:// URL, got {url!r} ({problem})")
    # the submodule itself: the package's own `annotations` name is its `from __future__ import annotations`
    from harness.dashboards.annotations import ENV_PASSWORD, ENV_TOKEN, ENV_USER, DrillAnnotator

    return DrillAnnotator.from_url(
        url, token=os.environ.get(ENV_TOKEN), user=os.environ.get(ENV_USER), password=os.environ.get(ENV_PASSWORD),
    )  # fmt: skip


def execute(plan_name: str, args: argparse.Namespace, *, base: dict | None = None,
            command: str | None = None) -> int:  # fmt: skip
    """Load the plan, take its preflight (every error before the first fault), run it, print the summary.

    The preflight (`trials.preflight`) refuses bad input before anything is printed or started, then checks
    the data sources before the first switch and the stack before each configuration's first load; a dry run
    prints the same checks instead of running (`command`: what the user typed, for its heading).
    Exit codes after a run that finished, its outputs written first: 4 when the fault did not land as planned
    (`landing.problem`; `--fail-on` is then not judged: a gate over a drill that never tested its fault would
    pass for nothing), else 3 when a `--fail-on` condition holds, else 0. A run that failed is 1 before both.
    """
    from harness.drills.analysis.gate import check, parse_conditions
    from harness.drills.trials.live import LiveView
    from harness.drills.trials.preflight import Preflight
    from harness.drills.trials.runner import Runner

    only = [c.strip() for c in args.configs.split(",") if c.strip()] if args.configs else None
    over = overrides_from(args)
    if base:  # the demo's own settings, under the command line's
        over = {**base, **over, "traffic": {**base.get("traffic", {}), **over.get("traffic", {})}}
    plan = load_plan(plan_name, quick=args.quick, overrides=over, only=only)
    conditions = parse_conditions(args.fail_on)
    dry = bool(getattr(args, "dry_run", False))
    prometheus = args.prometheus or "off"
    preflight = Preflight(plan, out=args.out, prometheus=prometheus, dry=dry)
    _annotator(args)  # a bad --grafana is refused as a run would refuse it (nothing is posted)
    preflight.local()  # bad input: one line, before anything is printed or started (--out is created last)
    if dry:
        from harness.drills.trials.dryrun import dry_run

        dry_run(plan, preflight, prometheus=prometheus, grafana=getattr(args, "grafana", None), command=command,
                say=lambda text: print(text, flush=True))  # fmt: skip
        return 0
    out = pathlib.Path(args.out)  # created by the preflight
    prom = runner = None
    with LiveView(plan.name, enabled=False if args.no_live else None) as view:
        for v in preflight.verdicts:
            view.log(preflight.format(v))
        preflight.say = view.log
        try:
            prom = _prometheus(args, out, view.log, plan)
            preflight.sources(getattr(prom, "url", None))  # before the first switch: what measures the stack
            runner = Runner(plan, out, on_sample=view.update, log=view.log, prometheus=prom,
                            annotator=_annotator(args), preflight=preflight)  # fmt: skip
            results = asyncio.run(runner.run())
        except (KeyboardInterrupt, asyncio.CancelledError) as exc:
            default = "SIGINT" if isinstance(exc, KeyboardInterrupt) else "SIGTERM"
            sig = getattr(runner, "interrupted", None) or default
            view.log(f"drill: {'interrupted' if sig == 'SIGINT' else 'terminated'}; every process stopped")
            return 130 if sig == "SIGINT" else 143
        finally:
            if prom is not None:
                prom.stop()
    print_summary(results, out)
    from harness.drills.trials.guard import check_trips

    check_trips(results, conditions)  # exit 5 first: a guard's trip outranks --fail-on (it says why)

    from harness.drills.analysis.landing import problem

    missed = problem(results)
    if missed:
        unjudged = f" (--fail-on {', '.join(map(str, conditions))} not judged)" if conditions else ""
        raise FaultNotLanded(missed + unjudged)
    check(conditions, results)
    return 0


def print_summary(results: dict, out: pathlib.Path) -> None:
    """The terminal's table (the verdict's order), the read-back note, what the hits say when the fault did not
    land as predicted, the verdict, and what was written."""
    from rich.console import Console
    from rich.table import Table

    from harness.drills.analysis import landing
    from harness.drills.report import cells

    trials = max((c.get("summary", {}).get("trials", 1) for c in results["configs"].values()), default=1)
    known = [] if results.get("seed") is None else [f"seed {results['seed']}"]
    known += [f"{trials} trials each"] if trials > 1 else []
    title = f"drill {results['plan']}" + (f" ({', '.join(known)})" if known else "")
    table = Table(title=title)
    table.add_column("configuration", no_wrap=True)
    for col in ("trials", "MTTR (median)", "post-fault breach", "outside SLO", "budget burn", "TTD", "TTR",
                "amplification", "success", "blast radius", "offered req/s organic · drill"):  # fmt: skip
        table.add_column(col, justify="right", no_wrap=col in ("outside SLO", "budget burn", "TTD", "TTR"))

    def two(text: str) -> str:  # the value, its detail on a second line
        return "\n".join(x for x in cells.value_and_detail(text) if x)

    for name in results["ranking"]:
        c = results["configs"][name]
        s = c.get("summary") or {}
        stopped = f"\nstopped by a guard: {s['guard_trips']} of {s.get('trials', 1)}" if s.get("guard_trips") else ""
        table.add_row(
            name + stopped, str(s.get("trials", 1)), two(cells.mttr_text(c)), cells.post_fault_text(c),
            two(cells.spread_text(c, "bad_s")), two(cells.burn_text(c)), two(cells.spread_text(c, "ttd_s")),
            two(cells.spread_text(c, "ttr_s")),
            cells.fmt(s.get("amplification", c.get("amplification")), "×"), cells.pct(s.get("success_rate")),
            cells.pct(s.get("blast_radius", c.get("blast_radius"))),
            f"{cells.offered_text(c, 'organic')} · {cells.offered_text(c, 'drill')}",
        )  # fmt: skip
    console = Console()
    if not console.is_terminal:  # a log or a file: wide enough for every column's value on one line
        console = Console(width=200)
    console.print(table)
    note = cells.readback_note(results)
    if note:
        console.print(note, highlight=False)
    for line in landing.summary(results["configs"]):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    behind = [f"{n} #{t.get('trial', 1)}" for n, c in results["configs"].items() for t in c.get("trials") or [c]
              if t.get("load_fell_behind")]  # fmt: skip
    if behind:
        console.print(f"load fell behind the plan (insufficient data): {', '.join(behind)}", highlight=False)
    v = results["verdict"]
    console.print(v["text"] if isinstance(v, dict) else v, highlight=False)
    wrote = f"wrote {out / 'results.json'}, {out / 'series.json'} and {out / 'report.html'}"
    console.print(wrote, highlight=False, soft_wrap=True)  # paths are never broken


def run(args: argparse.Namespace) -> int:
    return execute(args.plan, args)
