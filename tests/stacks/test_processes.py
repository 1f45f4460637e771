"""`stack.processes`: the chain of local processes the runner starts for each trial (harness.drills.stack.processes).

One test per promise of the module's docstring, on real processes (small Python programs that listen on a real
port, write a file or exit), and `drill run` end to end on a real chain of our own: a `drill serve` edge switched by
`$DRILL_CONFIG`, a `drill proxy --tap` in front of the ledger, and the ledger (`drill serve`, injection on).
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import time

import pytest
import yaml

from harness.core.errors import RunFailed
from harness.drills.plan.stack import StackProcess
from harness.drills.stack.processes import ProcessChain, ProcessError
from tests.conftest import drill_process, side_by_side
from tests.ports import free_port

#: A program that records its environment and working directory, then listens on $PORT until stopped.
LISTEN = ('"$DRILL_PYTHON" -c "import json,os,socket,time; '
          "json.dump({k: v for k, v in os.environ.items() if k.startswith('DRILL_') or k == 'EXTRA'} "
          "| {'cwd': os.getcwd(), 'at': time.time()}, open(os.environ['NAME'] + '.env', 'w')); "
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
          "s.bind(('127.0.0.1', int(os.environ['PORT']))); s.listen(); print('up', flush=True); time.sleep(600)\"")


def proc(name: str, port: int, command: str = LISTEN, **extra) -> StackProcess:
    return StackProcess(name=name, command=command, ready={"port": port, "timeout_s": 10},
                        env={"NAME": name, "PORT": str(port), **extra})  # fmt: skip


def working_in(folder: pathlib.Path) -> list[int]:
    """PIDs of the live processes whose working directory is in `folder` (a chain's run in their trial's)."""
    inside = []
    for entry in pathlib.Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and pathlib.Path(os.readlink(entry / "cwd")).is_relative_to(folder.resolve()):
                inside.append(int(entry.name))
        except OSError:
            continue
    return inside


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_processes_start_in_order_each_ready_with_the_trials_variables_and_stop_by_their_groups(tmp_path):
    """Each starts once the one before it listens; each sees the configuration, the trial, the plan's folder, the
    trial's folder (its working directory, where its log is) and its own env; after `stop`, no process of any of
    their groups is left."""
    ports = [free_port(), free_port()]
    chain = ProcessChain((proc("leaf", ports[0]), proc("edge", ports[1], EXTRA="yes")), tmp_path / "plan")
    workdir = tmp_path / "out" / "logs" / "naive"
    said: list[str] = []
    chain.start("naive", 2, workdir, said.append)
    try:
        pids = [p.pid for _, p, _ in chain.running]
        assert set(pids) <= set(working_in(tmp_path / "out"))  # what the check after the stop looks for
        leaf, edge = (json.loads((workdir / f"{n}.env").read_text()) for n in ("leaf", "edge"))
        for env in (leaf, edge):
            assert env["DRILL_CONFIG"] == "naive" and env["DRILL_TRIAL"] == "2"
            assert env["DRILL_PLAN_DIR"] == str(tmp_path / "plan") and env["DRILL_OUT"] == str(workdir.resolve())
            assert env["cwd"] == str(workdir.resolve())
        assert edge["EXTRA"] == "yes" and "EXTRA" not in leaf
        # the edge started after the leaf listened: the leaf wrote its file before listening
        assert edge["at"] > leaf["at"]
        assert (workdir / "leaf.log").read_text().strip() == "up" and chain.exited() == []
        assert said == [f"processes up: leaf → edge (logs in {workdir.resolve()})"]
    finally:
        chain.stop()
    assert not any(alive(pid) for pid in pids) and not working_in(tmp_path / "out")


def test_a_process_that_exits_before_it_is_ready_is_one_line_and_the_ones_before_it_are_stopped(tmp_path):
    ports = [free_port(), free_port()]
    failing = proc("node", ports[1], command="echo 'cannot find module @grpc/grpc-js' >&2; exit 3")
    chain = ProcessChain((proc("leaf", ports[0]), failing), tmp_path)
    with pytest.raises(ProcessError) as err:
        chain.start("naive", 1, tmp_path / "t")
    text = str(err.value)
    assert isinstance(err.value, RunFailed) and err.value.exit_code == 1 and "\n" not in text
    assert text == (f"stack.processes node exited with 3 before it was ready: cannot find module @grpc/grpc-js "
                    f"(log: {(tmp_path / 't' / 'node.log').resolve()})")  # fmt: skip
    assert not alive(chain.running[0][1].pid)  # the leaf, started before it, is stopped


def test_a_process_that_is_not_ready_in_time_is_stopped_and_said_in_one_line(tmp_path):
    """Ready by a file that never comes: it fails at its timeout (not later), its group stopped."""
    slow = StackProcess(name="edge", command="echo starting; sleep 600", ready={"file": "edge.ready", "timeout_s": 1})
    chain = ProcessChain((slow,), tmp_path)
    started = time.monotonic()
    with pytest.raises(ProcessError, match=r"^stack.processes edge was not ready \(file .*edge.ready\) within 1 s: "
                                           r"starting \(log: .*edge.log\)$"):  # fmt: skip
        chain.start("naive", 1, tmp_path / "t")
    took = time.monotonic() - started
    # not before its timeout: the start gives up only once its 1-s deadline has passed
    assert took >= 1.0, took
    # not later: its timeout plus one poll (50 ms) and the stop's SIGTERM, which sh and sleep die of at once. The
    # failures this guards wait far longer (the process's own 600 s, or the stop's 3-s grace then SIGKILL, shown
    # below by the exit status, not by time), so 10 s of slack take any stall of a busy box without hiding them
    assert took < 1 + 10.0, took
    shell = chain.running[0][1]
    assert not alive(shell.pid)
    assert shell.returncode == -signal.SIGTERM, shell.returncode  # the SIGTERM ended it: no grace, no SIGKILL


def test_a_ready_file_counts_once_written_and_a_stale_one_is_removed_first(tmp_path):
    workdir = tmp_path / "t"
    workdir.mkdir()
    (workdir / "edge.ready").write_text("an earlier trial's")
    p = StackProcess(name="edge", command="sleep 0.5; echo 1 > edge.ready; sleep 600",
                     ready={"file": "edge.ready", "timeout_s": 10})  # fmt: skip
    chain = ProcessChain((p,), tmp_path)
    started = time.monotonic()
    chain.start("naive", 1, workdir)
    try:
        assert time.monotonic() - started >= 0.5  # the stale file did not count
        assert (workdir / "edge.ready").read_text() == "1\n"
    finally:
        chain.stop()


def test_a_ready_port_already_taken_is_refused_before_the_process_starts(tmp_path):
    """Something else listening there would pass the readiness check for it: refused, nothing started."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        chain = ProcessChain((proc("leaf", port),), tmp_path)
        with pytest.raises(ProcessError, match=rf"^stack.processes leaf: its ready port 127.0.0.1:{port} is in use "
                                               r"before it starts \(.*\): something else would answer for it"):
            chain.start("naive", 1, tmp_path / "t")
        assert chain.running == []


