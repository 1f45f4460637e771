"""A running stack: `--dry-run` on the shipped stack files sends nothing, and a `prometheus` guard stops a drill
through the stack's emergency stop command.

The stack is the 4-hop demo chain as separate processes (harness/testing/external_chain.py: each hop on its
own loopback address with a deployment's fixed ports), watched by a Prometheus that labels every hop's target
as both shipped stack files select it: `compose_service` (compose/stack.yaml) and `namespace`/`service`
(deploy/k8s/stack.yaml). Each stack file runs as written, with only what this machine cannot have replaced:
its edge address and Prometheus URL (a published port and a port-forward there). Its switch and audit
commands (docker compose, kubectl) stay: a dry run must not run them, and they would fail here if it did.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from harness.core.environ import environ_now
from harness.procs.prometheus import LocalPrometheus
from harness.procs.spawn import start_serve
from tests.conftest import ROOT, drill_inprocess, side_by_side

#: every test starts the module's background scenario (`fresh_stack`), so it runs while they do
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fresh_stack")]

HOPS = ("gateway", "order", "account", "ledger")
#: a loopback block of this run's own (fixed ports per hop, as a deployment has): concurrent runs stay apart
NET = f"127.{random.randint(80, 250)}.{random.randint(0, 255)}"


def _counters(i: int) -> dict[str, float]:
    """Hop i's own count of the calls it served and the faults it injected, and its injection switch."""
    with urllib.request.urlopen(f"http://{NET}.{i + 1}:9464/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {"drill_server_calls_total": 0.0, "drill_fault_hits_total": 0.0, "drill_fault_switch": 0.0}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in out:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("guard-stack")
    chain = tmp / "chain"
    env = environ_now(PYTHONPATH=str(ROOT))
    chain_cmd = [sys.executable, "-m", "harness.testing.external_chain"]
    up = subprocess.run([*chain_cmd, "up", "naive", "--dir", str(chain), "--net", NET], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=90)  # fmt: skip
    prom = LocalPrometheus(tmp / "prometheus")
    try:
        assert up.returncode == 0, up.stderr
        prom.start()
        groups = []
        for i, hop in enumerate(HOPS):
            target = [f"{NET}.{i + 1}:9464"]
            groups.append({"targets": target, "labels": {"compose_service": hop}})
            groups.append({"targets": target, "labels": {"namespace": "drill", "service": hop}})
        prom.targets_file.write_text(json.dumps(groups))
        prom.wait_for('count(up{compose_service=~".+"} == 1) + count(up{namespace="drill"} == 1)',
                      lambda v: v == 2 * len(HOPS), timeout_s=30)  # fmt: skip
        pids = json.loads((chain / "pids.json").read_text())
        yield {"tmp": tmp, "chain": chain, "prometheus": prom.url, "pids": pids}
    finally:
        prom.stop()
        subprocess.run([*chain_cmd, "down", "--dir", str(chain)], cwd=ROOT, env=env, timeout=60)


def _as_here(path: str, stack: dict, name: str) -> str:
    """The shipped stack file with its edge and Prometheus where this machine has them; nothing else changed."""
    plan = yaml.safe_load((ROOT / path).read_text())
    plan["stack"]["edge"]["address"] = f"{NET}.1:50051"
    plan["stack"]["prometheus"] = stack["prometheus"]
    out = stack["tmp"] / name
    out.write_text(yaml.safe_dump(plan))
    return str(out)


@pytest.mark.parametrize("path", ["compose/stack.yaml", "deploy/k8s/stack.yaml"])
def test_a_dry_run_checks_the_stack_and_sends_no_fault(stack, path):
    plan_path = _as_here(path, stack, path.replace("/", "-"))
    plan = yaml.safe_load((ROOT / path).read_text())
    before = [_counters(i) for i in range(len(HOPS))]
    out = stack["tmp"] / f"out-{path.replace('/', '-')}"
    dry = drill_inprocess("run", plan_path, "--out", str(out), "--dry-run")
    after = [_counters(i) for i in range(len(HOPS))]
    assert dry.returncode == 0, dry.stderr
    # every hop's own counters: the reach probe's 3 calls at ratio 0 served by each hop, no fault injected
    for b, a in zip(before, after, strict=True):
        assert a == {**b, "drill_server_calls_total": b["drill_server_calls_total"] + 3}, (before, after)
    assert not out.exists()
    text = dry.stdout
    checks = plan["stack"]["configs"][0]["ready"]["checks"] if "ready" in plan["stack"]["configs"][0] else 3
    assert f"ok  edge {NET}.1:50051: passes its gRPC health check {checks} times in a row" in text
    assert "ok  edge method /drill.v1.Demo/Call and its request resolve by server reflection" in text
    for hop in plan["stack"]["hops"]:
        assert f"ok  hop {hop['name']}: {hop['selector']}: 1 target in {stack['prometheus']}, 1 up" in text, text
    for config in plan["stack"]["configs"]:
        assert f"--  switch to {config['name']} (not run): {config['switch']}" in text
        assert f"  {config['name']}: 400 of 400 tagged ids (digest " in text  # 20 drill calls/s × 20 s of fault
    trials = len(plan["stack"]["configs"]) * plan["trials"]
    assert "duration  at least " in text and f"{trials} trials × " in text


def test_a_dry_run_fails_as_a_run_would_when_the_stack_is_not_there(stack, tmp_path):
    plan = yaml.safe_load((ROOT / "compose/stack.yaml").read_text())
    plan["stack"]["prometheus"] = stack["prometheus"]
    plan["stack"]["hops"][3]["selector"] = '{compose_service="ledgr"}'
    plan["stack"]["edge"]["address"] = f"{NET}.1:50051"
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(plan))
    dry = drill_inprocess("run", str(path), "--dry-run")
    # it waits one discovery refresh and one scrape first (file discovery is notified, the scrape interval 1 s)
    assert dry.returncode == 1 and dry.stderr.strip().splitlines() == [
        f'drill: selector {{compose_service="ledgr"}} names no target {stack["prometheus"]} scrapes '
        '(up{compose_service="ledgr"} is empty after 2 s)'
    ], dry.stderr
    assert (f'hop ledger: waiting for {stack["prometheus"]} to scrape {{compose_service="ledgr"}} (at most 2 s: one '
            "service-discovery refresh and one scrape, from its config)") in dry.stdout, dry.stdout  # fmt: skip
    plan["stack"]["edge"]["address"] = f"{NET}.9:50051"  # nothing listens there
    for config in plan["stack"]["configs"]:
        config["ready"] = {"checks": 1, "timeout_s": 1, "interval_s": 0.2}
    path.write_text(yaml.safe_dump(plan))
    dry = drill_inprocess("run", str(path), "--dry-run")
    lines = dry.stderr.strip().splitlines()
    assert dry.returncode == 1 and len(lines) == 1, dry.stderr
    assert lines[0].startswith(f"drill: naive: the edge {NET}.9:50051 did not pass 1 health checks in a row")


