"""Run every benchmark in turn (`make bench`); each prints its own ratios measured in one run."""

from __future__ import annotations

import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
BENCHMARKS = ("interceptor_overhead.py", "delay_accuracy.py", "amplification.py", "locust_throughput.py")


def main() -> int:
    failed = []
    for name in BENCHMARKS:
        path = HERE / name
        if not path.exists():
            continue
        print(f"\n===== {name} =====", flush=True)
        if subprocess.run([sys.executable, str(path)], cwd=HERE.parent).returncode != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
