"""Shared test helpers: metric deltas on the process registry, repo paths, a stand-in Grafana.

Tests run real gRPC servers on 127.0.0.1, each binding port 0 itself and reporting
the port it got (never a port found free and bound later: harness.procs.ports).
All metrics live on prometheus_client's process-wide registry, so tests compare deltas.
"""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import subprocess
import threading
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from tests.fake_grafana import FakeGrafana

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


def sample(name: str, **labels: str) -> float:
    """Current value of one sample on the default registry (0 when absent)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def sample_sum(name: str, **labels: str) -> float:
    """Sum of every sample of `name` whose labels include `labels`."""
    total = 0.0
    for metric in REGISTRY.collect():
        for s in metric.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def pytest_collection_modifyitems(config, items) -> None:
    """The slow (live) tests first.

    `make test` runs three workers, each taking whole files (`--dist loadfile`, so a module's live
    fixture runs once); files with the long live runs go first, so no worker is left with one
    at the end (longest first is the classic greedy schedule). A test process that a Prometheus
    scrapes serves only its own series (tests/observability/live_drill.py, the runner's
    `LoadExport`), never the whole process registry, so no test depends on running early.
    """
    items.sort(key=lambda item: 0 if item.get_closest_marker("slow") else 1)


def drill_process(
    *args: str, timeout: float = 240, env: dict | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess:
    """`drill ARGS` as its own process (as a user runs it): exit code, stdout and every byte it writes to stderr."""
    import sys

    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        input=stdin, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )  # fmt: skip


def drill_inprocess(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`drill ARGS` in this process (`harness.cli.main`, what the `drill` script calls): exit code, stdout and
    stderr captured. No interpreter to start (~2 s each on a busy box); a traceback would fail the test all the
    same. Use a real process where a C library writes to fd 2 (grpc binding a port) or a run forks children."""
    from harness import cli

    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(args))
            except SystemExit as exc:  # argparse
                code = exc.code
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.fixture
def repo_root() -> pathlib.Path:
    return ROOT


@pytest.fixture
def shared_dir() -> pathlib.Path:
    if not SHARED.exists():
        pytest.fail(f"shared/ not found beside the repo at {SHARED}")
    return SHARED


@pytest.fixture
def grafana() -> Iterator[FakeGrafana]:
    server = FakeGrafana()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _drill_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(("DRILL_", "LOCUST_", "OTEL_"))}


@pytest.fixture(autouse=True)
def _no_environment_left_behind():
    """A test that changes the harness's environment variables must put them back: every process a later test of
    the same worker starts inherits them (a DRILL_FAULT_MAX_ACTIVE=7 left behind once capped another test's hop
    at 7 faults in flight). The test that leaks fails, naming the keys, and the environment is restored."""
    before = _drill_environment()
    yield
    after = _drill_environment()
    if after != before:
        for k in set(after) - set(before):
            os.environ.pop(k, None)
        os.environ.update(before)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        pytest.fail(f"the test left the environment changed: {', '.join(changed)}")
