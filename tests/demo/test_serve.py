"""`drill serve` as users run it: a subprocess with health, reflection, metrics and the fault switch."""

from __future__ import annotations

import asyncio
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

from harness.core.environ import environ_now
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import SyncDrillClientInterceptor, Tagging
from tests.conftest import ROOT


@pytest.fixture
def served(tmp_path):
    ready = tmp_path / "ready.json"
    env = {**environ_now(), "PYTHONPATH": str(ROOT), "DRILL_FAULT_ENABLED": "1", "DRILL_FAULT_SEED": "3"}
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


# --- the in-flight limit (--max-in-flight) ------------------------------------------------------------------------
def _serve(tmp_path, *args: str, env: dict | None = None):
    """`drill serve ARGS` as a process; (process, ready file's JSON) once it serves."""
    ready = tmp_path / "limit.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "serve", "--port", "0", "--metrics-port", "-1", "--service", "ledger",
         "--ready-file", str(ready), *args],
        env={**environ_now(), "PYTHONPATH": str(ROOT), **(env or {})}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "drill serve did not become ready"
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())


def test_serve_past_its_in_flight_limit_refuses_at_once_answers_health_and_admits_again(tmp_path):
    """Two `Exchange` streams hold the two places (each answered its first message and stays open); a `Call` is
    refused with the limit in its description, within its deadline; a health check still says SERVING (a probe
    is never refused for load); once the streams end, calls are admitted again."""
    from grpc import aio

    proc, info = _serve(tmp_path, "--max-in-flight", "2")

    async def main():
        async with aio.insecure_channel(f"127.0.0.1:{info['port']}") as ch:
            stub = drill_pb2_grpc.DemoStub(ch)
            streams = [stub.Exchange(timeout=60) for _ in range(2)]
            for s in streams:
                await s.write(drill_pb2.CallRequest(payload="hold"))
                assert (await s.read()).payload == "hold"  # in flight at the server
            try:
                await stub.Call(drill_pb2.CallRequest(), timeout=10)  # waiting would time out: the streams stay
                refused = None
            except aio.AioRpcError as err:
                refused = (err.code(), err.details())
            health = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
            for s in streams:
                await s.done_writing()
                assert await s.read() is aio.EOF
            for _ in range(500):  # the streams' handlers end as their ends arrive (ms)
                try:
                    return refused, health.status, (await stub.Call(drill_pb2.CallRequest(), timeout=10)).served_by
                except aio.AioRpcError as err:
                    assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, err
                    await asyncio.sleep(0.01)

    try:
        refused, health, served_by = asyncio.run(main())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    assert refused == (grpc.StatusCode.RESOURCE_EXHAUSTED, "drill: in-flight limit 2 reached")
    assert health == health_pb2.HealthCheckResponse.SERVING and served_by
    assert "at most 2 in flight, backlog 320" in proc.stderr.read().decode()  # 64 handlers + 256 queued


def _limit(argv: list[str], env: dict[str, str] | None = None) -> int:
    import argparse

    from harness.demo import serve

    p = argparse.ArgumentParser()
    serve.add_arguments(p)
    args = p.parse_args(argv)
    with pytest.MonkeyPatch.context() as mp:  # put back as it was: later processes of this worker inherit it
        mp.delenv("DRILL_MAX_IN_FLIGHT", raising=False)
        for k, v in (env or {}).items():
            mp.setenv(k, v)
        return serve.settings_from_args(args, "serve", serve.in_flight_default(args)).max_in_flight


def test_serve_limit_defaults_above_the_hops_own_capacity_and_takes_the_flag_over_the_environment():
    """1000 by default, raised to --concurrency + --queue + DRILL_FAULT_MAX_ACTIVE when that is more (the hop's
    own capacity, which a drill measures, sheds first); DRILL_MAX_IN_FLIGHT over the default, the flag over it.
    The core's backlog likewise: 32, or the hop's handlers and queue when more."""
    import argparse

    from harness.demo import serve

    assert _limit([]) == 1000
    assert _limit(["--concurrency", "3000", "--queue", "5000"]) == 3000 + 5000 + 100
    assert _limit(["--concurrency", "3000", "--queue", "5000"], {"DRILL_FAULT_MAX_ACTIVE": "7"}) == 8007
    assert _limit([], {"DRILL_MAX_IN_FLIGHT": "40"}) == 40
    assert _limit(["--max-in-flight", "9"], {"DRILL_MAX_IN_FLIGHT": "40"}) == 9
    p = argparse.ArgumentParser()
    serve.add_arguments(p)
    assert serve.backlog_default(p.parse_args([])) == 64 + 256
    assert serve.backlog_default(p.parse_args(["--concurrency", "1", "--queue", "8"])) == 32


@pytest.mark.parametrize("args, env, says", [
    (("--max-in-flight", "0"), {}, "argument --max-in-flight: calls 1-10000, got '0'"),
    (("--max-in-flight", "10001"), {}, "argument --max-in-flight: calls 1-10000, got '10001'"),
    (("--max-backlog", "-1"), {}, "argument --max-backlog: calls 1-10000, got '-1'"),
    ((), {"DRILL_MAX_IN_FLIGHT": "0"}, "serve: DRILL_MAX_IN_FLIGHT=0 (no limit) is for a library's own server"),
])  # fmt: skip
def test_serve_bad_limits_are_one_line_exit_2(args, env, says):
    from tests.conftest import drill_inprocess

    proc = drill_inprocess("serve", "--port", "0", "--metrics-port", "0", *args, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("drill: ") and says in proc.stderr, proc.stderr
