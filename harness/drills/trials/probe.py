"""The half-open probe a plan may run against the edge during each trial's fault (`probe:` in the plan).

`drill probe half-open EDGE` runs as a child process, bounded by its own `--timeout`, from the second the
fault starts; its JSON summary line is what results.json keeps of it (`probe`).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Callable

from harness.drills.plan.sections import Probe
from harness.procs.spawn import python_env, spawn


def start_probe(spec: Probe, edge: str, workdir: pathlib.Path, log: Callable[[str], None]) -> subprocess.Popen:
    """`drill probe half-open EDGE` as a child process, its output in WORKDIR/probe.out."""
    argv = [
        sys.executable, "-m", "harness.cli", "probe", spec.kind, edge,
        "--count", str(spec.count), "--timeout", str(spec.timeout_s), "--json",
    ]  # fmt: skip
    if not spec.preface:
        argv.append("--no-preface")
    log(f"probe: {' '.join(argv[3:])}")
    return spawn(argv, workdir / "probe.out", python_env())


def probe_summary(path: pathlib.Path) -> dict | None:
    """The probe's JSON summary line (the first JSON object with a `summary` key)."""
    try:
        for line in path.read_text(errors="replace").splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                if isinstance(data, dict) and "summary" in data:
                    return data["summary"]
    except OSError:
        pass
    return None