def test_a_prometheus_guard_trips_and_the_stacks_emergency_stop_turns_injection_off(stack):
    stop = " && ".join(f"{sys.executable} -m harness.cli stop {pid}" for pid in stack["pids"])
    expr = 'drill_fault_hits_total{compose_service="ledger"} > 0'
    plan = {
        "name": "guarded-stack",
        "seed": 7,
        "stack": {
            "edge": {"address": f"{NET}.1:50051", "method": "drill.v1.Demo/Call", "request": {"payload": "x"}},
            "prometheus": stack["prometheus"],
            "hops": [{"name": h, "metrics": [f"http://{NET}.{i + 1}:9464/metrics"]} for i, h in enumerate(HOPS)],
            "emergency_stop": stop,
        },
        "traffic": {"organic_users": 2, "organic_rate": 10, "drill_users": 1, "drill_rate": 10, "timeout_s": 2.0},
        "fault": {"directive": "abort:UNAVAILABLE", "target": "ledger"},
        "phases": {"warmup": 1, "fault": 4, "recovery": 1},
        "slo": {"max_error_rate": 0.05, "hold_s": 2, "traffic": "organic"},
        "guard": {"stop_when": [{"kind": "prometheus", "name": "ledger-injects", "expr": expr}]},
    }
    path = stack["tmp"] / "guarded.yaml"
    path.write_text(yaml.safe_dump(plan))
    assert all(c["drill_fault_switch"] == 1 for c in (_counters(i) for i in range(len(HOPS))))
    dry = drill_inprocess("run", str(path), "--dry-run")  # hops by /metrics URL, the guard asked once
    assert dry.returncode == 0, dry.stderr
    for i, hop in enumerate(HOPS):
        assert re.search(rf"ok  hop {hop}: http://{re.escape(NET)}\.{i + 1}:9464/metrics answers \(\d+ drill series, "
                         rf"service {hop}, injection on\)", dry.stdout), dry.stdout  # fmt: skip
    assert f"ok  guard ledger-injects: {stack['prometheus']} answers {expr!r} with nothing (quiet now)" in dry.stdout
    assert f"  on a trip: the load stops tagging and cancels its tagged calls in flight; the stack's emergency " \
           f"stop: {stop}" in dry.stdout
    started = time.time()
    proc = drill_inprocess("run", str(path), "--out", str(stack["tmp"] / "guarded"), "--no-live")
    assert proc.returncode == 5, proc.stderr[-3000:]
    (trial,) = json.loads((stack["tmp"] / "guarded" / "results.json").read_text())["configs"]["stack"]["trials"]
    g = trial["guard"]
    assert g["name"] == "ledger-injects" and g["kind"] == "prometheus" and g["value"] > 0, g
    assert g["text"].startswith(f"Prometheus {expr!r} returned 1 series (first value "), g
    # the fault is on from 1 s; Prometheus scrapes each second and is asked each second
    assert 1.0 <= g["tripped_at_s"] <= 5.0 and started < g["at_unix"], g
    assert g["actions"]["services"] == f"emergency stop command ran: {stop} (log: " + str(
        stack["tmp"] / "guarded" / "logs" / "stack" / "emergency-stop.log") + ")"  # fmt: skip
    # every hop's one-way stop tripped: injection off for the life of the process
    assert all(c["drill_fault_switch"] == 0 for c in (_counters(i) for i in range(len(HOPS))))
    assert '"event":"emergency_stop","reason":"signal:SIGUSR1"' in (stack["chain"] / "ledger.log").read_text()


