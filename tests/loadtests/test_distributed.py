"""Distributed mode: a master and two workers run a 6 s drill; both workers' metrics are scraped.

Covers both ways of starting workers: `--processes 2` (forked) and separate
`--master` / `--worker` processes (what compose runs). The master's shape sends
the phase to the workers, so drill users send the directive only in the fault
phase; each worker serves its own /metrics and the master exports `drill_phase`
/ `drill_fault_active` on its own, every one on a port it bound itself and
announced (`--drill-metrics-port 0 --drill-ports-dir`); the master's worker port
is bound the same way (`--master-bind-port 0`) and read from its announcement.

The phases are as short as what is checked allows: a recovery in which the drill users (10 calls/s
each) call again without the directive, and a fault phase several scrapes of the master's timeline
long (the test scrapes every 0.5 s). That the directive is on for one stretch and off after it is
read from the ids the drill users logged, exactly, not from the share of calls that carried it.
"""

from __future__ import annotations

import subprocess

import pytest

from harness.drills.load.locust import read_tagged_ids
from harness.procs.ports import private_loopback
from harness.procs.spawn import start_serve
from tests.conftest import side_by_side
from tests.loadtests.conftest import (
    LOCUST,
    ROOT,
    DrillServer,
    LocustProcess,
    kill_group,
    run_locust,
    total,
    unexpected_tracebacks,
    wait_announced,
)

pytestmark = pytest.mark.slow  # a live run: scheduled first (tests/conftest.py)

DRILL = (
    "--drill-phases", "warmup=1,fault=3,recovery=2",
    "--drill-users", "10",
    "--drill-weights", "organic=1,drill=1",
    "--drill-rate", "10",
    "--drill-directive", "abort:UNAVAILABLE",
    "--drill-ratio", "100",
    "--drill-plan", "dist",
)  # fmt: skip


def _check(run, ids_dir) -> None:
    assert run.rc == 0, run.log[-3000:]
    assert not unexpected_tracebacks(run.log), run.log[-3000:]
    workers = ["worker-0", "worker-1"]
    for port in workers:
        assert port in run.scraped, f"{port} /metrics never answered"
        assert total(run.scraped[port], "drill_client_calls_total") > 0, port
    calls = "drill_client_calls_total"
    drill = sum(total(run.scraped[p], calls, traffic="drill") for p in workers)
    faulted = sum(total(run.scraped[p], calls, traffic="drill", fault_mode="abort") for p in workers)
    organic = sum(total(run.scraped[p], calls, traffic="organic") for p in workers)
    organic_unfaulted = sum(total(run.scraped[p], calls, traffic="organic", fault_mode="none") for p in workers)
    organic_faulted = organic - organic_unfaulted
    assert organic_faulted == 0, organic_faulted
    assert 0 < faulted < drill, (faulted, drill)
    # The directive is on for one stretch of each drill user's calls and off again after it: each user numbers
    # its calls 0, 1, 2 … (ids PLAN-SEED-USER-N-MIX) and logs the ids it sent with the directive, so a user's tagged
    # calls are one run of numbers, the untagged ones before it are exactly the lowest numbers, and the ones
    # after it are the rest of the untagged calls the workers count. Calls after the fault are asserted, not
    # calls before it: on a loaded box Locust may start its users after a short warm-up is over (seen with two
    # CPU hogs), and the state before the fault is the one after it (`PhaseState`: fault off).
    tagged: dict[str, list[int]] = {}
    for rid in read_tagged_ids(ids_dir):
        _, user, n, _mix = rid.rsplit("-", 3)
        tagged.setdefault(user, []).append(int(n))
    assert tagged and all(sorted(ns) == list(range(min(ns), max(ns) + 1)) for ns in tagged.values()), tagged
    before = sum(min(ns) for ns in tagged.values())
    untagged = sum(total(run.scraped[p], calls, traffic="drill", fault_mode="none") for p in workers)
    print(f"\ndrill users {len(tagged)}: {sum(map(len, tagged.values()))} calls with the directive, "
          f"{before} before them, {untagged - before:.0f} after")  # fmt: skip
    assert untagged - before > 0 and faulted == sum(map(len, tagged.values())), (faulted, before, untagged, tagged)
    # The master exports the timeline: the fault phase was seen on, and off again.
    fault_flags = [total(s, "drill_fault_active", plan="dist") for s in run.history["master"]]
    assert 1.0 in fault_flags and 0.0 in fault_flags, fault_flags
    assert any(total(s, "drill_phase", plan="dist", phase="fault") == 1.0 for s in run.history["master"])


