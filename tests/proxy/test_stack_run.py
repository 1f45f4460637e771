"""`drill run` on a stack whose one service is written in Go, behind `drill proxy`: the same trial, the hit set
the seed predicts, the same verdict machinery, with not a line of the service changed.

The drill user (2nd of 2 users, offset 1/2 of its 10/s period) sends probe-3-drill0-N-MIX at N/10 + 1/20 s after
the load's first second; those in the fault window [2 s, 5 s) carry the directive, and seed 3 picks the same
ones in the proxy and in this test (`is_hit`).
"""

from __future__ import annotations

import json
import socket

import pytest
import yaml

from harness.core.faults import is_hit
from harness.drills.load.schedule import ids_digest, request_id
from tests.conftest import drill_process, side_by_side
from tests.ports import free_port
from tests.proxy.probe import build, descriptor_set, drill_proxy, go_service

pytestmark = pytest.mark.slow


def _run_behind_a_proxy_started_here(tmp_path):
    """`drill run` on the Go service behind a `drill proxy` started here: the run."""
    binary = build()
    ds = descriptor_set(tmp_path / "probe.pb")
    with go_service(binary, tmp_path) as upstream:
        args = ("--upstream", upstream, "--port", "0", "--metrics-port", "-1", "--service", "probe",
                "--descriptor-set", str(ds))  # fmt: skip
        with drill_proxy(tmp_path, *args, env={"DRILL_FAULT_ENABLED": "1", "DRILL_FAULT_SEED": "3"}) as (_, info):
            plan = {
                "name": "probe", "seed": 3,
                "stack": {
                    "edge": {"address": f"127.0.0.1:{info['port']}", "method": "probe.v1.Probe/Echo",
                             "request": {"id": "organic"}, "descriptor_set": str(ds)},
                    "hops": [{"name": "probe", "metrics": [f"http://127.0.0.1:{info['metrics_port']}/metrics"]}],
                    "audit": {"files": [str(tmp_path / "proxy.log")]},
                    # the edge serves before the run: three health checks 0.2 s apart pass as 1 s apart would
                    "configs": [{"name": "go", "ready": {"checks": 3, "interval_s": 0.2}}],
                },
                "traffic": {"organic_users": 1, "organic_rate": 10, "drill_users": 1, "drill_rate": 10,
                            "timeout_s": 2},
                "fault": {"directive": "abort:UNAVAILABLE", "ratio": 50, "target": "probe"},
                "phases": {"warmup": 2, "fault": 3, "recovery": 3},
                "slo": {"max_error_rate": 0.05, "hold_s": 1, "traffic": "drill"},
            }  # fmt: skip
            (tmp_path / "probe.yaml").write_text(json.dumps(plan))
            return drill_process("run", str(tmp_path / "probe.yaml"), "--out", str(tmp_path / "out"), "--no-live",
                                 "--trials", "1")  # fmt: skip


def _run_with_a_stack_proxy(tmp_path):
    """`stack.proxy` in front of the Go service: a dry run with a directive the method cannot take, a dry run, and
    the run (each process), and the proxy's port."""
    binary = build()
    descriptor_set(tmp_path / "probe.pb")
    port, metrics_port = free_port(), free_port()
    with go_service(binary, tmp_path) as upstream:
        plan = {
            "name": "probe", "seed": 3,
            "stack": {
                "proxy": {"upstream": upstream, "service": "probe", "port": port, "metrics_port": metrics_port,
                          "descriptor_set": "probe.pb"},
                "edge": {"method": "probe.v1.Probe/Echo", "request": {"id": "organic"}, "descriptor_set": "probe.pb"},
                "hops": [{"name": "probe"}],
                # the runner's proxy is up before its health checks (three, 0.2 s apart as 1 s apart)
                "configs": [{"name": "go", "ready": {"checks": 3, "interval_s": 0.2}}],
            },
            "traffic": {"organic_users": 1, "organic_rate": 10, "drill_users": 1, "drill_rate": 10, "timeout_s": 2},
            "fault": {"directive": "abort:UNAVAILABLE@after=1", "ratio": 50, "target": "probe"},
            "phases": {"warmup": 2, "fault": 3, "recovery": 3},
            "slo": {"max_error_rate": 0.05, "hold_s": 1, "traffic": "drill"},
        }  # fmt: skip
        (tmp_path / "probe.yaml").write_text(yaml.safe_dump(plan))
        wrong = drill_process("run", str(tmp_path / "probe.yaml"), "--dry-run")
        plan["fault"]["directive"] = "abort:UNAVAILABLE"
        (tmp_path / "probe.yaml").write_text(yaml.safe_dump(plan))
        dry = drill_process("run", str(tmp_path / "probe.yaml"), "--dry-run")
        run = drill_process("run", str(tmp_path / "probe.yaml"), "--out", str(tmp_path / "out"), "--no-live",
                            "--trials", "1")  # fmt: skip
    return {"wrong": wrong, "dry": dry, "run": run, "port": port, "upstream": upstream}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The file's two drills on the Go service, side by side (each its own service, proxy and ports)."""
    tmp = {name: tmp_path_factory.mktemp(name) for name in ("proxy-here", "stack-proxy")}
    build()  # once, before the threads (a lock serialises it anyway)
    with side_by_side(**{
        "proxy-here": lambda: (_run_behind_a_proxy_started_here(tmp["proxy-here"]), tmp["proxy-here"]),
        "stack-proxy": lambda: (_run_with_a_stack_proxy(tmp["stack-proxy"]), tmp["stack-proxy"]),
    }) as results:  # fmt: skip
        yield results


