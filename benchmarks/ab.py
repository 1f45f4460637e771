"""Two checkouts against each other, interleaved in one run: is a change to the per-call code worth keeping?

    .venv/bin/python benchmarks/ab.py server A_TREE B_TREE [--rounds 24] [--mode on]
    .venv/bin/python benchmarks/ab.py locust A_TREE B_TREE [--rounds 4] [--seconds 6]

`server`: one aio server per tree in `--mode` (`_bench_server.py`) and a bare
baseline server, all pinned to one core and driven in turn from another: in every
round a baseline slice, A or B, a baseline slice, the other, a baseline slice
(their order swapped every other round), each A or B slice divided by the mean of
the two baseline slices around it, as `interceptor_overhead.py` does. `locust`:
one closed-loop Locust run per tree per round against one `drill serve`, the trees'
order swapped every other round (`locust_throughput.py`'s run), Locust's CPU per
call from /proc.

Each round gives a paired difference, so the host's drift over minutes falls on
both trees; the last line gives the median of B − A (throughput ratio) or B / A
(Locust CPU per call) and in how many rounds B was better. Export a commit to
compare with `git archive COMMIT | tar -x -C DIR`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._cpu import cores, cpu_seconds, header, load_average  # noqa: E402
from benchmarks.interceptor_overhead import drive, start  # noqa: E402
from benchmarks.locust_throughput import start_pinned_serve, throughput  # noqa: E402


def ab_server(trees: dict[str, pathlib.Path], mode: str, rounds: int) -> None:
    server_core, client_core = cores()
    os.sched_setaffinity(0, {client_core})
    procs = {"baseline": start("aio", "baseline", server_core, str(trees["A"]))}
    try:
        for key, tree in trees.items():
            procs[key] = start("aio", mode, server_core, str(tree))
        ratio: dict[str, list[float]] = {"A": [], "B": []}
        cpu: dict[str, list[float]] = {"A": [], "B": []}

        def run(key: str) -> tuple[float, float]:
            proc, port = procs[key]
            s0 = cpu_seconds(proc.pid)
            n, took = asyncio.run(drive(port, 1.0, 64))
            return n / took, (cpu_seconds(proc.pid) - s0) / max(n, 1) * 1e6

        for r in range(rounds):
            before = run("baseline")
            for key in ("A", "B") if r % 2 == 0 else ("B", "A"):
                rps, us = run(key)
                after = run("baseline")
                ratio[key].append(rps / ((before[0] + after[0]) / 2))
                cpu[key].append(us / ((before[1] + after[1]) / 2))
                before = after
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait(timeout=10)
    print(f"\naio `{mode}` against a bare server, {rounds} rounds of 1-s slices, each between two baseline slices")
    for key in ("A", "B"):
        spread = f"[{min(ratio[key]):.3f}-{max(ratio[key]):.3f}]"
        print(f"{key} ({trees[key]}): throughput ratio {statistics.median(ratio[key]):.4f} {spread}, "
              f"CPU ratio {statistics.median(cpu[key]):.4f}")  # fmt: skip
    diff = [b - a for a, b in zip(ratio["A"], ratio["B"], strict=True)]
    better = sum(d > 0 for d in diff)
    print(f"# load average at end: {load_average()}")
    print(f"ab server b_minus_a={statistics.median(diff):+.4f} b_better_rounds={better}/{len(diff)}")


def ab_locust(trees: dict[str, pathlib.Path], rounds: int, seconds: float) -> None:
    server = start_pinned_serve()
    got: dict[str, list[dict]] = {"A": [], "B": []}
    try:
        for r in range(rounds):
            for key in ("A", "B") if r % 2 == 0 else ("B", "A"):
                res = throughput(trees[key], server.address, server.proc.pid, 20, seconds, "native")
                got[key].append(res)
                print(f"round {r} {key}: {res['client_us']:.0f} µs/call, {res['rps']:.0f} calls/s", flush=True)
    finally:
        server.stop()
    print(f"\nLocust, 20 organic users, closed loop, {seconds:g}-s windows, {rounds} rounds")
    for key in ("A", "B"):
        each = " ".join(f"{r['client_us']:.0f}" for r in got[key])
        median = statistics.median(r["client_us"] for r in got[key])
        print(f"{key} ({trees[key]}): median {median:.0f} µs/call ({each})")
    ratios = [b["client_us"] / a["client_us"] for a, b in zip(got["A"], got["B"], strict=True)]
    better = sum(x < 1 for x in ratios)
    print(f"# load average at end: {load_average()}")
    print(f"ab locust b_over_a={statistics.median(ratios):.3f} b_better_rounds={better}/{len(ratios)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("server", "locust"))
    ap.add_argument("a", help="checkout A (e.g. an export of the commit before)")
    ap.add_argument("b", help="checkout B")
    ap.add_argument("--rounds", type=int, default=None, help="default: 24 (server), 4 (locust)")
    ap.add_argument("--mode", default="on", help="server mode of both trees (`_bench_server.py`)")
    ap.add_argument("--seconds", type=float, default=6.0, help="Locust measurement window")
    args = ap.parse_args()
    trees = {"A": pathlib.Path(args.a).resolve(), "B": pathlib.Path(args.b).resolve()}
    for tree in trees.values():
        if not (tree / "harness").is_dir():
            ap.error(f"{tree}: not a checkout (no harness/ in it)")
    rounds = args.rounds or (24 if args.what == "server" else 4)
    if rounds < 1:
        ap.error("--rounds takes 1 or more")
    print(header(f"ab {args.what}"), flush=True)
    if args.what == "server":
        ab_server(trees, args.mode, rounds)
    else:
        ab_locust(trees, rounds, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
