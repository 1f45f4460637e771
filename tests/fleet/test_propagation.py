"""The drill crosses hops that are not Python by W3C baggage alone (issue 47 §1, §5).

Between two hops of ours (aio servers with the fault interceptors: `edge`, which is not the target and forwards the
drill, and the target) runs a hop we did not write: the Go hop (OpenTelemetry Go's propagator) or the Node hop
(grpc-js with OpenTelemetry's auto-instrumentation, no propagation code). Neither forwards an x-* key, so the
target can only see the drill in the baggage. The target must hit exactly the ids `drill hits` predicts; with the
middle hop's propagation off (`-propagate none`, `--no-otel`) the target sees organic traffic only.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid

import grpc
import pytest
from grpc import aio

from harness.core import headers as h
from harness.core.settings import FaultSettings
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import Tagging
from tests.conftest import ROOT, sample
from tests.fleet import hops
from tests.interceptors.servers import aio_server, aio_stub

M = "drill.v1.Demo/Call"
SEED = 20261206
DIRECTIVE = "abort:UNAVAILABLE"
RATIO = 50
CALLS = 40  # both outcomes certain enough: P(no hit or no miss among 40 at 50 %) = 2 × 2⁻⁴⁰


class Target(drill_pb2_grpc.DemoServicer):
    """The target's service: records the metadata keys each call arrived with (before any reading)."""

    def __init__(self) -> None:
        self.keys: list[set[str]] = []

    async def Call(self, request, context):  # noqa: N802
        self.keys.append({k for k, _ in context.invocation_metadata()})
        return drill_pb2.CallReply(payload="target")


class Edge(drill_pb2_grpc.DemoServicer):
    """Our first hop: calls the next one (its client interceptor carries what the scope propagates) and answers
    with the code the call got, so the caller sees the target's outcome per request id."""

    def __init__(self, next_port: int) -> None:
        self.next_port = next_port

    async def Call(self, request, context):  # noqa: N802
        async with aio_stub(self.next_port) as nxt:
            try:
                await nxt.Call(drill_pb2.CallRequest(), timeout=10)
            except aio.AioRpcError as err:
                return drill_pb2.CallReply(payload=err.code().name)
        return drill_pb2.CallReply(payload="OK")


def predicted(ids: list[str]) -> set[str]:
    """What `drill hits` (the CLI) says the target hits."""
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "hits", "--seed", str(SEED), "--directive", DIRECTIVE, "--ratio",
         str(RATIO)], input="\n".join(ids) + "\n", capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    assert [r[0] for r in rows] == ids
    return {rid for rid, verdict in rows if verdict == "hit"}


def drill_through(middle, tmp, name: str, target_service: str) -> tuple[dict[str, str], Target]:
    """CALLS drill calls client → edge → middle → target; {request id: the outcome the edge saw}, the target."""

    async def main():
        target = Target()
        settings = FaultSettings(enabled=True, seed=SEED, service=target_service, instance_id=f"{target_service}-0")
        async with aio_server(settings, servicer=target) as (target_port, _):
            with middle(tmp, name, "-upstream" if "go" in name else "--upstream", f"127.0.0.1:{target_port}") as port:
                edge_settings = FaultSettings(enabled=True, seed=SEED, service=f"{target_service}-edge")
                async with aio_server(edge_settings, servicer=Edge(port)) as (edge_port, _):
                    tagging = Tagging(tenant="tenant-drill", directive=DIRECTIVE, ratio=RATIO, target=target_service)
                    outcomes = {}
                    async with aio_stub(edge_port, tagging) as edge:
                        for _ in range(CALLS):
                            rid = str(uuid.uuid4())
                            reply = await edge.Call(
                                drill_pb2.CallRequest(), metadata=((h.REQUEST_ID, rid),), timeout=10
                            )
                            outcomes[rid] = reply.payload
        return outcomes, target

    return asyncio.run(main())


