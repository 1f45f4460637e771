"""`drill analyze --prometheus URL --start T --end T` or `--series OUT/series.json`: the MTTR table again.

`--series` recomputes everything offline from a saved run (every trial of every
configuration; SLO flags override the SLO saved with it). `--prometheus` is for
drills run elsewhere (the compose stack, a staging cluster, a drill started
from the Locust UI): the same per-second series, the same analysis
(analysis.py), the same results.json and report.html as `drill run`.
Times are unix seconds or ISO 8601 (`2026-01-31T12:00:00Z`); `--last 5m` is a
shortcut for the last N seconds/minutes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import pathlib
import time

from harness.core.errors import BadInput


def _when(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(f"not unix seconds or ISO 8601: {text!r}") from None


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        seconds = float(text[:-1]) * units[text[-1]] if text[-1:] in units else float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"a duration like 90s, 5m or 1h, got {text!r}")
    return seconds


_duration.__name__ = "duration"  # argparse names the type in its message


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prometheus", help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    src.add_argument("--series", help="a saved run's OUT/series.json: recompute offline")
    p.add_argument("--start", type=_when, default=None, help="range start (unix seconds or ISO 8601)")
    p.add_argument("--end", type=_when, default=None, help="range end (default now)")
    p.add_argument("--last", type=_duration, default=None, help="range = the last N (e.g. 5m) instead of --start")
    p.add_argument("--fault-start", type=_when, default=None, help="fault window start (else drill_fault_active)")
    p.add_argument("--fault-end", type=_when, default=None, help="fault window end")
    p.add_argument(
        "--plan",
        default=None,
        help="the plan the drill ran (shipped name or YAML): its SLO, hops, fault and seed are used (default: "
        "--results, else the shipped plan the load's trial gauges name, else the default SLO)",
    )
    p.add_argument("--results", default=None, help="the run's results.json: its SLO, hops, fault, seed and plan")
    p.add_argument("--hops", default=None, help="comma-separated hops edge first (default: by name)")
    p.add_argument("--edge", default=None, help="regex of the edge client's `service` label (loadgen|locust)")
    p.add_argument("--max-error-rate", type=float, default=None, help="SLO error rate (default 0.05)")
    p.add_argument("--max-p99", type=float, default=None, help="SLO p99 latency, seconds (default none)")
    p.add_argument("--hold", type=int, default=None, help="SLO hold window, seconds (default 3)")
    p.add_argument("--slo-traffic", default=None, choices=("all", "organic", "drill"), help="SLO traffic (all)")
    p.add_argument("--window", type=int, default=None, help="error-rate window, seconds (default 1)")
    p.add_argument("--grace", type=float, default=None, help="detection grace after fault-off (default hold+window)")
    p.add_argument("--out", default="drill-out", help="output directory")
    from harness.drills.cli_run import add_fail_on

    add_fail_on(p)


def _slo(args: argparse.Namespace, saved: dict | None):
    """The saved SLO (or the defaults) with every given flag over it."""
    from pydantic import ValidationError

    from harness.drills.model import Slo

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
    import json

    from harness.drills.model import Fault
    from harness.drills.plan import load_plan, shipped_plans

    if args.results:
        path = pathlib.Path(args.results)
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
        except (ValueError, KeyError, TypeError) as exc:
            raise BadInput(f"analyze: --results {path}: not a results.json ({exc.__class__.__name__}: {exc})") from None
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
    from harness.drills.load import planned_rps

    plan = load_plan(name)
    load = {v.name: (planned_rps(v.traffic), v.traffic.timeout_s) for v in plan.variants}
    return {"slo": plan.slo.model_dump(), "hops": plan.hop_names, "fault": plan.fault, "seed": plan.seed,
            "plan": plan.name, "load": load, "from": f"{how} {name}"}  # fmt: skip


def _plans_seen(url: str, start: float, end: float) -> dict[str, dict | None]:
    """Plans whose trials ran in the range, each with what the runner exported of it (None when nothing)."""
    from harness.drills.prom import plan_info, plans_in

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


def _from_series(args: argparse.Namespace):
    import json

    from harness.drills.report import read_series_document

    path = pathlib.Path(args.series)
    try:
        data = json.loads(path.read_text())
        header, trials = read_series_document(data)
    except OSError as exc:
        raise BadInput(f"analyze: {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadInput(f"analyze: {path}: not a series.json ({exc.__class__.__name__}: {exc})") from None
    if not trials:
        raise BadInput(f"analyze: {path}: no configurations in it")
    return header, trials


def run(args: argparse.Namespace) -> int:
    from harness.drills.cli_run import output_dir, print_summary
    from harness.drills.gate import check, parse_conditions
    from harness.drills.model import Fault
    from harness.drills.report import write_outputs
    from harness.drills.results import assemble

    conditions = parse_conditions(args.fail_on)
    hops = args.hops.split(",") if args.hops else None
    if args.series:
        header, series = _from_series(args)
        fault = None
        if isinstance(header.get("fault"), dict) and "ratio" in header["fault"]:
            fault = Fault.model_validate(header["fault"])
        ctx = {"slo": header.get("slo"), "hops": header.get("hops"), "fault": fault, "seed": header.get("seed"),
               "plan": header.get("plan"), "load": {}, "from": f"the saved run ({args.series})"}  # fmt: skip
        if args.plan or args.results:
            ctx = _run_context(args, dict)
        slo = _slo(args, ctx["slo"])
        source = {"series": str(args.series), "slo_from": ctx["from"]}
        results = assemble(series, slo, hops or ctx["hops"], plan_name=ctx["plan"] or "series", fault=ctx["fault"],
                           source=source).model_dump()  # fmt: skip
        results["seed"] = ctx["seed"]
    else:
        from harness.drills.prom import EDGE_SERVICES, read_drill

        end = args.end or time.time()
        start = end - args.last if args.last else args.start
        if start is None or start >= end:
            raise BadInput("analyze: give --start (before --end) or --last")
        fault_window = None
        if args.fault_start is not None or args.fault_end is not None:
            if args.fault_start is None or args.fault_end is None:
                raise BadInput("analyze: --fault-start and --fault-end go together")
            fault_window = (args.fault_start, args.fault_end)
        ctx = _run_context(args, lambda: _plans_seen(args.prometheus, start, end))
        slo = _slo(args, ctx["slo"])
        series = read_drill(args.prometheus, start, end, edge=args.edge or EDGE_SERVICES, fault=fault_window)
        series = _with_load(series, ctx["load"])
        source = {"prometheus": args.prometheus, "start": start, "end": end, "slo_from": ctx["from"]}
        results = assemble(series, slo, hops or ctx["hops"], plan_name=ctx["plan"] or "prometheus", fault=ctx["fault"],
                           source=source).model_dump()  # fmt: skip
        results["seed"] = ctx["seed"]
        print(f"SLO from {ctx['from']}: {_slo_text(slo)}")
    out = output_dir(args.out)
    write_outputs(out, results, series)
    print_summary(results, out)
    check(conditions, results)
    return 0
