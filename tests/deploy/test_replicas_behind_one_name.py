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

import grpc
import pytest

from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.procs.spawn import spawn_serve, stop_processes, wait_serving
from tests.deploy.dns_stub import DnsStub
from tests.ports import free_port

NAME = "ledger.drill.test"
REPLICAS = 3


@pytest.mark.parametrize("config", ["naive", None], ids=["resilience-layer", "plain"])
def test_calls_spread_over_every_replica_behind_the_name(tmp_path: pathlib.Path, config: str | None) -> None:
    net = f"127.{random.randint(100, 250)}.{random.randint(0, 255)}"
    addresses = [f"{net}.{10 + i}" for i in range(REPLICAS)]
    port = free_port(*addresses)
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


#: each ledger ends its connections after this (ms; gRPC adds ±10 %), so the account resolves `ledger` again
AGE_MS = 500
#: how long calls go on before a replica added mid-traffic must have answered one: an age (0.55 s at most),
#: the account's re-resolution a second after the last at most (CHANNEL_OPTIONS), a connect; the bound is
#: far above that sum so a loaded box does not fail it, and far below forever (without re-resolution the
#: new replica gets no call at all)
SPREAD_BOUND_S = 30.0


def test_a_replica_added_while_calls_flow_gets_calls(tmp_path: pathlib.Path) -> None:
    """`--scale ledger=2` after traffic began: the new replica is behind the name only in DNS; the account's
    channel sees it because the ledger ends its connections (`--max-connection-age-ms`) and the account
    then resolves the name again. Proves the account re-resolves and spreads calls to an address the name
    gained after its channel started; not what compose's DNS does (the stub stands in for it)."""
    import time

    net = f"127.{random.randint(100, 250)}.{random.randint(0, 255)}"
    addresses = [f"{net}.{10 + i}" for i in range(2)]
    port = free_port(*addresses)
    procs = []

    def ledger(i: int):
        args = ["--host", addresses[i], "--port", str(port), "--metrics-port", "0", "--service", "ledger",
                "--instance-id", f"ledger-{i + 1}", "--max-connection-age-ms", str(AGE_MS)]  # fmt: skip
        got = spawn_serve(f"ledger-{i + 1}", args, tmp_path)
        procs.append(got.proc)
        wait_serving([got])

    with DnsStub({NAME: addresses[:1]}) as dns:
        try:
            ledger(0)
            args = ["--port", "0", "--metrics-port", "0", "--service", "account", "--config", "naive",
                    "--downstream", dns.target(NAME, port)]  # fmt: skip
            account = spawn_serve("account", args, tmp_path)
            procs.append(account.proc)
            wait_serving([account])
            with grpc.insecure_channel(account.address) as channel:
                stub = drill_pb2_grpc.DemoStub(channel)

                def call() -> str:
                    return stub.Call(drill_pb2.CallRequest(payload="scale"), timeout=5).served_by

                assert {call() for _ in range(20)} == {"ledger-1"}  # traffic flows to the one replica
                ledger(1)
                dns.records[NAME] = addresses  # compose's DNS answers with the new container too
                served: collections.Counter[str] = collections.Counter()
                deadline = time.monotonic() + SPREAD_BOUND_S
                while served["ledger-2"] < 5 and time.monotonic() < deadline:
                    served[call()] += 1
                    time.sleep(0.02)
            assert served["ledger-2"] >= 5, f"the replica added mid-traffic got {served['ledger-2']} calls: {served}"
        finally:
            stop_processes(procs)