def test_a_process_that_dies_during_the_trial_is_reported(tmp_path):
    port = free_port()
    chain = ProcessChain((proc("leaf", port),), tmp_path)
    chain.start("naive", 1, tmp_path / "t")
    try:
        os.killpg(chain.running[0][1].pid, 9)
        chain.running[0][1].wait(5)
        assert chain.exited() == [f"leaf (process exited with -9; log: {(tmp_path / 't' / 'leaf.log').resolve()})"]
    finally:
        chain.stop()


def test_the_plan_refuses_two_processes_on_one_port_and_a_ready_without_one_way():
    from harness.drills.plan.files import from_dict

    base = {"edge": {"address": "127.0.0.1:1", "method": "a.B/C"}, "hops": [{"name": "a", "metrics": ["http://x"]}]}
    for processes, said in (
        ([{"name": "a", "command": "x", "ready": {"port": 5}}, {"name": "b", "command": "y", "ready": {"port": 5}}],
         "two processes are ready on the same port"),
        ([{"name": "a", "command": "x", "ready": {"port": 5, "file": "f"}}], "give port"),
        ([{"name": "a", "command": "x", "ready": {"port": 5}}, {"name": "a", "command": "y", "ready": {"port": 6}}],
         "process names must be unique"),
    ):  # fmt: skip
        with pytest.raises(Exception, match=said):
            from_dict({"stack": {**base, "processes": processes}, "fault": {"directive": "abort:UNAVAILABLE"}})


