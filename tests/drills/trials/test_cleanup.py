"""No orphan process, no bound port: the runner killed mid-drill (SIGTERM, SIGINT, SIGKILL) or a crashed service.

The four runners start at once (one module fixture) and each gets its blow once it is well into the drill —
its topology ready and its load flowing, which the runner starts only after its first scrape of every hop
(`Scraper.prime`) — so the four scenarios cost one start-up, not four. Nothing waits a fixed time: every wait
is for a state the test can see, bounded only so that a hung start fails instead of hanging the suite.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.core.environ import environ_now
from harness.procs.ports import listening_ports
from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # a live run: scheduled first (tests/conftest.py)

PLAN = """
name: cleanup
seed: 7
topology:
  hops:
    - {name: gateway, work_ms: 1}
    - {name: ledger, work_ms: 1}
traffic: {organic_users: 1, organic_rate: 5, drill_users: 1, drill_rate: 5, timeout_s: 1.0}
fault: {directive: "abort:UNAVAILABLE", target: ledger}
phases: {warmup: 30, fault: 30, recovery: 30}
configs: [plain]
"""
#: Each scenario's blow: a signal to the runner, or SIGKILL to one of its services.
SCENARIOS = ("SIGTERM", "SIGINT", "SIGKILL", "crash")
#: Bounds on waits for a state, not timings: what a start or an exit may take on a loaded box.
START_S, EXIT_S = 180.0, 60.0


@dataclasses.dataclass
class Started:
    runner: subprocess.Popen
    out: pathlib.Path
    stderr: pathlib.Path
    #: the services' ready files: {name: {pid, port, metrics_port, ...}}
    ready: dict[str, dict] = dataclasses.field(default_factory=dict)

    def service(self, hop: str) -> dict:
        """The ready file of the hop's (only) replica, `HOP-0`."""
        return self.ready[f"{hop}-0"]

    def flowing(self) -> bool:
        """Both services ready and the gateway has served an organic call: the load runs. (Not any call: the reach
        probe's calls, sent in the preflight, are drill calls the gateway serves too; a service killed then fails
        the preflight, not the run, as a CI run met.)"""
        logs = self.out / "logs" / "plain"
        for f in sorted(logs.glob("*.ready.json")) if logs.exists() else []:
            try:
                self.ready[f.name.split(".")[0]] = json.loads(f.read_text())
            except ValueError:
                continue  # written whole (os.replace); a stray partial read is retried
        if len(self.ready) < 2:
            return False
        url = f"http://127.0.0.1:{self.service('gateway')['metrics_port']}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return False
        return any(s.value > 0 for fam in text_string_to_metric_families(text) for s in fam.samples
                   if s.name == "drill_server_calls_total" and s.labels.get("traffic") == "organic")  # fmt: skip


def _start(tmp: pathlib.Path) -> Started:
    plan = tmp / "plan.yaml"
    plan.write_text(PLAN)
    out, err = tmp / "out", tmp / "runner.err"
    env = environ_now(PYTHONPATH=str(ROOT))
    with open(err, "w") as fh:
        runner = subprocess.Popen(
            [sys.executable, "-m", "harness.cli", "run", str(plan), "--out", str(out), "--no-live"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=fh, start_new_session=True,
        )  # fmt: skip
    return Started(runner, out, err)


def _blow(scenario: str, s: Started) -> None:
    if scenario == "crash":
        os.kill(s.service("gateway")["pid"], signal.SIGKILL)  # one service dies
    else:
        s.runner.send_signal(getattr(signal, scenario))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Started]]:
    started = {name: _start(tmp_path_factory.mktemp(name)) for name in SCENARIOS}
    try:
        waiting, deadline = dict(started), time.monotonic() + START_S
        while waiting and time.monotonic() < deadline:
            for name, s in list(waiting.items()):
                if s.runner.poll() is not None:
                    pytest.fail(f"{name}: runner exited early: {s.stderr.read_text()[-2000:]}")
                if s.flowing():
                    _blow(name, s)
                    del waiting[name]
            time.sleep(0.1)
        assert not waiting, f"never ready with the load flowing: {sorted(waiting)}"
        yield started
    finally:
        for s in started.values():  # whatever a failed test left: the runners we started, by their group
            if s.runner.poll() is None:
                os.killpg(s.runner.pid, signal.SIGKILL)
                s.runner.wait(timeout=10)


def _ours(out: pathlib.Path) -> list[int]:
    """Live processes whose command line names this run's directory: the runner and every child it started
    (`drill serve --ready-file OUT/...`), however deep. Zombies are gone for our purposes."""
    pids = []
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(out).encode() in cmdline and state != "Z":
            pids.append(int(proc.name))
    return pids


def _assert_clean(s: Started) -> None:
    """No process of the run is left, so none of its ports is bound (the kernel closes a dead process's
    sockets). Checked by ownership, not by connecting: a port from bind(0), once ours is closed, may be
    handed to another session's server on this shared box."""
    deadline = time.monotonic() + EXIT_S
    while (left := _ours(s.out)) and time.monotonic() < deadline:
        time.sleep(0.1)
    bound = {pid: listening_ports(pid) for pid in left}
    for pid in left:  # do not leak into other tests
        os.kill(pid, signal.SIGKILL)
    assert not left, f"left behind: processes {left}, listening on {bound}"


def _exited(s: Started) -> int:
    try:
        return s.runner.wait(timeout=EXIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the runner did not exit: {s.stderr.read_text()[-2000:]}")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_killing_the_runner_mid_drill_leaves_nothing_behind(runs: dict[str, Started], sig: str) -> None:
    s = runs[sig]
    rc = _exited(s)
    _assert_clean(s)
    if sig != "SIGKILL":  # the documented codes (docs/contracts.md): 128 + the signal
        assert rc == {"SIGINT": 130, "SIGTERM": 143}[sig], s.stderr.read_text()[-2000:]


def test_a_crashed_service_aborts_the_drill_and_cleans_up(runs: dict[str, Started]) -> None:
    s = runs["crash"]
    assert _exited(s) == 1
    assert "crashed" in s.stderr.read_text()
    _assert_clean(s)
