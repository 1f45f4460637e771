"""What every benchmark here shares: cores, CPU seconds from /proc, the run's header line.

Measure the part, not the box: the server and the load generator are pinned to
different cores (`os.sched_setaffinity` in the child before it starts, so every
thread it creates inherits the core) and each one's CPU per call is read from
/proc, so the figure does not depend on what else shares the machine. A run's
header names the command line, the commit it ran on, the cores and the load
average, so a saved output says how it was made, on what code and how busy the
machine was (tests/test_doc_evidence.py refuses a saved output that ran on
uncommitted code).
"""

from __future__ import annotations

import os
import pathlib
import shlex
import signal
import subprocess
import sys

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cores() -> tuple[int, int]:
    """(server core, load-generator core): the last two CPUs this process may use (the same one on a 1-CPU box)."""
    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[-1], cpus[-2]) if len(cpus) >= 2 else (cpus[0], cpus[0])


def pinned(cpu: int):
    """A `preexec_fn` that pins the child (and every thread it will start) to `cpu`."""

    def pin() -> None:
        os.sched_setaffinity(0, {cpu})

    return pin


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads included (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its live children (Locust `--processes` workers)."""
    total = cpu_seconds(pid)
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            children = [int(c) for c in fh.read().split()]
    except OSError:
        children = []
    for child in children:
        try:
            total += tree_cpu_seconds(child)
        except OSError:
            continue
    return total


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def commit() -> str:
    """This checkout's commit, `+uncommitted` when a tracked file outside benchmarks/results/ differs from it
    (a run saving its output there must not mark the next run dirty)."""
    root = pathlib.Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":!benchmarks/results"], cwd=root, capture_output=True, text=True,
                               check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return sha + ("+uncommitted" if dirty else "")


def header(name: str, *, pinned: bool = True) -> str:
    """The first lines of a run's output: command, commit, cores, load average (1/5/15 min) at the start."""
    server, client = cores()
    cmd = shlex.join([os.path.relpath(sys.executable), *sys.argv])
    cpus = f"# cpus: {os.cpu_count()}"
    cpus += f", server pinned to cpu {server}, load generator to cpu {client}" if pinned else ""
    return f"# {name}\n# command: {cmd}\n# commit {commit()}\n{cpus}\n# load average at start: {load_average()}"


def popen_pinned(argv: list[str], cpu: int, **kwargs) -> subprocess.Popen:
    """Start `argv` pinned to `cpu`."""
    return subprocess.Popen(argv, preexec_fn=pinned(cpu), **kwargs)  # noqa: PLW1509 - affinity only


def stop_all(procs: list[subprocess.Popen], timeout_s: float = 10.0) -> None:
    """SIGTERM to each process started here, then SIGKILL to any still running after `timeout_s`."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