def test_drill_run_on_a_go_service_behind_the_proxy_hits_what_the_seed_predicts(runs):
    run, tmp_path = runs["proxy-here"]()
    assert run.returncode == 0, run.stderr[-3000:]
    trial = json.loads((tmp_path / "out" / "results.json").read_text())["configs"]["go"]["trials"][0]
    tagged = [request_id("probe", 3, "go", 1, "drill0", n) for n in range(80) if 2 <= n / 10 + 1 / 20 < 5]
    hits = [i for i in tagged if is_hit(3, i, "abort:UNAVAILABLE", 50)]
    h = trial["hits"]
    assert (h["expected"], h["expected_digest"]) == (len(hits), ids_digest(hits)), h
    assert (h["observed"], h["observed_digest"]) == (len(hits), ids_digest(hits)), h  # the proxy's audit lines
    assert h["marked"] == len(hits), h  # the proxy is the edge: every hit came back marked
    assert trial["breached"] is True  # 50 % of the drill traffic failed in the fault: past the 5 % SLO


def test_a_stack_proxy_is_started_by_the_runner_for_each_trial_and_its_dry_run_checks_it(runs):
    """`stack.proxy`: the user names the service and two ports; the runner starts `drill proxy` per trial
    (injection on, the plan's seed), the edge and the hop's /metrics are the proxy's, its audit lines the hits.
    The dry run starts it for its checks too, reads its /metrics (service label, switch) and stops it."""
    got, tmp_path = runs["stack-proxy"]()
    wrong, dry, run, port, upstream = got["wrong"], got["dry"], got["run"], got["port"], got["upstream"]
    # Echo is unary: @after is refused before anything starts, as for a service with our interceptors
    assert wrong.returncode == 2 and "@after" in wrong.stderr and "unary" in wrong.stderr, wrong.stderr
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert dry.stdout.splitlines()[0] == (
        "drill run probe --dry-run: nothing was started (but the stack's drill proxy, for the checks), switched or "
        "sent, but the reach probe (calls at ratio 0: no hop faults them)"
    ), dry.stdout
    assert f"starting drill proxy 127.0.0.1:{port} -> {upstream} (service probe)" in dry.stdout, dry.stdout
    assert "service probe, injection on" in dry.stdout, dry.stdout  # read from the proxy's /metrics
    assert run.returncode == 0, run.stderr[-3000:]
    with socket.socket() as s:  # the proxy stopped with its trial: its port is free again
        s.bind(("127.0.0.1", port))
    trial = json.loads((tmp_path / "out" / "results.json").read_text())["configs"]["go"]["trials"][0]
    tagged = [request_id("probe", 3, "go", 1, "drill0", n) for n in range(80) if 2 <= n / 10 + 1 / 20 < 5]
    hits = [i for i in tagged if is_hit(3, i, "abort:UNAVAILABLE", 50)]
    h = trial["hits"]
    assert (h["expected"], h["expected_digest"]) == (len(hits), ids_digest(hits)), h
    assert (h["observed"], h["observed_digest"]) == (len(hits), ids_digest(hits)), h  # the proxy's own log
    assert h["marked"] == len(hits), h
    assert trial["breached"] is True
