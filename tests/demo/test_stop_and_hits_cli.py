"""`drill stop` against a real `drill serve` (SIGUSR1), and `drill hits --scope attempt --attempts K`."""

from __future__ import annotations

import argparse
import subprocess
import sys
import urllib.request

import pytest

from harness.core import headers as h
from harness.core.environ import environ_now
from harness.core.faults import is_hit_attempt
from harness.demo import stop as stop_cmd
from harness.procs.spawn import start_serve
from tests.conftest import ROOT
from tests.interceptors.test_safety import call, drill_md, in_thread, wait_for
from tests.test_cli_errors import assert_one_line, drill, drill_process


@pytest.fixture
def served(tmp_path):
    server = start_serve(
        "stopme",
        ["--port", "0", "--metrics-port", "-1", "--enable-faults", "--seed", "3", "--service", "stopme"],
        tmp_path,
    )
    try:
        yield server
    finally:
        server.stop()


def metric(server, name: str) -> float:
    with urllib.request.urlopen(server.metrics_url, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
    return -1.0


def test_drill_stop_pid_releases_a_delayed_call_and_turns_injection_off_for_good(served):
    assert metric(served, "drill_fault_switch") == 1
    assert wait_for(lambda: stop_cmd.catches(served.proc.pid), 10)  # the handler is installed once serving
    delayed = in_thread(call, served.port, drill_md("delay:20000"))
    assert wait_for(lambda: metric(served, "drill_fault_active_calls") == 1)
    proc = drill_process("stop", str(served.proc.pid), timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"signalled {served.proc.pid} (SIGUSR1, emergency stop)")
    delayed[0].join(10)
    assert delayed[1]["r"][:2] == ("OK", "delay") and delayed[1]["r"][2] < 10
    assert call(served.port, drill_md("abort:UNAVAILABLE"))[:2] == ("OK", None)
    assert served.proc.poll() is None  # still serving
    assert metric(served, "drill_fault_switch") == 0
    log = served.log_path.read_text()
    assert log.count('"event":"emergency_stop"') == 1 and '"reason":"signal:SIGUSR1"' in log


def test_drill_stop_all_local_finds_drill_serve_processes_of_this_user(served, capsys, monkeypatch):
    assert wait_for(lambda: stop_cmd.catches(served.proc.pid), 10)
    found = stop_cmd.local_servers()
    assert served.proc.pid in found
    # signal only the server this test started, never another engineer's
    monkeypatch.setattr(stop_cmd, "local_servers", lambda: [served.proc.pid])
    assert stop_cmd.run(argparse.Namespace(all_local=True, pid=None)) == 0
    assert f"signalled {served.proc.pid}" in capsys.readouterr().out
    assert wait_for(lambda: metric(served, "drill_fault_switch") == 0, 5)


def test_drill_stop_refuses_a_process_that_would_die_of_sigusr1():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert_one_line(drill("stop", str(sleeper.pid)), 2, "does not handle SIGUSR1", "not signalled")
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait(5)
    assert_one_line(drill("stop", "4194304"), 1, "no process")  # Linux's largest pid_max: never a live process
    assert_one_line(drill("stop", "999999999"), 2, "a process id 1-4194304")  # no process id is that large
    assert_one_line(drill("stop"), 2, "one of the arguments")


def test_is_drill_serve_matches_the_ways_it_is_started():
    assert stop_cmd.is_drill_serve(["/x/.venv/bin/drill", "serve", "--port", "1"])
    assert stop_cmd.is_drill_serve(["/usr/bin/python3", "-m", "harness.cli", "serve"])
    assert stop_cmd.is_drill_serve(["/x/.venv/bin/drill", "proxy", "--upstream", "127.0.0.1:1"])  # any language
    assert not stop_cmd.is_drill_serve(["/usr/bin/python3", "-m", "harness.cli", "run", "serve"])
    assert not stop_cmd.is_drill_serve(["vim", "serve"])


def test_hits_prints_one_column_per_attempt():
    ids = ["req-61096", "a", "b", "c"]
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "hits", "--seed", "-1", "--directive", "delay:250", "--ratio", "50",
         "--scope", "attempt", "--attempts", "6"],
        input="\n".join(ids) + "\n", capture_output=True, text=True, cwd=ROOT, timeout=30,
        env={**environ_now(), "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert [r[0] for r in rows] == ids and all(len(r) == 7 for r in rows)
    for r in rows:
        assert r[1:] == [
            "hit" if is_hit_attempt(-1, r[0], "delay:250", 50, n, "attempt") else "miss" for n in range(6)
        ]
    assert rows[0][1:] == ["miss", "hit", "hit", "hit", "miss", "miss"]  # req-61096 attempt 4: the Java row
    assert_one_line(drill("hits", "--seed", "1", "--directive", "delay:1", "--attempts", "0"), 2, "--attempts")


def test_request_scope_with_attempts_prints_hits_then_misses():
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "hits", "--seed", "1", "--directive", "abort:UNAVAILABLE",
         "--attempts", "3"],
        input="x\n", capture_output=True, text=True, cwd=ROOT, timeout=30,
        env={**environ_now(), "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.stdout == "x\thit\thit\thit\n"
    assert h.FAULT_ATTEMPTS == "x-fault-attempts"
