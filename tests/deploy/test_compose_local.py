"""The compose stack runs as documented, without the engine (tests/deploy/compose_local.py).

One short live run of compose/docker-compose.yml as local processes: the chain, Prometheus with
the compose config's jobs and rules, and Locust master + 2 workers running the default profile
(retry-storm, phases shortened through LOCUST_DRILL_PHASES as a user would). Asserted: a call
through the gateway crosses every hop; every process listens on its own address and only on
ports the compose file declares; every scrape target is up; the drill's series reach Prometheus
(phase timeline, both workers' client calls, the ledger's injected faults, the recorded hop
attempts); the master exits 0 once its phases end; Grafana's datasource URL reaches Prometheus.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request

import grpc
import pytest
import yaml

from harness.demo.proto import drill_pb2, drill_pb2_grpc
from tests.conftest import ROOT, side_by_side
from tests.deploy import compose_switch
from tests.deploy.compose_local import ComposeLocal, declared_ports, listening_sockets, run_stack_file

COMPOSE_FILE = ROOT / "compose" / "docker-compose.yml"
HOPS = ["gateway", "order", "account", "ledger"]
WORKERS = 2
#: Short phases: the live part of this test must stay within ~40 s on a busy 2-core machine.
PHASES = "warmup=2,fault=3,recovery=3"


def _prom(stack: ComposeLocal, path: str, **params: str) -> dict:
    url = f"http://{stack.address('prometheus')}:9090{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]


def _query(stack: ComposeLocal, expr: str) -> dict[str, float]:
    """Instant query -> {label set as text: value}."""
    result = _prom(stack, "/api/v1/query", query=expr)["result"]
    return {json.dumps(r["metric"], sort_keys=True): float(r["value"][1]) for r in result}


def _until(what: str, check, timeout_s: float, stack: ComposeLocal, *, all_running: bool = True) -> None:
    """Poll `check` (True, or a description of what is still missing) until True, bounded in time."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last is True:
            return
        if all_running and stack.exited():
            pytest.fail(f"{what}: {stack.exited()} exited early; last check: {last}")
        time.sleep(0.25)
    pytest.fail(f"{what} not reached in {timeout_s} s; last check: {last}")


