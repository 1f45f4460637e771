"""A worker gives up on a master that is gone within `--drill-master-wait` seconds (LOCUST_DRILL_MASTER_WAIT),
not Locust's own 300 s at start (60 tries of 5 s) or 60 s without heartbeat during a run.

Both cases with real processes: a worker whose master never answers (nothing listens on its port), and a
worker whose master is killed mid-run (SIGKILL: no quit message reaches it). The bound each test waits is
far above the wait it sets (2 s, plus a Locust start on a loaded box) and far below Locust's own.
"""

from __future__ import annotations

import os
import signal
import subprocess

from harness.core.environ import environ_now
from harness.procs.ports import private_loopback
from tests.conftest import ROOT
from tests.loadtests.conftest import LOCUST, kill_group, wait_announced
from tests.ports import free_port

LOCUSTFILE = str(ROOT / "loadtests" / "locustfile.py")
#: what each worker is told; the tests wait WAIT_BOUND_S at most (Locust's own would be 300 s and 60 s)
WAIT_S = "2"
WAIT_BOUND_S = 45


def _locust(tmp_path, tag: str, *args: str) -> subprocess.Popen:
    env = environ_now(LOCUST_DRILL_MASTER_WAIT=WAIT_S)
    log = open(tmp_path / f"{tag}.log", "w")  # noqa: SIM115 - closed with the process's end by the OS
    return subprocess.Popen([LOCUST, "-f", LOCUSTFILE, *args], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def test_a_worker_whose_master_never_answers_gives_up(tmp_path):
    here = private_loopback()
    worker = _locust(tmp_path, "worker", "--worker", "--master-host", here, "--master-port", str(free_port(here)))
    try:
        rc = worker.wait(timeout=WAIT_BOUND_S)
    finally:
        kill_group(worker)
    assert rc != 0
    assert "Failed to connect to the Locust master" in (tmp_path / "worker.log").read_text()


def test_a_worker_whose_master_died_mid_run_quits(tmp_path):
    here = private_loopback()
    ports = tmp_path / "ports"
    master = _locust(tmp_path, "master", "--master", "--master-bind-host", here, "--master-bind-port", "0",
                     "--headless", "--expect-workers", "1", "-u", "1", "-r", "1", "-t", "120s",
                     "--host", f"{here}:1", "--drill-metrics-port", "0", "--drill-ports-dir", str(ports))  # fmt: skip
    worker = None
    try:
        master_port = wait_announced(ports, "master", master)["master_port"]
        worker = _locust(tmp_path, "worker", "--worker", "--master-host", here, "--master-port", str(master_port),
                         "--drill-metrics-port", "0", "--drill-ports-dir", str(ports))  # fmt: skip
        wait_announced(ports, "worker-0", worker)  # it joined: the master gave it an index
        os.kill(master.pid, signal.SIGKILL)
        worker.wait(timeout=WAIT_BOUND_S)
    finally:
        kill_group(master)
        if worker is not None:
            kill_group(worker)
    assert "Didn't get heartbeat from master in over 2.0s" in (tmp_path / "worker.log").read_text()
