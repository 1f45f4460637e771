"""`drill serve` as users run it: a subprocess with health, reflection, metrics and the fault switch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import SyncDrillClientInterceptor, Tagging
from tests.conftest import ROOT


@pytest.fixture
def served(tmp_path):
    ready = tmp_path / "ready.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DRILL_FAULT_ENABLED": "1", "DRILL_FAULT_SEED": "3"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "serve", "--port", "0", "--metrics-port", "-1", "--service", "ledger",
         "--ready-file", str(ready)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() or not ready.read_text().strip():
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "drill serve did not become ready"
            time.sleep(0.05)
        time.sleep(0.05)
        yield json.loads(ready.read_text())
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_serve_answers_health_reflection_and_metrics_and_injects_with_the_switch_on(served):
    target = f"127.0.0.1:{served['port']}"
    with grpc.insecure_channel(target) as ch:
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        refl = reflection_pb2_grpc.ServerReflectionStub(ch)
        (resp,) = list(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
        names = {s.name for s in resp.list_services_response.service}
        assert {"drill.v1.Demo", "grpc.health.v1.Health"} <= names
        assert drill_pb2_grpc.DemoStub(ch).Call(drill_pb2.CallRequest(), timeout=5).served_by
        tagged = drill_pb2_grpc.DemoStub(
            grpc.intercept_channel(ch, SyncDrillClientInterceptor(Tagging("tenant-drill", "abort:DATA_LOSS")))
        )
        with pytest.raises(grpc.RpcError) as info:
            tagged.Call(drill_pb2.CallRequest(), timeout=5)
        assert info.value.code() is grpc.StatusCode.DATA_LOSS
    body = urllib.request.urlopen(f"http://127.0.0.1:{served['metrics_port']}/metrics", timeout=5).read().decode()
    assert 'drill_fault_hits_total{grpc_method="drill.v1.Demo/Call",mode="abort",service="ledger"} 1.0' in body
    assert "process_open_fds" in body
    assert f'drill_tcp_connections{{port="{served["port"]}",state="LISTEN"}}' in body


def test_serve_with_faults_on_under_the_default_name_says_to_pass_service_and_stops_on_sigterm(tmp_path):
    """The warning names `drill serve`'s own option (`--service`), not the library's environment variable; SIGTERM
    stops it with exit 0 (the shared serve-until-signal path)."""
    ready = tmp_path / "ready.json"
    env = {k: v for k, v in os.environ.items() if k != "DRILL_SERVICE"}
    env.update(PYTHONPATH=str(ROOT), DRILL_FAULT_ENABLED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "serve", "--port", "0", "--metrics-port", "0", "--ready-file",
         str(ready)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "drill serve did not become ready"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read().decode()
    assert code == 0, err
    assert "faults are ON but drill serve calls itself 'drill' (the default)" in err and \
        "pass --service NAME" in err, err  # fmt: skip
    assert "DRILL_SERVICE" not in err, err