@pytest.mark.parametrize("kind", ["gohop", "nodehop"])
def test_the_target_behind_a_hop_we_did_not_write_hits_what_drill_hits_predicts(built, tmp_path, kind):
    middle = hops.gohop if kind == "gohop" else hops.nodehop
    service = f"fleet-{kind}"
    outcomes, target = drill_through(middle, tmp_path, kind, service)
    hit = predicted(list(outcomes))
    assert 0 < len(hit) < CALLS
    assert {rid for rid, code in outcomes.items() if code == "UNAVAILABLE"} == hit
    assert {code for rid, code in outcomes.items() if rid not in hit} == {"OK"}
    # the drill reached the target by baggage alone: the middle hop forwarded no x-* key
    assert target.keys and all(h.BAGGAGE in keys and not keys & set(h.DRILL_KEYS) for keys in target.keys)
    assert sample("drill_server_calls_total", service=service, grpc_method=M, grpc_status="UNAVAILABLE",
                  traffic="drill", fault_mode="abort") == len(hit)  # fmt: skip
    assert sample("drill_server_calls_total", service=service, grpc_method=M, grpc_status="OK", traffic="drill",
                  fault_mode="none") == CALLS - len(hit)  # fmt: skip
    # the middle hop's own log: every call, with the request id it carried
    lines = hops.log_lines(tmp_path, kind)
    assert sorted(line["request_id"] for line in lines) == sorted(outcomes)
    assert {line["tenant"] for line in lines} == {"tenant-drill"}


@pytest.mark.parametrize("kind,off", [("gohop", ("-propagate", "none")), ("nodehop", ("--no-otel",))])
def test_a_hop_that_propagates_nothing_leaves_the_target_organic(built, tmp_path, kind, off):
    base = hops.gohop if kind == "gohop" else hops.nodehop

    def middle(tmp, name, *args):
        return base(tmp, name, *off, *args)

    service = f"fleet-{kind}-off"
    outcomes, target = drill_through(middle, tmp_path, kind, service)
    assert set(outcomes.values()) == {"OK"}
    assert all(h.BAGGAGE not in keys for keys in target.keys) and len(target.keys) == CALLS
    assert sample("drill_server_calls_total", service=service, grpc_method=M, grpc_status="OK", traffic="organic",
                  fault_mode="none") == CALLS  # fmt: skip
    assert sample("drill_server_calls_total", service=service, grpc_method=M, grpc_status="OK", traffic="drill",
                  fault_mode="none") == 0  # fmt: skip


def test_the_health_service_answers_on_both_hops(built, tmp_path):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    for kind, middle, flag in (("gohop", hops.gohop, "-upstream"), ("nodehop", hops.nodehop, "--upstream")):
        with middle(tmp_path, kind, flag, "127.0.0.1:9") as port, grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, kind


def test_two_opentelemetry_go_1_1_hops_in_a_row_get_the_directive_refused_never_misread(built, tmp_path):
    """Debian's OpenTelemetry Go 1.1.0 escapes a value it parsed again: after two Go hops `abort:UNAVAILABLE`
    arrives as `abort%3AUNAVAILABLE` (contracts "Baggage"). The target refuses it (bad_chars), every call passes."""

    async def main():
        settings = FaultSettings(enabled=True, seed=SEED, service="fleet-go-go", instance_id="fleet-go-go-0")
        async with aio_server(settings, servicer=Target()) as (target_port, _):
            with hops.gohop(tmp_path, "g1", "-upstream", f"127.0.0.1:{target_port}") as g1:
                with hops.gohop(tmp_path, "g2", "-upstream", f"127.0.0.1:{g1}") as g2:
                    tagging = Tagging(tenant="tenant-drill", directive=DIRECTIVE, target="fleet-go-go")
                    async with aio_stub(g2, tagging) as stub:
                        return [(await stub.Call(drill_pb2.CallRequest(), timeout=10)).payload for _ in range(5)]

    assert asyncio.run(main()) == ["target"] * 5
    assert sample("drill_fault_rejected_total", service="fleet-go-go", grpc_method=M, reason="bad_chars") == 5
    assert sample("drill_fault_hits_total", service="fleet-go-go", grpc_method=M, mode="abort") == 0
