"""`drill analyze --prometheus URL --start T --end T` or `--series OUT/series.json`: the MTTR table again.

`--series` recomputes everything offline from a saved run (every trial of every
configuration; SLO flags override the SLO saved with it). `--prometheus` is for
drills run elsewhere (the compose stack, a staging cluster, a drill started
from the Locust UI): the same per-second series, the same analysis
(`harness.drills.analysis`), the same results.json and report.html as `drill run`.
Times are unix seconds or ISO 8601 (`2026-01-31T12:00:00Z`); `--last 5m` is a
shortcut for the last N seconds/minutes.

Re-analysis never destroys what it re-reads: by default it writes `analysis/` beside the
series.json or results.json it read (else `drill-out/analysis/`); an `--out` that would replace
that file is refused, and one holding another drill run's results is refused without `--force`.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import time

from harness.core import cliargs
from harness.core import limits as lim
from harness.core.errors import BadInput

#: What `drill analyze` (like `drill run`) writes into its output directory.
OUTPUTS = ("results.json", "series.json", "report.html")
#: The output directory beside what it re-reads.
ANALYSIS_DIR = "analysis"


def _hops(text: str) -> list[str]:
    from harness.drills.plan.sections import HOP_NAME

    names = [n.strip() for n in text.split(",")]
    bad = [n for n in names if not re.fullmatch(HOP_NAME, n)]
    if bad:
        raise argparse.ArgumentTypeError(f"hop names (a-z, 0-9, -), comma separated, got {text!r}")
    return names


def _regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression ({exc.msg}): {text!r}") from None
    return text


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prometheus", type=cliargs.http_url, help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    src.add_argument("--series", help="a saved run's OUT/series.json: recompute offline")
    p.add_argument("--start", type=cliargs.timestamp, default=None, help="range start (unix seconds or ISO 8601)")
    p.add_argument("--end", type=cliargs.timestamp, default=None, help="range end (default now)")
    p.add_argument("--last", type=cliargs.duration(lim.MAX_ANALYZE_RANGE_S), default=None,
                   help="range = the last N (e.g. 5m) instead of --start")  # fmt: skip
    p.add_argument("--fault-start", type=cliargs.timestamp, default=None,
                   help="fault window start (else drill_fault_active)")  # fmt: skip
    p.add_argument("--fault-end", type=cliargs.timestamp, default=None, help="fault window end")
    p.add_argument(
        "--plan",
        default=None,
        help="the plan the drill ran (shipped name or YAML): its SLO, hops, fault and seed are used (default: "
        "--results, else the shipped plan the load's trial gauges name, else the default SLO)",
    )
    p.add_argument("--results", default=None, help="the run's results.json: its SLO, hops, fault, seed and plan")
    p.add_argument("--hops", type=_hops, default=None, help="comma-separated hops edge first (default: by name)")
    p.add_argument("--edge", type=_regex, default=None,
                   help="regex of the edge client's `service` label (loadgen|locust)")  # fmt: skip
    # the SLO's flags take the plan's bounds (harness.core.limits, as harness.drills.plan.sections.Slo)
    phase = int(lim.MAX_PHASE_S)
    p.add_argument("--max-error-rate", type=cliargs.number(0, 1, "an error rate"), default=None,
                   help="SLO error rate, 0-1 (default 0.05)")  # fmt: skip
    p.add_argument("--max-p99", type=cliargs.number(0, lim.MAX_P99_S, "seconds", above=True), default=None,
                   help="SLO p99 latency, seconds (default none)")  # fmt: skip
    p.add_argument("--hold", type=cliargs.integer(1, phase, "seconds"), default=None,
                   help="SLO hold window, seconds (default 3)")  # fmt: skip
    p.add_argument("--slo-traffic", default=None, choices=("all", "organic", "drill"), help="SLO traffic (all)")
    p.add_argument("--window", type=cliargs.integer(1, phase, "seconds"), default=None,
                   help="error-rate window, seconds (default 1)")  # fmt: skip
    p.add_argument("--grace", type=cliargs.number(0, phase, "seconds"), default=None,
                   help="detection grace after fault-off (default hold+window)")  # fmt: skip
    p.add_argument(
        "--out", default=None,
        help=f"output directory (default: {ANALYSIS_DIR}/ beside the --series or --results it re-reads, else "
        f"drill-out/{ANALYSIS_DIR}); never the directory of the file it re-reads",
    )  # fmt: skip
    p.add_argument("--force", action="store_true",
                   help="write into an --out that holds another drill run's results (replacing them)")  # fmt: skip
    from harness.drills.cli.run import add_fail_on

    add_fail_on(p)


def _slo(args: argparse.Namespace, saved: dict | None):
    """The saved SLO (or the defaults) with every given flag over it."""
    from pydantic import ValidationError

    from harness.drills.plan.sections import Slo

    flags = {
        "max_error_rate": args.max_error_rate, "max_p99_s": args.max_p99, "hold_s": args.hold,
        "traffic": args.slo_traffic, "window_s": args.window, "grace_s": args.grace,
    }  # fmt: skip
    try:
        return Slo.model_validate({**(saved or {}), **{k: v for k, v in flags.items() if v is not None}})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise BadInput(f"analyze: SLO {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def _slo_text(slo) -> str:
    p99 = f", p99 ≤ {slo.max_p99_s:g} s" if slo.max_p99_s is not None else ""
    return (f"error rate ≤ {slo.max_error_rate:.0%}{p99} on {slo.traffic} traffic over {slo.window_s} s, "
            f"held {slo.hold_s} s")  # fmt: skip


def _run_context(args: argparse.Namespace, plans_seen) -> dict:
    """What the drill ran under — SLO, hops, fault, seed, plan name — and where that came from.

    `drill analyze --prometheus` must give the runner's answer by default, so it uses the run's own
    definitions: a results.json (`--results`), a plan (`--plan`), or the shipped plan named by the load's
    trial gauges; only when none is known, the default SLO (said so).
    """
    from harness.drills.plan.files import load_plan, shipped_plans
    from harness.drills.plan.sections import Fault

    if args.results:
        path = pathlib.Path(args.results)
        data = None
        try:
            data = json.loads(path.read_text())
            fault = Fault.model_validate(data["fault"]) if "ratio" in (data.get("fault") or {}) else None
            timeout = ((data.get("plan_spec") or {}).get("traffic") or {}).get("timeout_s")
            load = {}
            for name, c in data["configs"].items():
                offered = next((t.get("offered_rps") for t in c.get("trials") or [c] if t.get("offered_rps")), {})
                load[name] = ({tr: o["planned"] for tr, o in offered.items()}, timeout)
            return {"slo": data["slo"], "hops": data.get("hops"), "fault": fault, "seed": data.get("seed"),
                    "plan": data.get("plan"), "load": load, "from": f"results {path}"}  # fmt: skip
        except OSError as exc:
            raise BadInput(f"analyze: --results {path}: {exc.strerror}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise _not_a("results.json", f"--results {path}", exc, data) from None
    name, how = args.plan, "plan"
    if name is None:
        seen = plans_seen()  # {plan: what the runner exported of it (SLO, planned load), or None}
        if len(seen) == 1 and next(iter(seen.values())):
            plan_name, info = next(iter(seen.items()))
            return {"slo": info["slo"], "hops": None, "fault": None, "seed": None, "plan": plan_name,
                    "load": info["load"], "from": f"the run itself (drill_plan_info of plan {plan_name})"}  # fmt: skip
        shipped = [p for p in seen if p in shipped_plans()]
        if len(shipped) == 1:
            name, how = shipped[0], "plan (named by the load's trial gauges)"
    if name is None:
        return {"slo": None, "hops": None, "fault": None, "seed": None, "plan": None, "load": {},
                "from": "defaults (no --plan or --results given)"}  # fmt: skip
    from harness.drills.load.schedule import planned_rps

    plan = load_plan(name)
    load = {v.name: (planned_rps(v.traffic), v.traffic.timeout_s) for v in plan.variants}
    return {"slo": plan.slo.model_dump(), "hops": plan.hop_names, "fault": plan.fault, "seed": plan.seed,
            "plan": plan.name, "load": load, "from": f"{how} {name}"}  # fmt: skip


def _plans_seen(url: str, start: float, end: float) -> dict[str, dict | None]:
    """Plans whose trials ran in the range, each with what the runner exported of it (None when nothing)."""
    from harness.drills.readings.prom import plan_info, plans_in

    info = plan_info(url, start, end)
    return {plan: info.get(plan) for plan in plans_in(url, start, end)}


def _with_load(series: dict, load: dict) -> dict:
    """Give each configuration's read-back series what its load planned (rates, timeout), as the runner
    knows them: the same offered-load check (`load_fell_behind`, `insufficient_data`) then applies."""
    for name, trials in series.items():
        planned, timeout = load.get(name, (None, None))
        for s in trials:
            s.planned_rps = planned or s.planned_rps
            s.timeout_s = timeout or s.timeout_s
    return series


def _not_a(kind: str, where: str, exc: Exception, data) -> BadInput:
    """Why a file is not the `kind` drill writes, in words (never the parser's exception)."""
    if isinstance(exc, UnicodeDecodeError):
        why = "not text"
    elif isinstance(exc, json.JSONDecodeError):
        why = f"not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg.lower()})"
    elif isinstance(data, dict) and {"verdict", "ranking"} <= data.keys():
        why = "it is a results.json" + ("; give the series.json beside it" if kind == "series.json" else
                                        ", but an incomplete one")  # fmt: skip
    elif isinstance(data, dict) and "configs" in data and "format" in data:
        why = "it is a series.json" + ("; give the results.json beside it" if kind == "results.json" else
                                       ", but an incomplete one")  # fmt: skip
    else:
        why = "JSON, but not what `drill run` writes there"
    return BadInput(f"analyze: {where}: not a {kind}: {why}")


def _from_series(args: argparse.Namespace):
    from harness.drills.readings.series import read_series_document

    path = pathlib.Path(args.series)
    data = None
    try:
        data = json.loads(path.read_text())
        header, trials = read_series_document(data)
    except OSError as exc:
        raise BadInput(f"analyze: {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _not_a("series.json", str(path), exc, data) from None
    if not trials:
        raise BadInput(f"analyze: {path}: no configurations in it")
    return header, trials


def _held_run(out: pathlib.Path) -> str | None:
    """What of a drill run `out` holds (its results would be replaced), or None (nothing, or an analysis).

    An earlier `drill analyze` (results.json with its `source`) is re-made from its source at will, so it is
    replaced; what `drill run` or `drill demo` wrote is a run's only record, so it is not.
    """
    present = [name for name in OUTPUTS if (out / name).is_file()]
    if not present:
        return None
    try:
        data = json.loads((out / "results.json").read_text())
        if isinstance(data, dict) and data.get("source"):
            return None
        what = f"the results of plan {data['plan']}" if isinstance(data, dict) and data.get("plan") else None
    except (OSError, ValueError):
        what = None
    return what or " and ".join(present)


def _analysis_dir(args: argparse.Namespace) -> pathlib.Path:
    """Where the analysis is written: never over the file it re-reads, over a drill run only with --force.

    Default: `analysis/` beside the series.json (or results.json) it re-reads, else `drill-out/analysis`.
    """
    from harness.drills.cli.run import output_dir

    sources = [(flag, pathlib.Path(p)) for flag, p in (("--series", args.series), ("--results", args.results)) if p]
    if args.out is not None:
        out = pathlib.Path(args.out)
    else:
        out = sources[0][1].parent / ANALYSIS_DIR if sources else pathlib.Path("drill-out", ANALYSIS_DIR)
    for flag, src in sources:
        if any((out / name).resolve() == src.resolve() for name in OUTPUTS):
            raise BadInput(
                f"analyze: --out {out} would replace the {flag} file it re-reads ({src}); write the analysis beside "
                f"it (without --out: {src.parent / ANALYSIS_DIR})"
            )  # fmt: skip
    held = _held_run(out) if out.is_dir() else None
    if held and not args.force:
        raise BadInput(f"analyze: --out {out} holds a drill run ({held}) that the analysis would replace; "
                       "give another --out, or --force to replace it")  # fmt: skip
    return output_dir(str(out))


def run(args: argparse.Namespace) -> int:
    import pydantic

    from harness.drills.analysis.gate import check, parse_conditions
    from harness.drills.analysis.results import assemble
    from harness.drills.cli.run import print_summary
    from harness.drills.plan.sections import Fault
    from harness.drills.report.page import write_outputs

    conditions = parse_conditions(args.fail_on)
    hops = args.hops
    if args.series:
        from harness.drills.readings.series import trial_extras

        header, series = _from_series(args)  # read first: a file that is not a series.json leaves nothing behind
        out = _analysis_dir(args)
        fault = None
        if isinstance(header.get("fault"), dict) and "ratio" in header["fault"]:
            try:
                fault = Fault.model_validate(header["fault"])
            except pydantic.ValidationError as exc:
                raise _not_a("series.json", args.series, exc, header) from None
        ctx = {"slo": header.get("slo"), "hops": header.get("hops"), "fault": fault, "seed": header.get("seed"),
               "plan": header.get("plan"), "load": {}, "from": f"the saved run ({args.series})"}  # fmt: skip
        if args.plan or args.results:
            ctx = _run_context(args, dict)
        slo = _slo(args, ctx["slo"])
        source = {"series": str(args.series), "slo_from": ctx["from"]}
        results = assemble(series, slo, hops or ctx["hops"], plan_name=ctx["plan"] or "series", fault=ctx["fault"],
                           extras=trial_extras(header), source=source).model_dump()  # fmt: skip
        results["seed"] = ctx["seed"]
    else:
        from harness.drills.readings.prom import EDGE_SERVICES, read_drill

        end = args.end or time.time()
        start = end - args.last if args.last else args.start
        if start is None or start >= end:
            raise BadInput("analyze: give --start (before --end) or --last")
        fault_window = None
        if args.fault_start is not None or args.fault_end is not None:
            if args.fault_start is None or args.fault_end is None:
                raise BadInput("analyze: --fault-start and --fault-end go together")
            if args.fault_start >= args.fault_end:
                raise BadInput("analyze: --fault-start must be before --fault-end")
            fault_window = (args.fault_start, args.fault_end)
        out = _analysis_dir(args)  # refused before Prometheus is read
        ctx = _run_context(args, lambda: _plans_seen(args.prometheus, start, end))
        slo = _slo(args, ctx["slo"])
        series = read_drill(args.prometheus, start, end, edge=args.edge or EDGE_SERVICES, fault=fault_window)
        series = _with_load(series, ctx["load"])
        source = {"prometheus": args.prometheus, "start": start, "end": end, "slo_from": ctx["from"]}
        results = assemble(series, slo, hops or ctx["hops"], plan_name=ctx["plan"] or "prometheus", fault=ctx["fault"],
                           source=source).model_dump()  # fmt: skip
        results["seed"] = ctx["seed"]
        print(f"SLO from {ctx['from']}: {_slo_text(slo)}")
    write_outputs(out, results, series)
    print_summary(results, out)
    check(conditions, results)
    return 0
