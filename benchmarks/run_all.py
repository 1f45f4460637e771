"""Run the benchmarks (`make bench`); each prints its own figures from one run and a machine-readable last line.

    .venv/bin/python benchmarks/run_all.py [--only locust_throughput ...] [--runs 3] [--save benchmarks/results]
    .venv/bin/python benchmarks/run_all.py --tree DIR --label before --runs 3 --save benchmarks/results
    .venv/bin/python benchmarks/run_all.py --summary benchmarks/results/perf-*.txt

`--runs N` repeats each benchmark N times; `--save DIR` also writes each run's
whole output (its first lines name the command, the cores and the load average)
to `DIR/perf-NAME[-LABEL]-N.txt`. `--tree DIR` runs the benchmarks that take it
(all but amplification) against another checkout, e.g. an export of an older
commit, for before/after figures. `--summary FILES` reads the last lines of saved runs
and prints, per figure, the median and the range over the runs: the spread the
docs publish.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
BENCHMARKS = ("interceptor_overhead", "delay_accuracy", "locust_throughput", "amplification", "proxy_overhead",
              "proxy_overload")
TAKES_TREE = ("interceptor_overhead", "delay_accuracy", "locust_throughput")
#: The machine-readable last line of each benchmark starts with one of these words.
LAST_LINES = ("throughput_ratio", "delay_accuracy", "locust", "amplification", "proxy", "proxy_overload")


def run(name: str, index: int, save: pathlib.Path | None, tree: str | None, label: str) -> bool:
    print(f"\n===== {name} (run {index}) =====", flush=True)
    argv = [sys.executable, str(HERE / f"{name}.py")]
    if tree and name in TAKES_TREE:
        argv += ["--tree", tree]
        if name == "locust_throughput":
            argv.append("--skip-variants")  # the bare clients do not depend on the checkout
    proc = subprocess.Popen(argv, cwd=HERE.parent, stdout=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines.append(line)
    ok = proc.wait() == 0
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        (save / f"perf-{name}{'-' + label if label else ''}-{index}.txt").write_text("".join(lines))
    return ok


def summary(files: list[str]) -> None:
    """Median and range over the saved runs of every `key=value` figure of the last lines."""
    figures: dict[str, list[float]] = collections.defaultdict(list)
    for path in files:
        for line in reversed(pathlib.Path(path).read_text().splitlines()):
            word, _, rest = line.partition(" ")
            if word in LAST_LINES:
                for part in rest.split():
                    key, _, value = part.partition("=")
                    try:
                        figures[f"{word} {key}"].append(float(value))
                    except ValueError:
                        continue
                break
    for key, values in sorted(figures.items()):
        med = statistics.median(values)
        print(f"{key:<48} median {med:>9.3f}  range {min(values):.3f}-{max(values):.3f}  ({len(values)} runs)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=BENCHMARKS, default=None)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--save", default=None, help="directory for each run's output")
    ap.add_argument("--tree", default=None, help="another checkout to benchmark (before/after)")
    ap.add_argument("--label", default="", help="added to saved file names, e.g. before")
    ap.add_argument("--summary", nargs="*", default=None, help="saved outputs to summarize (no benchmark runs)")
    args = ap.parse_args()
    if args.summary is not None:
        summary(args.summary)
        return 0
    save = pathlib.Path(args.save) if args.save else None
    failed = []
    for i in range(1, args.runs + 1):
        for name in args.only or BENCHMARKS:
            if (HERE / f"{name}.py").exists() and not run(name, i, save, args.tree, args.label):
                failed.append(f"{name} (run {i})")
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