def _processes_two_workers_run_the_drill(tmp_path, drill_server):
    ids_dir = tmp_path / "ids"
    run = run_locust(
        tmp_path,
        drill_server.host,
        # the master binds 5557 before its forked workers connect (no port 0): on an address of this process's own,
        # so a compose stack's master on 5557 of its own address, or another run, cannot take it
        "--processes", "2", "--master-host", private_loopback(), "--master-bind-host", private_loopback(),
        *DRILL, "--drill-seed", "5",
        "--drill-ids-dir", str(ids_dir), "--drill-weights", "organic=0,drill=1",  # drill users on both workers
        profile="abort-drill",
        metrics=True,
        timeout=45,
    )  # fmt: skip
    _check(run, ids_dir)
    # each worker logs the ids its drill users sent with the directive: one file per process,
    # ids of the form dist-5-drillK.wI-N, unique across the two workers
    tagged = read_tagged_ids(ids_dir)
    assert len(list(ids_dir.glob("ids-*.txt"))) == 2
    assert len(tagged) == len(set(tagged)) > 20
    assert {i.split("-")[2].split(".")[1] for i in tagged} == {"w0", "w1"}
    assert all(i.startswith("dist-5-drill") for i in tagged)


def _master_and_two_worker_processes_run_the_drill(tmp_path, drill_server):
    workers, logs = [], []
    ids_dir = tmp_path / "ids"  # the master passes its drill options on to the workers
    master = LocustProcess(
        tmp_path,
        drill_server.host,
        "--master", "--expect-workers", "2", "--expect-workers-max-wait", "30", "--master-bind-host", "127.0.0.1",
        "--master-bind-port", "0", *DRILL, "--drill-ids-dir", str(ids_dir),
        profile="abort-drill",
        metrics=True,
        tag="master",
    )  # fmt: skip
    try:
        master_port = wait_announced(master.ports_dir, "master", master.proc)["master_port"]
        for i in range(2):
            log = open(tmp_path / f"worker{i}.log", "w")
            logs.append(log)
            workers.append(
                subprocess.Popen(
                    [LOCUST, "-f", "loadtests/locustfile.py", "--worker", "--master-host", "127.0.0.1"]
                    + ["--master-port", str(master_port)]
                    + ["--drill-metrics-port", "0", "--drill-ports-dir", str(master.ports_dir)],
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        run = master.finish(timeout=45)
        for w in workers:
            try:
                w.wait(timeout=10)  # workers quit with the master
            except subprocess.TimeoutExpired:
                pytest.fail("worker did not quit with the master")
    finally:
        if master.proc.poll() is None:
            master.kill()
        for w in workers:
            kill_group(w)
        for log in logs:
            log.close()
    _check(run, ids_dir)


def _with_a_server_of_its_own(scenario, tmp_path) -> None:
    """`scenario(tmp_path, server)` with a `drill serve` of its own (the loadtests' `drill_server`, made here)."""
    args = ["--port", "0", "--metrics-port", "-1", "--enable-faults", "--seed", "7", "--service", "demo"]
    server = start_serve("demo", args, tmp_path)
    try:
        scenario(tmp_path, DrillServer(server))
    finally:
        server.stop()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The two ways of starting workers, side by side: each its own server, master, workers, folders and ports
    (the forked one's master binds 5557 on an address of this process's own, the other port 0 on 127.0.0.1).
    Each test is its scenario above, run whole in a thread: its assertions raised here."""
    tmp = {name: tmp_path_factory.mktemp(name) for name in ("processes", "separate")}
    with side_by_side(
        processes=lambda: _with_a_server_of_its_own(_processes_two_workers_run_the_drill, tmp["processes"]),
        separate=lambda: _with_a_server_of_its_own(_master_and_two_worker_processes_run_the_drill, tmp["separate"]),
    ) as results:
        yield results


def test_processes_two_workers_run_the_drill(runs):
    runs["processes"]()


def test_master_and_two_worker_processes_run_the_drill(runs):
    runs["separate"]()