# --- drill run on a chain it starts -----------------------------------------------------------------------------
def chain_plan(tmp_path: pathlib.Path) -> str:
    """gateway (drill serve, its resilience configuration `$DRILL_CONFIG`) → tap (drill proxy --tap, service
    to-ledger) → ledger (drill serve, injection on); the ledger aborts every drill call."""
    edge, tap, tap_m, ledger, ledger_m, gw_m = (free_port() for _ in range(6))
    serve = '"$DRILL_PYTHON" -m harness.cli serve'
    plan = {
        "name": "chain", "seed": 11,
        "stack": {
            "processes": [
                {"name": "ledger", "audit": True, "ready": {"port": ledger},
                 "command": f"{serve} --service ledger --port {ledger} --metrics-port {ledger_m} --work-ms 2 "
                            "--concurrency 8 --queue 32 --enable-faults --seed 11"},
                {"name": "tap", "ready": {"port": tap},
                 "command": f'"$DRILL_PYTHON" -m harness.cli proxy --tap --upstream 127.0.0.1:{ledger} --port {tap} '
                            f"--metrics-port {tap_m} --service to-ledger"},
                {"name": "gateway", "ready": {"port": edge},
                 "command": f'echo "configuration $DRILL_CONFIG" && exec {serve} --service gateway --port {edge} '
                            f"--metrics-port {gw_m} --downstream 127.0.0.1:{tap} --config $DRILL_CONFIG "
                            "--enable-faults --seed 11"},
            ],
            "edge": {"address": f"127.0.0.1:{edge}", "method": "drill.v1.Demo/Call", "request": {"payload": "x"}},
            "hops": [{"name": "gateway", "metrics": [f"http://127.0.0.1:{gw_m}/metrics"]},
                     {"name": "to-ledger", "tap": True, "metrics": [f"http://127.0.0.1:{tap_m}/metrics"]},
                     {"name": "ledger", "metrics": [f"http://127.0.0.1:{ledger_m}/metrics"]}],
            "configs": [{"name": "naive", "ready": {"checks": 1}}, {"name": "budget", "ready": {"checks": 1}}],
        },
        "traffic": {"organic_users": 1, "organic_rate": 10, "drill_users": 1, "drill_rate": 10, "timeout_s": 2},
        "fault": {"directive": "abort:UNAVAILABLE", "ratio": 100, "target": "ledger"},
        "phases": {"warmup": 1, "fault": 3, "recovery": 1},
        "slo": {"max_error_rate": 0.05, "hold_s": 1, "traffic": "organic"},
    }  # fmt: skip
    path = tmp_path / "chain.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return str(path)


