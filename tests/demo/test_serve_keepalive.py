"""`drill serve --config NAME` applies the configuration's keepalive permit policy to its own server, leaf or not.

A caller running a configuration with `keepalive: {time: 1s, permitWithoutCalls: true}` PINGs its server every
second whether or not a call is open. gRPC servers answer that, by default, with GOAWAY ENHANCE_YOUR_CALM
"too_many_pings" (gRFC A8's ping strikes): with no call open a PING is allowed only every 2 h unless
`grpc.keepalive_permit_without_calls`, and with no data every 5 min (`min_ping_interval_without_data`); each
PING sooner is a strike, and the third strike over `grpc.http2.max_ping_strikes` (2) gets the GOAWAY. So a
leaf started without the policy drops such a caller after about 3 PINGs, about 3 s (measured here: 3.0 s), and
the caller's channel goes READY -> IDLE. With `--config` the leaf permits PINGs 1 s apart with no call open
(the configuration's serverPermit defaults to its own `time` and `permitWithoutCalls`): none is a strike,
because the client sends its next PING `time` after the last one's ACK, so never sooner than 1 s.

Window: WATCH_S = 10 s. Without the policy the GOAWAY comes on the 3rd PING, due ~3 s after the call; the
window leaves 7 s (over twice the schedule) for late timers on a busy box. With it the same window holds ~9
PINGs, each of which would have been a strike without the policy: three strikes in it would have ended the
connection, so staying READY for all of it is the policy at work, not a short window. The three watches run
side by side (the `watched` fixture), each with its own processes and connections: one window for the module.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.core.environ import environ_now
from harness.procs.spawn import stop_processes
from tests.conftest import ROOT, side_by_side

WATCH_S = 10.0

# The caller, in its own process so gRPC core's log of the GOAWAY (stderr) is its own: one health call (data on
# the connection, then none), then the channel's state every 50 ms for WATCH_S, printed on each change.
CLIENT = """
import sys, time, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness.resilience import load
target, config, watch_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
ch = grpc.insecure_channel(target, options=list(load(config).channel_options()))
health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
t0, last = time.monotonic(), None
while time.monotonic() - t0 < watch_s:
    state = ch._channel.check_connectivity_state(False)
    if state != last:
        print(f"{time.monotonic() - t0:.2f} {state}", flush=True)
        last = state
    time.sleep(0.05)
"""

KEEPALIVE = """\
name: keepalive-1s
description: keepalive 1 s, PINGs also with no call open; serverPermit from them (1 s, without calls)
keepalive:
  time: 1s
  timeout: 1s
  permitWithoutCalls: true
