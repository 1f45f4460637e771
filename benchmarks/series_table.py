"""Print a drill run's own per-second series, one table per trial: what docs/resilience.md quotes.

    .venv/bin/python benchmarks/series_table.py OUT/series.json [--config NAME] [--trial N] [--from -3] [--to 30]
        [--prometheus-data OUT/prometheus/data]

Columns (t = seconds since fault-on; a row covers (t−1, t]): organic calls/s and their error
rate, the deepest hop's attempts/s (shed included), retries/s summed over the hops, the worst
breaker state (0 closed, 1 half-open, 2 open), from the runner's series.json; and the deepest
hop's queue (`drill_server_queue_depth`, the largest value Prometheus scraped in that second)
when the run was watched with `drill run --prometheus auto` and its TSDB is given (read from a
copy, by a Prometheus started for the purpose and stopped by its PID).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness.drills.analysis import trial as a  # noqa: E402
from harness.drills.readings.series import read_series_document  # noqa: E402


def queue_reader(data_dir: str):
    """A function (unix time, service) -> queue depth over the second ending then, from a copied TSDB."""
    import shutil

    from harness.procs.prometheus import LocalPrometheus

    prom = LocalPrometheus()
    shutil.copytree(data_dir, prom.workdir / "data")
    prom.start()

    def read(at: float, service: str) -> float | None:
        expr = f'max(max_over_time(drill_server_queue_depth{{service="{service}"}}[1s]))'
        result = prom.query(expr, at=at)
        return float(result[0]["value"][1]) if result else None

    return read, prom


def table(s, hops: list[str], lo: float, hi: float, queue=None, wall0: float | None = None) -> list[str]:
    org = a.rps_series(s, "organic")
    err = a.error_rate_series(s, "organic", 1)
    per_hop = a.hop_series(s)
    deepest = per_hop.get(hops[-1], []) if hops else []
    retry_keys = s.select("retry")
    breaker_keys = s.select("breaker")
    queue_keys = s.select("queue")
    rows = [f"{'t':>5} {'organic/s':>9} {'org err':>7} {'ledger/s':>8} {'retries/s':>9} {'breaker':>7} {'queue':>5}"]
    for i, t in enumerate(s.t):
        rel = t - s.fault_on
        if rel < lo or rel > hi:
            continue
        retries = sum(s.values[k][i] or 0.0 for k in retry_keys)
        br = max((s.values[k][i] or 0.0 for k in breaker_keys), default=0.0)
        q = max((s.values[k][i] or 0.0 for k in queue_keys), default=None)
        if q is None and queue is not None and wall0 is not None and hops:
            q = queue(wall0 + t, hops[-1])
        e = "—" if err[i] is None else f"{err[i]:.0%}"
        led = f"{deepest[i]:.0f}" if i < len(deepest) else "—"
        qs = "—" if q is None else f"{q:.0f}"
        mark = " fault" if 0 < rel <= s.fault_off - s.fault_on + 1e-6 else ""
        rows.append(f"{rel:5.0f} {org[i]:9.0f} {e:>7} {led:>8} {retries:9.0f} {br:7.0f} {qs:>5}{mark}")
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("series", help="OUT/series.json of a drill run")
    p.add_argument("--config", help="only this configuration")
    p.add_argument("--trial", type=int, help="only this trial (1-based)")
    p.add_argument("--from", dest="lo", type=float, default=-3.0, help="first second, relative to fault-on")
    p.add_argument("--to", dest="hi", type=float, default=1e9, help="last second, relative to fault-on")
    p.add_argument("--prometheus-data", help="the run's TSDB (OUT/prometheus/data of `drill run --prometheus auto`)")
    ns = p.parse_args()
    with open(ns.series) as fh:
        results, trials = read_series_document(json.load(fh))
    # OUT/results.json beside OUT/series.json, or NAME.results.json beside a saved NAME.series.json
    saved = ns.series[: -len(".series.json")] + ".results.json" if ns.series.endswith(".series.json") else ""
    beside = os.path.join(os.path.dirname(ns.series), "results.json")
    with open(saved if saved and os.path.exists(saved) else beside) as fh:
        configs = json.load(fh)["configs"]
    started = {name: [t.get("started_unix") for t in c.get("trials", [])] for name, c in configs.items()}
    hops = results.get("hops") or []
    queue, prom = queue_reader(ns.prometheus_data) if ns.prometheus_data else (None, None)
    try:
        for name, runs in trials.items():
            if ns.config and name != ns.config:
                continue
            for k, s in enumerate(runs, 1):
                if ns.trial and k != ns.trial:
                    continue
                wall0 = (started.get(name) or [None] * k)[k - 1]
                print(f"## {name} trial {k}")
                print("\n".join(table(s, hops, ns.lo, ns.hi, queue, wall0)))
    finally:
        if prom is not None:
            prom.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