def _drill_run_starts_the_chain_per_trial_switches_it_by_config_and_reads_the_tap(tmp_path):
    """Both configurations ran on a chain started for their trial (each trial's folder holds the three logs, the
    gateway's saying its configuration), the tap counted exactly the calls the ledger counted (every call the
    ledger got went through it; all finished before the last reading), naive's retries made more of them than
    budget's, the hits are the ledger's audit lines, and nothing of the chain is left running."""
    path = chain_plan(tmp_path)
    out = tmp_path / "out"
    dry = drill_process("run", path, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "hop to-ledger: " in dry.stdout and "a tap: injection off" in dry.stdout
    assert "nothing was started (but the stack's processes, for the checks)" in dry.stdout
    run = drill_process("run", path, "--out", str(out), "--no-live")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    series = json.loads((out / "series.json").read_text())
    attempts = {}
    for config in ("naive", "budget"):
        logs = out / "logs" / config
        assert {p.name for p in logs.glob("*.log")} >= {"ledger.log", "tap.log", "gateway.log"}
        assert (logs / "gateway.log").read_text().startswith(f"configuration {config}\n")
        hops = _hop_totals(series, config)
        # exact: the tap forwards every call it counts but one whose caller's deadline passed before its handler
        # began (2 s here, on calls the ledger answers in ms), and every call ended before the last reading
        assert hops["to-ledger"] == hops["ledger"] > 0, hops
        attempts[config] = hops["ledger"]
        hits = results["configs"][config]["trials"][0]["hits"]
        assert hits["observed"] == hits["expected"] > 0, hits
    assert attempts["naive"] > attempts["budget"], attempts
    assert not working_in(out)  # every process of every trial (each ran in its trial's folder) is gone


def _hop_totals(series: dict, config: str) -> dict[str, float]:
    """Each hop's attempts over the trial (its `srv` series summed), from series.json."""
    from harness.drills.readings.series import read_series_document

    _, trials = read_series_document(series)
    totals: dict[str, float] = {}
    for key, values in trials[config][0].values.items():
        if key.kind == "srv":
            totals[key.service] = totals.get(key.service, 0.0) + sum(v or 0.0 for v in values)
    # whole calls: the per-second values are differences of counter readings, and their float sum can miss the
    # count by a rounding error (a run read 189.99999999999997 for 190); 6 decimals keep any real call apart
    return {service: round(total, 6) for service, total in totals.items()}


def _a_tap_passes_the_preflight_in_front_of_the_target_and_stays_off_whatever_the_environment_says(tmp_path):
    """`drill proxy --tap` started with DRILL_FAULT_ENABLED=1 still has injection off (its /metrics say so); marked
    `tap`, the hop in front of the ledger is fine (it forwards every key); unmarked, the dry run names it (exit 4),
    as it names any hop in front of the target whose injection is off."""
    path = pathlib.Path(chain_plan(tmp_path))
    plan = yaml.safe_load(path.read_text())
    plan["stack"]["processes"][1]["env"] = {"DRILL_FAULT_ENABLED": "1"}
    plan["stack"]["configs"] = plan["stack"]["configs"][:1]
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    dry = drill_process("run", str(path), "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "hop to-ledger: " in dry.stdout and "drill series), a tap: injection off" in dry.stdout
    plan["stack"]["hops"][1]["tap"] = False
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    dry = drill_process("run", str(path), "--dry-run")
    assert dry.returncode == 4, dry.stdout + dry.stderr
    assert dry.stderr.startswith("drill: hop to-ledger: the service at ") and "injection OFF" in dry.stderr


@pytest.fixture(scope="module")
def chains(tmp_path_factory):
    """The two scenarios above side by side, each its own chain on ports of its own (`chain_plan` picks free ones)
    in a folder of its own. Each test is its scenario, run whole in a thread: its assertions raised here."""
    tmp = {name: tmp_path_factory.mktemp(name) for name in ("run", "tap")}
    with side_by_side(
        run=lambda: _drill_run_starts_the_chain_per_trial_switches_it_by_config_and_reads_the_tap(tmp["run"]),
        tap=lambda: _a_tap_passes_the_preflight_in_front_of_the_target_and_stays_off_whatever_the_environment_says(
            tmp["tap"]),
    ) as results:
        yield results


@pytest.mark.slow
def test_drill_run_starts_the_chain_per_trial_switches_it_by_config_and_reads_the_tap(chains):
    chains["run"]()


def test_a_tap_passes_the_preflight_in_front_of_the_target_and_stays_off_whatever_the_environment_says(chains):
    chains["tap"]()


def test_tap_and_enable_faults_together_are_refused_in_one_line():
    from tests.conftest import drill_inprocess

    res = drill_inprocess("proxy", "--tap", "--enable-faults", "--upstream", "127.0.0.1:1")
    assert (res.returncode, res.stderr) == (2, "drill: proxy: --tap injects nothing: drop --enable-faults (or --tap)\n")


def test_a_guards_trip_signals_only_the_processes_that_handle_sigusr1(tmp_path):
    """A `drill proxy` handles SIGUSR1 (its one-way emergency stop); a process that would die of it is left alone."""
    handler = ('"$DRILL_PYTHON" -c "import signal, socket, time, os; '
               "signal.signal(signal.SIGUSR1, lambda *a: open('stopped', 'w').close()); "
               "s = socket.socket(); s.bind(('127.0.0.1', int(os.environ['PORT']))); s.listen(); time.sleep(600)\"")
    ports = [free_port(), free_port()]
    chain = ProcessChain((proc("proxy", ports[0], command=handler), proc("service", ports[1])), tmp_path)
    workdir = tmp_path / "t"
    chain.start("naive", 1, workdir)
    try:
        assert chain.signal_handlers() == ["proxy"]
        deadline = time.monotonic() + 5
        while not (workdir / "stopped").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (workdir / "stopped").exists() and chain.exited() == []  # both alive: the service was not signalled
    finally:
        chain.stop()
