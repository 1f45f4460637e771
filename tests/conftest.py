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
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from harness.core.environ import environ_now
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


#: Seconds each of the longest files took (setup + call + teardown of its tests, summed), from one run of `make test`
#: (pytest -n 5 --dist loadfile, its junit XML) on 2 cores at d5b3068: only their order matters (below)
LONGEST_FILES = {
    "tests/drills/trials/test_live_run.py": 78,
    "tests/stacks/test_running_stack.py": 57,
    "tests/link/test_plan_blackhole.py": 49,
    "tests/stacks/test_guard_stack.py": 46,
    "tests/deploy/test_compose_local.py": 43,
    "tests/drills/cli/test_run_e2e.py": 43,
    "tests/drills/cli/test_sweep_cli.py": 42,
    "tests/fleet/test_retry_storm_go.py": 41,
    "tests/deploy/test_compose_go.py": 41,
    "tests/stacks/test_processes.py": 40,
    "tests/loadtests/test_any_method.py": 38,
    "tests/link/test_cli.py": 36,
    "tests/drills/trials/test_reach.py": 34,
    "tests/link/test_languages.py": 33,
    "tests/stacks/test_own_service_doc.py": 31,
    "tests/stacks/test_own_service.py": 31,
    "tests/loadtests/test_no_confounding.py": 29,
    "tests/interceptors/test_stream_midstream.py": 29,
    "tests/drills/cli/test_init.py": 28,
    "tests/drills/trials/test_guard_live.py": 25,
    "tests/stacks/test_running_link.py": 25,
    "tests/stacks/test_stream_edge.py": 24,
    "tests/resilience/test_metastable_live.py": 24,
    "tests/observability/test_live_dashboards.py": 23,
    "tests/deploy/test_link_deploy.py": 20,
    "tests/test_core_install.py": 19,
    "tests/link/test_plan_stack.py": 18,
    "tests/link/test_kernel.py": 17,
    "tests/proxy/test_stack_run.py": 17,
    "tests/link/test_plan_guard.py": 17,
    "tests/loadtests/test_distributed.py": 17,
    "tests/interceptors/test_stream_safety.py": 17,
    "tests/demo/test_serve_keepalive.py": 14,
    "tests/proxy/test_forward.py": 14,
    "tests/procs/test_prometheus_targets.py": 14,
    "tests/fleet/test_propagation.py": 14,
    "tests/deploy/test_k8s_manifests.py": 13,
    "tests/drills/load/test_stream_load.py": 13,
    "tests/stacks/test_external_load.py": 13,
    "tests/interceptors/test_served.py": 13,
    "tests/stacks/test_locust_any_service.py": 13,
    "tests/stacks/test_audit_files.py": 13,
    "tests/loadtests/test_run_outcome.py": 13,
    "tests/stacks/test_preflight_stack.py": 12,
    "tests/drills/trials/test_load_check_e2e.py": 12,
    "tests/drills/readings/test_prom_hops.py": 12,
    "tests/link/test_faults_live.py": 12,
    "tests/interceptors/test_safety.py": 12,
    "tests/interceptors/test_stream_faults.py": 11,
    "tests/resilience/test_measured.py": 11,
    "tests/interceptors/test_soak.py": 11,
    "tests/drills/stack/test_demo_exchange.py": 10,
    "tests/link/test_plan_links.py": 10,
    "tests/interceptors/test_server_sync.py": 10,
    "tests/drills/trials/test_live_and_scraper.py": 10,
    "tests/interceptors/test_organic_isolation.py": 10,
    "tests/link/test_relay.py": 9,
    "tests/drills/trials/test_dry_run.py": 9,
    "tests/interceptors/test_server_aio.py": 8,
    "tests/drills/report/test_report.py": 8,
}


def pytest_configure(config) -> None:
    """Keep the file order `pytest_collection_modifyitems` makes (below). pytest-xdist's `--dist loadfile`
    reorders files by their number of tests unless told not to (`--loadscope-reorder`, on by default in the
    xdist we install, 3.8): the longest files, most of them one or two live tests, went last, and the run ended
    on a tail of long files with the other workers idle (at d5b3068 the last four files to finish took 24, 43,
    18 and 41 s)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items) -> None:
    """The longest files first, then the other slow (live) tests, then the rest.

    `make test` runs five workers, each taking whole files (`--dist loadfile`, so a module's live
    fixture runs once) in the order collected (`pytest_configure` keeps it), the next file to the
    first worker nearly free: longest first is the classic greedy schedule (LPT), so no worker starts
    a minute-long file when the others are nearly done (at d5b3068 the suite summed 1,513 s of tests,
    ~303 s a worker at best). A file missing from `LONGEST_FILES` only loses its place. A test process
    that a Prometheus scrapes serves only its own series (tests/observability/live_drill.py, the
    runner's `LoadExport`), never the whole process registry, so no test depends on running early.
    """
    items.sort(key=lambda item: (-LONGEST_FILES.get(item.nodeid.split("::", 1)[0], 0),
                                 0 if item.get_closest_marker("slow") else 1))  # fmt: skip


def drill_process(
    *args: str, timeout: float = 240, env: dict | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess:
    """`drill ARGS` as its own process (as a user runs it): exit code, stdout and every byte it writes to stderr."""
    import sys

    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        input=stdin, env={**environ_now(), "PYTHONPATH": str(ROOT), **(env or {})},
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


@contextlib.contextmanager
def side_by_side(at_once: int | None = None, **scenarios: Callable[[], Any]) -> Iterator[dict[str, Callable[[], Any]]]:
    """Independent live scenarios run at once, each in a thread of its own: yields each name with a call that waits
    for that scenario's result (and raises its exception).

    For a module fixture whose tests each assert on one scenario that mostly waits on the wall clock (a drill's
    phases, a keepalive window, a Prometheus' first scrape): the module waits for the longest instead of the sum.
    Each scenario owns its processes, ports and files, so none can see another's calls; the tests assert what
    they asserted on the same scenario run alone. Make the scenarios' directories before (`tmp_path_factory`
    makes its base directory on first use, and two threads racing to it fail with FileExistsError). `at_once`
    bounds how many run at a time (CPU-heavy starts, a JVM's), in the order given."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(at_once or len(scenarios)) as pool:
        futures = {name: pool.submit(scenario) for name, scenario in scenarios.items()}
        yield {name: future.result for name, future in futures.items()}


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