"""

READY, IDLE = "2", "0"  # grpc_connectivity_state: GRPC_CHANNEL_READY, GRPC_CHANNEL_IDLE


def _serve(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    ready = tmp_path / "ready.json"
    env = {**environ_now(), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "serve", "--port", "0", "--metrics-port", "-1", "--service", "ledger",
         "--ready-file", str(ready), *extra],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not ready.exists() or not ready.read_text().strip():
        if proc.poll() is not None:
            pytest.fail(f"drill serve exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        assert time.monotonic() < deadline, "drill serve did not become ready"
        time.sleep(0.05)
    time.sleep(0.05)
    return proc, json.loads(ready.read_text())["port"]


def _watch(tmp_path: Path, port: int, config: Path) -> tuple[list[tuple[float, str]], str]:
    env = {**environ_now(), "PYTHONPATH": str(ROOT), "GRPC_VERBOSITY": "ERROR"}  # the GOAWAY is logged at ERROR
    out = subprocess.run([sys.executable, "-c", CLIENT, f"127.0.0.1:{port}", str(config), str(WATCH_S)],
                         env=env, capture_output=True, text=True, timeout=WATCH_S + 30)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    states = [(float(t), s) for t, s in (line.split() for line in out.stdout.splitlines())]
    return states, out.stderr


def _leaf(tmp_path: Path, permit: bool) -> tuple[list[tuple[float, str]], str]:
    """A leaf (`drill serve`, with or without `--config`) watched by the caller for WATCH_S: its states, its stderr."""
    config = tmp_path / "keepalive-1s.yaml"
    config.write_text(KEEPALIVE)
    proc, port = _serve(tmp_path, *(["--config", str(config)] if permit else []))
    try:
        return _watch(tmp_path, port, config)
    finally:
        stop_processes([proc], grace_s=10)  # its own session: SIGTERM, then SIGKILL to what is left


def _chain(tmp_path: Path) -> tuple[list[str], list, str]:
    """An edge -> leaf chain run with the keepalive configuration, one call, then WATCH_S of silence: the call's
    path, what crashed, and the edge's log."""
    import grpc

    from harness.demo.proto import drill_pb2, drill_pb2_grpc
    from harness.drills.plan.sections import HopSpec
    from harness.drills.stack.topology import Topology

    config = tmp_path / "keepalive-1s.yaml"
    config.write_text(KEEPALIVE)
    hops = (HopSpec(name="edge", work_ms=0), HopSpec(name="leaf", work_ms=0))
    topo = Topology(hops, config=str(config), seed=1, workdir=tmp_path / "topo")
    topo.start()
    try:
        (edge,) = topo.replicas["edge"]
        with grpc.insecure_channel(edge.address) as ch:
            reply = drill_pb2_grpc.DemoStub(ch).Call(drill_pb2.CallRequest(payload="ka"), timeout=10)
        time.sleep(WATCH_S)  # no calls: only the edge's keepalive PINGs cross to the leaf
        crashed = topo.crashed()
    finally:
        topo.stop()
    return list(reply.path), crashed, edge.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """The three watches of this file, run side by side: each its own processes and ports, so none sees another's
    PINGs, and the module waits one WATCH_S instead of three (each window is still WATCH_S long)."""
    with pytest.MonkeyPatch.context() as mp:
        # the chain's hops inherit it: the GOAWAY line is logged if it comes (gRPC core logs it at ERROR)
        mp.setenv("GRPC_VERBOSITY", "ERROR")
        tmp = {name: tmp_path_factory.mktemp(name) for name in ("leaf-without", "leaf-with", "chain")}
        with side_by_side(**{
            "leaf-without-config": lambda: _leaf(tmp["leaf-without"], False),
            "leaf-with-config": lambda: _leaf(tmp["leaf-with"], True),
            "chain": lambda: _chain(tmp["chain"]),
        }) as results:  # fmt: skip
            yield results


@pytest.mark.parametrize("permit", [False, True], ids=["leaf-without-config", "leaf-with-config"])
def test_a_leaf_with_config_permits_its_callers_keepalive(watched, permit: bool) -> None:
    states, stderr = watched["leaf-with-config" if permit else "leaf-without-config"]()
    assert states and states[0][1] == READY, states  # the call went through
    if permit:
        assert "too_many_pings" not in stderr, stderr[-2000:]
        assert states == [states[0]], states  # READY for the whole window: no GOAWAY ended the connection
    else:
        # what gRPC does to a leaf's caller when nothing permits its PINGs: GOAWAY too_many_pings, channel IDLE
        assert "ENHANCE_YOUR_CALM" in stderr and "too_many_pings" in stderr, stderr[-2000:]
        assert IDLE in [s for _, s in states[1:]], states


def test_the_topology_gives_every_hop_the_config_so_the_leaf_permits_the_hop_above(watched) -> None:
    """A chain run with the keepalive configuration: the edge's calls to the leaf carry its 1-s keepalive, and
    the leaf (given --config too) permits them. Without the leaf's policy the edge's channel gets GOAWAY
    too_many_pings ~3 s after its last call (the first test's bound), which gRPC core logs on the edge's stderr
    (its log file here); the same WATCH_S of silence after one call shows no such line."""
    path, crashed, log = watched["chain"]()
    assert path == ["edge", "leaf"], path
    assert crashed == []
    assert "too_many_pings" not in log, log[-2000:]
