"""No orphan process, no bound port: the runner killed mid-drill (SIGTERM, SIGINT, SIGKILL) or a crashed service."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _start(tmp_path: pathlib.Path) -> tuple[subprocess.Popen, list[dict]]:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    runner = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", str(plan), "--out", str(out), "--no-live"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    logs = out / "logs" / "plain"
    deadline = time.monotonic() + 40
    ready: list[dict] = []
    while time.monotonic() < deadline:
        files = sorted(logs.glob("*.ready.json")) if logs.exists() else []
        if len(files) == 2:
            try:
                ready = [json.loads(f.read_text()) for f in files]
                break
            except ValueError:
                pass
        if runner.poll() is not None:
            pytest.fail(f"runner exited early: {runner.stderr.read().decode()[-2000:]}")
        time.sleep(0.1)
    else:
        runner.kill()
        pytest.fail("topology never became ready")
    time.sleep(2.0)  # well into the drill: load running, scraper scraping
    return runner, ready


def _assert_clean(ready: list[dict], timeout_s: float = 10.0) -> None:
    pids = [r["pid"] for r in ready]
    ports = [p for r in ready for p in (r["port"], r["metrics_port"])]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids) and not any(_listening(p) for p in ports):
            return
        time.sleep(0.1)
    alive = [p for p in pids if _alive(p)]
    bound = [p for p in ports if _listening(p)]
    for p in alive:  # do not leak into other tests
        os.kill(p, signal.SIGKILL)
    pytest.fail(f"left behind: processes {alive}, listening ports {bound}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_killing_the_runner_mid_drill_leaves_nothing_behind(tmp_path, sig):
    runner, ready = _start(tmp_path)
    runner.send_signal(sig)
    try:
        runner.wait(timeout=15)
    finally:
        if runner.poll() is None:
            runner.kill()
    _assert_clean(ready)
    if sig is not signal.SIGKILL:
        assert runner.returncode != 0


def test_a_crashed_service_aborts_the_drill_and_cleans_up(tmp_path):
    runner, ready = _start(tmp_path)
    os.kill(ready[0]["pid"], signal.SIGKILL)  # one service dies
    try:
        runner.wait(timeout=15)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 1
    assert "crashed" in runner.stderr.read().decode()
    _assert_clean(ready)
