"""What recording one organic call's end costs the server, batched (the default) against one write per series.

    .venv/bin/python benchmarks/server_metrics_cost.py [--calls 100000 --repeats 7 --rounds 3]

Times `MethodMetrics.finished_organic` in-process on one pinned core, for each of `--rounds`
interleaved rounds the minimum over `--repeats` runs (noise only ever adds time); the batched figure
includes its share of the batch writes (`FLUSH_AT` calls each). Last line:
`server_metrics_us batched=… one_by_one=…` (medians over the rounds).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import timeit

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from benchmarks._cpu import cores, header, load_average  # noqa: E402
from harness.interceptors import _server_metrics as sm  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(header("server_metrics_cost"), flush=True)
    os.sched_setaffinity(0, {cores()[0]})
    metrics = sm.ServerMetrics("cost")("pkg.Service/Method")
    got: dict[bool, list[float]] = {True: [], False: []}
    batched_default = sm.BATCHED
    try:
        for r in range(args.rounds):
            for batched in (True, False):
                sm.BATCHED = batched and batched_default
                runs = timeit.repeat(
                    "finish('OK', 0.003, None, None)",
                    globals={"finish": metrics.finished_organic},
                    number=args.calls,
                    repeat=args.repeats,
                )
                metrics.flush()
                got[batched].append(min(runs) / args.calls * 1e6)
                name = "batched" if batched else "one by one"
                print(f"round {r + 1}: {name:<10} {got[batched][-1]:6.2f} µs per call end")
    finally:
        sm.BATCHED = batched_default
    print(f"# load average at end: {load_average()}")
    batched, one_by_one = statistics.median(got[True]), statistics.median(got[False])
    print(f"server_metrics_us batched={batched:.2f} one_by_one={one_by_one:.2f}")


if __name__ == "__main__":
    main()
