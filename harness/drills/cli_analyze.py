"""`drill analyze --prometheus URL --start T --end T`: MTTR table and report from a Prometheus.

For drills run elsewhere (the compose stack, a staging cluster, a drill started
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
    if text[-1:] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prometheus", required=True, help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    p.add_argument("--start", type=_when, default=None, help="range start (unix seconds or ISO 8601)")
    p.add_argument("--end", type=_when, default=None, help="range end (default now)")
    p.add_argument("--last", type=_duration, default=None, help="range = the last N (e.g. 5m) instead of --start")
    p.add_argument("--fault-start", type=_when, default=None, help="fault window start (else drill_fault_active)")
    p.add_argument("--fault-end", type=_when, default=None, help="fault window end")
    p.add_argument("--plan", default="prometheus", help="plan name for the report")
    p.add_argument("--hops", default=None, help="comma-separated hops edge first (default: by name)")
    p.add_argument("--edge", default=None, help="regex of the edge client's `service` label (loadgen|locust)")
    p.add_argument("--max-error-rate", type=float, default=0.05, help="SLO error rate (default 0.05)")
    p.add_argument("--max-p99", type=float, default=None, help="SLO p99 latency, seconds (default none)")
    p.add_argument("--hold", type=int, default=3, help="SLO hold window, seconds (default 3)")
    p.add_argument("--slo-traffic", default="all", choices=("all", "organic", "drill"), help="SLO traffic")
    p.add_argument("--window", type=int, default=1, help="error-rate window, seconds (default 1)")
    p.add_argument("--out", default="drill-out", help="output directory")


def run(args: argparse.Namespace) -> int:
    from harness.drills.cli_run import print_summary
    from harness.drills.model import Slo
    from harness.drills.prom import EDGE_SERVICES, read_drill
    from harness.drills.report import write_outputs
    from harness.drills.results import assemble

    end = args.end or time.time()
    start = end - args.last if args.last else args.start
    if start is None or start >= end:
        raise BadInput("analyze: give --start (before --end) or --last")
    fault = None
    if args.fault_start is not None or args.fault_end is not None:
        if args.fault_start is None or args.fault_end is None:
            raise BadInput("analyze: --fault-start and --fault-end go together")
        fault = (args.fault_start, args.fault_end)
    slo = Slo(
        max_error_rate=args.max_error_rate, max_p99_s=args.max_p99, hold_s=args.hold, traffic=args.slo_traffic,
        window_s=args.window,
    )
    series = read_drill(args.prometheus, start, end, edge=args.edge or EDGE_SERVICES, fault=fault)
    hops = args.hops.split(",") if args.hops else None
    source = {"prometheus": args.prometheus, "start": start, "end": end}
    results = assemble(series, slo, hops, plan_name=args.plan, source=source).model_dump()
    out = pathlib.Path(args.out)
    write_outputs(out, results, series)
    print_summary(results, out)
    return 0