def _compose_stack_runs_as_declared(tmp_path) -> None:
    env = {"LOCUST_WORKERS": str(WORKERS), "LOCUST_DRILL_PHASES": PHASES}
    stack = ComposeLocal(COMPOSE_FILE, tmp_path, ["locust-master", "locust-worker"], env)
    assert stack.planned == [*reversed(HOPS), "prometheus", "locust-master", "locust-worker"]
    assert len(stack.addresses("locust-worker")) == WORKERS  # deploy.replicas from LOCUST_WORKERS
    with stack:
        stack.up(timeout_s=60)

        # A call through the gateway crosses the chain, as compose DNS would route it.
        with grpc.insecure_channel(f"{stack.address('gateway')}:50051") as channel:
            reply = drill_pb2_grpc.DemoStub(channel).Call(drill_pb2.CallRequest(payload="compose"), timeout=5)
        assert list(reply.path) == HOPS

        # Every process listens on its own address, only on declared ports; long-running ones on all.
        def sockets() -> list[str]:
            wrong = []
            for name, containers in stack.containers.items():
                want = declared_ports(stack.services[name])
                for c in containers:
                    got = listening_sockets(c.pid)
                    if {addr for addr, _ in got} - {c.address} or {port for _, port in got} - want:
                        return [f"{c.name} listens on {sorted(got)}, declared {sorted(want)} at {c.address}"]
                    serving = {port for _, port in got}
                    needed = want - {8089}  # the web UI is off while headless
                    if serving != needed:
                        wrong.append(f"{c.name}: {sorted(serving)} of {sorted(needed)}")
            return wrong or True

        _until("declared ports", sockets, 20, stack)

        # Every scrape target of the compose config is up: hops, Prometheus, master, both workers.
        def targets():
            active = _prom(stack, "/api/v1/targets", state="active")["activeTargets"]
            by_job: dict[str, list[str]] = {}
            for t in active:
                by_job.setdefault(t["labels"]["job"], []).append(t["health"])
            want = {"drill-services": len(HOPS), "prometheus": 1, "locust-master": 1, "locust-workers": WORKERS}
            ok = {job: len(h) for job, h in by_job.items() if all(x == "up" for x in h)}
            return ok == want or f"{by_job}"

        _until("every scrape target up", targets, 20, stack)

        # The profile stops by itself; the workers quit with the master.
        assert stack.wait_exit("locust-master", timeout_s=30) == [0], stack.containers["locust-master"][0].log_tail()
        assert stack.wait_exit("locust-worker", timeout_s=15) == [0] * WORKERS
        master_log = stack.containers["locust-master"][0].log.read_text()
        assert "Traceback" not in master_log, master_log[-3000:]

        # The drill's series reached Prometheus through the compose jobs and rules (polled: the last
        # scrapes and rule evaluations may still be on their way).
        def series():
            fault = _query(stack, 'max_over_time(drill_fault_active{job="locust-master", plan="retry-storm"}[2m])')
            workers = _query(
                stack, 'count by (instance, config) (max_over_time(drill_client_calls_total{service="locust"}[2m]))'
            )
            hits = _query(stack, 'sum by (service) (drill_fault_hits_total{mode="abort"})')
            attempts = _query(stack, "count by (service) (max_over_time(drill:hop_attempts:rate3s[2m]))")
            checks = {
                "the master's fault phase was on": list(fault.values()) == [1.0],
                "both workers' client calls, config naive": len(workers) == WORKERS
                and all('"config": "naive"' in k for k in workers),
                "faults injected at the ledger only": set(hits) == {json.dumps({"service": "ledger"})}
                and min(hits.values()) > 0,
                "hop attempts recorded for every hop": {json.loads(k)["service"] for k in attempts} >= set(HOPS),
            }
            failed = [k for k, ok in checks.items() if not ok]
            return not failed or f"{failed}: {fault} {workers} {hits} {attempts}"

        _until("drill series in Prometheus", series, 10, stack, all_running=False)

        # Grafana's provisioned datasource URL, as the grafana container resolves it, reaches Prometheus.
        ds = yaml.safe_load((ROOT / "compose/grafana/provisioning/datasources/prometheus.yaml").read_text())
        url = next(d["url"] for d in ds["datasources"] if d["type"] == "prometheus")
        with urllib.request.urlopen(stack.rewrite(url, "127.0.0.1") + "/api/v1/status/buildinfo", timeout=5) as r:
            assert r.status == 200


def _drill_run_on_compose_stack_yaml_compares_both_configurations(tmp_path) -> None:
    """`drill run compose/stack.yaml` against the compose stack, as documented, with only what needs the
    engine replaced: the published ports by the containers' own addresses, and `docker compose up -d
    --wait` / `docker compose logs` by tests/deploy/compose_switch.py and the ledger's log file.

    The switch recreates exactly the hops whose command names the configuration (the ledger, a leaf,
    keeps its process); every scrape target is up; each configuration's trial has calls at every hop
    read from Prometheus by the stack's selectors; the ledger audited only predicted ids (its capacity is
    the retry-storm bound, so a tagged call may be shed before the fault sees it — on a starved box all of
    them may be: a subset, never another id)."""
    state = tmp_path / "compose"
    state.mkdir()
    assert compose_switch.main(["--state", str(state), "up", "gateway", "prometheus"]) == 0
    try:
        stack = ComposeLocal.load(state)
        before = {c.service: c.pid for cs in stack.containers.values() for c in cs}
        phases = {"warmup": 2, "fault": 3, "recovery": 3}
        proc = run_stack_file(stack, ROOT / "compose" / "stack.yaml", tmp_path, trials=1, phases=phases)
        assert proc.returncode in (0, 3), proc.stderr[-3000:]
        after = ComposeLocal.load(state)
        pids = {c.service: c.pid for cs in after.containers.values() for c in cs}
        assert pids["ledger"] == before["ledger"] and pids["prometheus"] == before["prometheus"]
        assert all(pids[h] != before[h] for h in ("gateway", "order", "account")), (before, pids)
        targets = _prom(after, "/api/v1/targets")["activeTargets"]
        assert targets and all(t["health"] == "up" for t in targets), [(t["scrapeUrl"], t["health"]) for t in targets]
    finally:
        compose_switch.main(["--state", str(state), "down"])
    r = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(r["configs"]) == {"naive", "resilient"}
    assert r["hops"] == HOPS and r["verdict"]["text"]
    for name, c in r["configs"].items():
        (t,) = c["trials"]
        assert all(t["amplification_by_hop"][h] for h in HOPS), (name, t["amplification_by_hop"])
        h = t["hits"]
        assert h["expected"] > 0 and h["observed"] <= h["expected"] and h["observed_subset_of_expected"] is not False, h