def _a_dry_run_waits_for_a_stack_that_prometheus_has_found_but_not_scraped_yet(tmp_path):
    """Right after `up`, Prometheus knows the hops' targets but has not scraped them once: every selector is
    empty. The dry run says at once that it waits for that first scrape (not "names no target", exit 1, which
    a stack that has just come up would get) and checks the hops once it is in. Here each hop's target is a
    gate that holds every scrape until the dry run says it is waiting (a 20-s scrape interval and timeout keep
    the targets "unknown" until then: a first scrape times out 20 to 40 s after the targets are found, and the dry
    run reaches its hop checks within seconds; with 10 s, a stress run's dry run got there after a first scrape
    had timed out, saw the target down, not pending, and never said it waited), so a dry run that does not wait
    fails before any scrape is answered. Its
    edge is a `drill serve` of its own (the module's chain counts every call the other tests make): it answers the
    health checks, reflection and the reach probe's calls, which the gates count at no hop."""
    import http.server
    import threading

    released = threading.Event()

    class Gate(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server naming
            released.wait(60)
            body = b"drill_fault_switch 1\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    gate = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Gate)
    threading.Thread(target=gate.serve_forever, daemon=True).start()
    prom = LocalPrometheus(tmp_path / "prometheus", scrape_interval="20s")
    edge = start_serve("edge", ["--port", "0", "--metrics-port", "-1", "--service", "gateway"], tmp_path)
    try:
        prom.start()
        address = f"127.0.0.1:{gate.server_address[1]}"
        prom.targets_file.write_text(json.dumps([{"targets": [address], "labels": {"compose_service": hop}}
                                                 for hop in HOPS]))  # fmt: skip
        deadline = time.monotonic() + 30
        while True:  # found, and not one scrape answered: the state a stack that has just come up is in
            with urllib.request.urlopen(f"{prom.url}/api/v1/targets?state=active", timeout=5) as r:
                active = json.load(r)["data"]["activeTargets"]
            if len(active) == len(HOPS):
                assert all(t["health"] == "unknown" for t in active), active
                break
            assert time.monotonic() < deadline, active
            time.sleep(0.2)
        plan = yaml.safe_load((ROOT / "compose/stack.yaml").read_text())
        plan["stack"]["edge"]["address"] = edge.address
        plan["stack"]["prometheus"] = prom.url
        path = tmp_path / "fresh.yaml"
        path.write_text(yaml.safe_dump(plan))
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", str(path), "--dry-run"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "not scraped yet" in line:
                released.set()
        err = proc.stderr.read()
        # the hops' series come from exporters that count no call: the reach probe, last, finds the drill at none
        assert proc.wait(60) == 4, "".join(lines) + err
        assert "the drill does not reach hop gateway" in err and err.count("\n") == 1, err
    finally:
        released.set()
        prom.stop()
        gate.shutdown()
        edge.stop()
    text = "".join(lines)
    assert (f'hop gateway: waiting for {prom.url} to scrape {{compose_service="gateway"}} (at most 30 s: it has 4 '
            "targets it has not scraped yet)") in text, text  # fmt: skip
    for hop in HOPS:
        assert f'ok  hop {hop}: {{compose_service="{hop}"}}: 1 target in {prom.url}, 1 up' in text, text


@pytest.fixture(scope="module")
def fresh_stack(tmp_path_factory):
    """The scenario above (~20 to 45 s: a Prometheus' discovery, a 20-s scrape interval) runs from the module's first
    test on, beside the others: it shares nothing with them (its own Prometheus, gate exporters and edge)."""
    tmp = tmp_path_factory.mktemp("fresh")
    with side_by_side(fresh=lambda: _a_dry_run_waits_for_a_stack_that_prometheus_has_found_but_not_scraped_yet(
            tmp)) as results:  # fmt: skip
        yield results


def test_a_dry_run_waits_for_a_stack_that_prometheus_has_found_but_not_scraped_yet(fresh_stack):
    fresh_stack["fresh"]()
