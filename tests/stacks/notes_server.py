"""The notes service (tests/loadtests/notes_service.py: a service that is not the demo, one method of each kind)
in its own process, switched and seeded by its environment alone, as a deployment would run it."""

from __future__ import annotations

import contextlib
import json
import pathlib
import sys
import time
from collections.abc import Iterator

from harness.core.environ import environ_now
from harness.procs.spawn import spawn, stop_processes
from tests.conftest import ROOT


@contextlib.contextmanager
def notes_server(tmp: pathlib.Path, seed: int) -> Iterator[dict]:
    """{port, metrics_port, pid, log (its audit lines), record (a JSON line per call its handlers finished)}."""
    ready, log, record = tmp / "ready.json", tmp / "notes.log", tmp / "record.jsonl"
    env = environ_now(PYTHONPATH=str(ROOT), DRILL_FAULT_ENABLED="1", DRILL_FAULT_SEED=str(seed))
    argv = [sys.executable, "-m", "tests.loadtests.notes_service", "--ready-file", str(ready), "--record", str(record)]
    proc = spawn(argv, log, env)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        yield {**json.loads(ready.read_text()), "log": str(log), "record": str(record)}
    finally:
        stop_processes([proc])
