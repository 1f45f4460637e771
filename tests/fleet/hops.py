"""The fleet's non-Python hops (harness/fleet) as processes for the tests: built once by the build step, started
on 127.0.0.1 with a ready file, stopped by PID."""

from __future__ import annotations

import contextlib
import json
import pathlib
import subprocess
import time
from collections.abc import Iterator

from harness.fleet import build

READY_S = 30  # a cold node start with OpenTelemetry's SDK loads ~70 packages: seconds on a busy box


@contextlib.contextmanager
def hop(argv: list[str], tmp: pathlib.Path, name: str, flag: str) -> Iterator[int]:
    """Start `argv` + `flag READY-FILE` and yield its port once it serves."""
    ready = tmp / f"{name}.ready"
    err = open(tmp / f"{name}.stderr", "w")
    proc = subprocess.Popen([*argv, flag, str(ready)], stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + READY_S
        while not ready.exists():
            assert proc.poll() is None, (tmp / f"{name}.stderr").read_text()
            assert time.monotonic() < deadline, f"{name} was not ready in {READY_S} s"
            time.sleep(0.05)
        yield int(ready.read_text())
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        err.close()


def gohop(tmp: pathlib.Path, name: str, *args: str) -> contextlib.AbstractContextManager[int]:
    return hop([str(build.gohop()), "-name", name, "-log", str(tmp / f"{name}.log"), *args], tmp, name, "-ready-file")


def nodehop(tmp: pathlib.Path, name: str, *args: str) -> contextlib.AbstractContextManager[int]:
    return hop([*build.nodehop(), "--name", name, "--log", str(tmp / f"{name}.log"), *args], tmp, name, "--ready-file")


def log_lines(tmp: pathlib.Path, name: str) -> list[dict]:
    path = tmp / f"{name}.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
