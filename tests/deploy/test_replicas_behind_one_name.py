"""Replicas behind one name get the calls: `drill serve --downstream NAME:PORT` balances over every
address NAME resolves to, as compose DNS answers `ledger` with every replica of
`LEDGER_REPLICAS=3` (and a headless Kubernetes Service with every ready pod).

A real chain: three `drill serve` ledger replicas on three loopback addresses, the same port (three
containers), and an account hop whose downstream is one name that a DNS server on 127.0.0.1
resolves to the three (tests/deploy/dns_stub.py; gRPC's resolver asks it, /etc/hosts untouched).
With gRPC's default pick_first every call would go to one replica.
"""

from __future__ import annotations

import collections
import pathlib
import random
import socket

import grpc
import pytest

from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.procs.spawn import spawn_serve, stop_processes, wait_serving
from tests.deploy.dns_stub import DnsStub

NAME = "ledger.drill.test"
REPLICAS = 3


def _free_port_on(addresses: list[str]) -> int:
    """A port free on every one of `addresses` (the replicas all listen on it, as containers would)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind((addresses[0], 0))
            port = s.getsockname()[1]
        try:
            for addr in addresses:
                with socket.socket() as s:
                    s.bind((addr, port))
        except OSError:
            continue
        return port
    raise AssertionError("no port free on every replica address")


@pytest.mark.parametrize("config", ["naive", None], ids=["resilience-layer", "plain"])
def test_calls_spread_over_every_replica_behind_the_name(tmp_path: pathlib.Path, config: str | None) -> None:
    net = f"127.{random.randint(100, 250)}.{random.randint(0, 255)}"
    addresses = [f"{net}.{10 + i}" for i in range(REPLICAS)]
    port = _free_port_on(addresses)
    procs = []
    with DnsStub({NAME: addresses}) as dns:
        try:
            ledgers = [
                spawn_serve(f"ledger-{i + 1}", ["--host", addr, "--port", str(port), "--metrics-port", "0",
                                                "--service", "ledger", "--instance-id", f"ledger-{i + 1}"], tmp_path)
                for i, addr in enumerate(addresses)
            ]  # fmt: skip
            procs += [s.proc for s in ledgers]
            wait_serving(ledgers)
            args = ["--port", "0", "--metrics-port", "0", "--service", "account"]
            args += ["--downstream", dns.target(NAME, port), *(["--config", config] if config else [])]
            account = spawn_serve("account", args, tmp_path)
            procs.append(account.proc)
            wait_serving([account])
            served: collections.Counter[str] = collections.Counter()
            with grpc.insecure_channel(account.address) as channel:
                stub = drill_pb2_grpc.DemoStub(channel)

                def call() -> str:
                    reply = stub.Call(drill_pb2.CallRequest(payload="rr"), timeout=5)
                    assert list(reply.path) == ["account", "ledger"]
                    return reply.served_by

                # Until every replica answered once: the first calls may come before all three
                # connections are up (round robin picks among the connected ones). pick_first never
                # gets there: 100 calls, one replica.
                seen = set()
                for _ in range(100):
                    seen.add(call())
                    if len(seen) == REPLICAS:
                        break
                assert seen == {f"ledger-{i + 1}" for i in range(REPLICAS)}, f"calls reached only {sorted(seen)}"
                # All connected: round robin takes them in turn, so 30 calls are exactly 10 each.
                served.update(call() for _ in range(10 * REPLICAS))
            assert sorted(served.values()) == [10] * REPLICAS, served
            assert (NAME, 1) in dns.questions  # resolved through the name, not given the addresses
        finally:
            stop_processes(procs)
