"""compose/grpc_health_probe.py, run as the compose healthcheck runs it (`python3 -I -S`, so no
site-packages: grpc cannot be imported), against real gRPC servers: it passes only on SERVING and
fails on NOT_SERVING, an unknown service, a server without the health service, a refused
connection and a server that never answers. Its CPU cost is benchmarks/healthcheck_cost.py's."""

from __future__ import annotations

import socket
import subprocess
import sys
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from harness.procs.ports import refused_port
from harness.procs.spawn import start_serve
from tests.conftest import ROOT

PROBE = str(ROOT / "compose" / "grpc_health_probe.py")
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def probe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "-S", PROBE, *args], capture_output=True, text=True, timeout=30)


def test_the_probe_runs_where_grpc_cannot_be_imported() -> None:
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", "import grpc"], capture_output=True, text=True)
    assert proc.returncode == 1 and "ModuleNotFoundError" in proc.stderr


@pytest.fixture
def health_server():
    """A grpcio server with the standard health service: '' SERVING, 'ledger' NOT_SERVING."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    servicer.set("", SERVING)
    servicer.set("ledger", NOT_SERVING)
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        server.stop(None)


def test_serving_passes_and_not_serving_fails(health_server) -> None:
    target, servicer = health_server
    ok = probe(target)
    assert ok.returncode == 0 and ok.stdout.strip() == f"{target}: SERVING", ok
    named = probe(target, "ledger")
    assert named.returncode == 1 and named.stderr.strip() == f"{target}: NOT_SERVING", named
    servicer.set("", NOT_SERVING)  # the same server going out of rotation
    flipped = probe(target)
    assert flipped.returncode == 1 and flipped.stderr.strip() == f"{target}: NOT_SERVING", flipped
    servicer.set("", SERVING)
    assert probe(target).returncode == 0


def test_an_unknown_service_fails_with_its_status(health_server) -> None:
    target, _ = health_server
    # grpcio answers an unknown service with an empty message (status UNKNOWN) and NOT_FOUND
    proc = probe(target, "nope")
    assert proc.returncode == 1 and proc.stderr.strip() == f"{target}: NOT_FOUND", proc


def test_a_server_without_the_health_service_fails() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        proc = probe(f"127.0.0.1:{port}")
    finally:
        server.stop(None)
    assert proc.returncode == 1 and "UNIMPLEMENTED" in proc.stderr, proc


def test_refused_and_silent_servers_fail_within_the_timeout() -> None:
    with refused_port() as port:
        refused = probe(f"127.0.0.1:{port}")
    assert refused.returncode == 1 and "ConnectionRefusedError" in refused.stderr, refused
    with socket.socket() as silent:  # accepts (the kernel completes the handshake) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        proc = probe(f"127.0.0.1:{silent.getsockname()[1]}", "--timeout", "0.5")
    assert proc.returncode == 1 and "TimeoutError" in proc.stderr, proc


def test_a_drill_serve_hop_as_compose_runs_it_is_serving(tmp_path) -> None:
    """The compose ledger's own command line: admission, one worker, 8 ms per call."""
    hop = start_serve(
        "ledger",
        ["--port", "0", "--metrics-port", "0", "--service", "ledger", "--admission", "--work-ms", "8",
         "--concurrency", "1", "--queue", "32"],
        tmp_path,
    )  # fmt: skip
    try:
        proc = probe(hop.address)
        assert proc.returncode == 0 and proc.stdout.strip() == f"{hop.address}: SERVING", proc
        assert probe(hop.address, "no.such.Service").returncode == 1
    finally:
        hop.stop()


def test_the_port_probe_passes_on_a_listening_port_and_fails_on_a_refused_one() -> None:
    """compose/port_probe.py, the Locust master's healthcheck, run as compose runs it (`-I -S`)."""
    port_probe = str(ROOT / "compose" / "port_probe.py")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        ok = subprocess.run([sys.executable, "-I", "-S", port_probe, address], capture_output=True, timeout=30)
    with refused_port() as port:
        refused = subprocess.run([sys.executable, "-I", "-S", port_probe, f"127.0.0.1:{port}"],
                                 capture_output=True, timeout=30)  # fmt: skip
    assert (ok.returncode, refused.returncode) == (0, 1), (ok.stderr, refused.stderr)
    assert not refused.stderr  # refused is a verdict, not a crash
