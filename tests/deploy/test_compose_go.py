"""The compose stack with its ledger in Go behind `drill proxy` (compose/ledger-go.yml), drilled by
compose/stack-go.yaml, without the engine (tests/deploy/compose_local.py: the Go ledger is built from
compose/ledger-go/ with Debian's Go and grpc-go and run as its image would run it).

One live run: a call through the gateway ends at the Go server (its reply names it), then `drill run
compose/stack-go.yaml` as documented, with only what needs the engine replaced (as in test_compose_local).
Asserted: the switch recreates the Python hops but neither the proxy nor the Go server; each configuration's
trial has calls at every hop, the ledger's read from the proxy's /metrics through Prometheus; the proxy
audited only predicted ids and injected at least one (a subset: on a starved box the chain may shed a
tagged call before it reaches the ledger, never another id).
"""

from __future__ import annotations

import json
import pathlib
import socket
import time

import grpc
import pytest
import yaml

from harness.demo.proto import drill_pb2, drill_pb2_grpc
from tests.conftest import ROOT
from tests.deploy import compose_switch
from tests.deploy.compose_local import ComposeLocal, run_stack_file

FILES = [ROOT / "compose" / "docker-compose.yml", ROOT / "compose" / "ledger-go.yml"]
HOPS = ["gateway", "order", "account", "ledger"]


@pytest.mark.slow
def test_drill_run_on_the_go_ledger_behind_the_proxy(tmp_path) -> None:
    state = tmp_path / "compose"
    state.mkdir()
    files = [arg for f in FILES for arg in ("--file", str(f))]
    assert compose_switch.main(["--state", str(state), *files, "up", "gateway", "prometheus"]) == 0
    try:
        stack = ComposeLocal.load(state)
        assert stack.planned == ["ledger-go", *reversed(HOPS), "prometheus"]
        go = stack.containers["ledger-go"][0]
        stack.wait_healthy("gateway", time.monotonic() + 60)  # `up` returns once started, as `up -d` does
        assert pathlib.Path(f"/proc/{go.pid}/exe").resolve().name == "ledger-go"  # the Go program itself

        # A call through the gateway crosses the chain to the Go server: the proxy relays its reply unchanged.
        with grpc.insecure_channel(f"{stack.address('gateway')}:50051") as channel:
            reply = drill_pb2_grpc.DemoStub(channel).Call(drill_pb2.CallRequest(payload="go"), timeout=5)
        assert list(reply.path) == HOPS and reply.payload == "go"
        assert reply.served_by == f"ledger@{socket.gethostname()}", reply.served_by  # as the Go server names itself

        before = {c.service: c.pid for cs in stack.containers.values() for c in cs}
        go_plan = yaml.safe_load((ROOT / "compose" / "stack-go.yaml").read_text())
        for config in go_plan["stack"]["configs"]:  # its switches keep the Go ledger (replaced here, as the engine)
            assert "-f compose/ledger-go.yml" in config["switch"], config["switch"]
        phases = {"warmup": 2, "fault": 3, "recovery": 3}
        proc = run_stack_file(stack, ROOT / "compose" / "stack-go.yaml", tmp_path, trials=1, phases=phases)
        assert proc.returncode in (0, 3), proc.stderr[-3000:]
        after = ComposeLocal.load(state)
        pids = {c.service: c.pid for cs in after.containers.values() for c in cs}
        assert pids["ledger"] == before["ledger"] and pids["ledger-go"] == before["ledger-go"]
        assert all(pids[h] != before[h] for h in ("gateway", "order", "account")), (before, pids)
    finally:
        compose_switch.main(["--state", str(state), "down"])
    r = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(r["configs"]) == {"naive", "resilient"} and r["hops"] == HOPS
    for name, c in r["configs"].items():
        (t,) = c["trials"]
        assert all(t["amplification_by_hop"][h] for h in HOPS), (name, t["amplification_by_hop"])
        h = t["hits"]
        assert h["expected"] > 0 and 0 < h["observed"] <= h["expected"], (name, h)
        assert h["observed_subset_of_expected"] is True, (name, h)

