"""Ports that cannot collide: nothing the harness starts depends on a port staying free after it was released.

The race (issue 20: a `make demo` lost to it): a helper bound port 0, read the
port, released it, and a child bound it later, while the load's outgoing
connections drew from the same ephemeral range. The adversary below reproduces
it deterministically: every TCP port a socket of this process releases without
having been connected or listening (a port "found free") is taken at once by
another listener. Code that hands such a port to a child fails every time; code
whose servers bind port 0 themselves and report what they got cannot notice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys

import pytest

from harness.drills.plan.sections import HopSpec
from harness.drills.stack.topology import Topology
from harness.procs.ports import listening_ports, refused_port, wait_listening
from harness.procs.prometheus import LocalPrometheus


@pytest.fixture
def port_thief(monkeypatch):
    """Occupy every TCP port a socket of this process releases unconnected and unlistened."""
    taken: list[socket.socket] = []
    original = socket.socket.close

    def close(self: socket.socket) -> None:
        port = 0
        with contextlib.suppress(OSError):
            if self.family == socket.AF_INET and self.type == socket.SOCK_STREAM and self.fileno() >= 0:
                listening = self.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                try:
                    self.getpeername()
                    connected = True
                except OSError:
                    connected = False
                if not listening and not connected:
                    port = self.getsockname()[1]
        original(self)
        if port:
            thief = socket.socket()
            try:
                thief.bind(("127.0.0.1", port))
                thief.listen()
                taken.append(thief)
            except OSError:
                thief.detach()  # someone else has it already: as good as taken

    monkeypatch.setattr(socket.socket, "close", close)
    yield taken
    monkeypatch.setattr(socket.socket, "close", original)
    for s in taken:
        original(s)


def test_the_thief_takes_a_port_found_free_and_released(port_thief):
    """The adversary works: the old `free_port()` pattern loses its port every time."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with socket.socket() as late:
        with pytest.raises(OSError):
            late.bind(("127.0.0.1", port))
    assert len(port_thief) == 1


def test_a_chain_of_drill_serve_processes_starts_with_every_released_port_taken(port_thief, tmp_path):
    hops = (HopSpec(name="gateway", replicas=2), HopSpec(name="order"), HopSpec(name="ledger", replicas=2))
    topo = Topology(hops, config="naive", seed=1, workdir=tmp_path)
    try:
        topo.start()
        assert len(topo.edge) == 2 and not topo.crashed()
        for replicas in topo.replicas.values():
            for r in replicas:  # each reported the ports it bound itself, and listens there
                ready = json.loads(r.ready_file.read_text())
                assert {ready["port"], ready["metrics_port"]} <= set(listening_ports(r.proc.pid))
        # each hop found its downstream replicas through their ready files: a call crosses all three hops
        asyncio.run(_one_call_through(topo.edge[0]))
    finally:
        topo.stop()


async def _one_call_through(edge: str) -> None:
    from grpc import aio

    from harness.demo.proto import drill_pb2, drill_pb2_grpc

    async with aio.insecure_channel(edge) as ch:
        reply = await drill_pb2_grpc.DemoStub(ch).Call(drill_pb2.CallRequest(payload="p"), timeout=5)
    assert reply.payload == "p"


def test_local_prometheus_starts_with_every_released_port_taken(port_thief, tmp_path):
    with LocalPrometheus(tmp_path / "prom") as prom:
        assert prom.port in listening_ports(prom.proc.pid)
        assert prom.query("vector(1)")[0]["value"][1] == "1"


def test_wait_listening_reads_the_port_a_child_bound_itself():
    child = subprocess.Popen(
        [sys.executable, "-c", "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); "
         "print(s.getsockname()[1], flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        said = int(child.stdout.readline())
        assert wait_listening(child, 10.0) == [said]
    finally:
        child.kill()
        child.wait()
    assert listening_ports(child.pid) == []  # gone


def test_refused_port_refuses_while_held():
    with refused_port() as port:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0