def _ui_mode_master_and_workers_exit_after_the_phases(tmp_path) -> None:
    """`LOCUST_HEADLESS=false` (the web UI): the run starts by itself and the master quits
    LOCUST_AUTOQUIT seconds after the phases, so `up --exit-code-from locust-master` returns. Locust
    applies --autoquit only to a run it started itself (--autostart), and a shape's end in UI mode
    only stops the run: without both flags the master serves its UI forever."""
    env = {"LOCUST_WORKERS": "1", "LOCUST_DRILL_PHASES": "warmup=1,fault=1,recovery=1",
           "LOCUST_HEADLESS": "false", "LOCUST_AUTOQUIT": "1"}  # fmt: skip
    with ComposeLocal(COMPOSE_FILE, tmp_path, ["locust-master", "locust-worker"], env) as stack:
        stack.up(timeout_s=60)
        master = stack.containers["locust-master"][0]
        # the web UI is on: the master listens on the web port as well as the master port
        _until("web UI up", lambda: 8089 in {p for _, p in listening_sockets(master.pid)} or "no 8089", 20, stack)
        # phases 3 s + autoquit 1 s; the rest is margin for a busy box (the master must exit, not hang)
        assert stack.wait_exit("locust-master", timeout_s=60) == [0], master.log_tail()
        assert stack.wait_exit("locust-worker", timeout_s=15) == [0]
        log = master.log.read_text()
        assert "--autoquit time reached" in log and "Traceback" not in log, log[-3000:]


@pytest.fixture(scope="module")
def stacks(tmp_path_factory):
    """The three stacks of this file, side by side: each its own processes on a /24 of 127.0.0.0/8 of its own
    (ComposeLocal picks one at random per stack), its own state and Prometheus. Each test is its stack's
    scenario above, run whole in a thread: its assertions are the scenario's, raised here."""
    tmp = {name: tmp_path_factory.mktemp(name) for name in ("declared", "drill-run", "ui-mode")}
    with side_by_side(**{
        "declared": lambda: _compose_stack_runs_as_declared(tmp["declared"]),
        "drill-run": lambda: _drill_run_on_compose_stack_yaml_compares_both_configurations(tmp["drill-run"]),
        "ui-mode": lambda: _ui_mode_master_and_workers_exit_after_the_phases(tmp["ui-mode"]),
    }) as results:  # fmt: skip
        yield results


@pytest.mark.slow
def test_compose_stack_runs_as_declared(stacks) -> None:
    stacks["declared"]()


@pytest.mark.slow
def test_drill_run_on_compose_stack_yaml_compares_both_configurations(stacks) -> None:
    stacks["drill-run"]()


@pytest.mark.slow
def test_ui_mode_master_and_workers_exit_after_the_phases(stacks) -> None:
    stacks["ui-mode"]()
