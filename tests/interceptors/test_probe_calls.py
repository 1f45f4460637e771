"""Health checks and server reflection are probes, not traffic: neither flavour faults or counts them.

Compose and Kubernetes call `grpc.health.v1.Health/Check` every few seconds and `drill run` calls it before
each trial; counted as calls they would add 0.5 calls/s per hop to `drill_server_calls_total` and move every
per-hop number read from it (amplification included). A drill-tagged probe is not faulted either: a probe
that a drill could fail would restart the service under drill.
"""

from __future__ import annotations

import contextlib
from concurrent import futures

import grpc
import pytest
from grpc import aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from harness.core import metrics as m
from harness.core.settings import FaultSettings
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import FaultServerInterceptor, SyncFaultServerInterceptor
from tests.interceptors.servers import CountingAioServicer, CountingServicer

#: A drill call that would abort at once if the probe were faulted.
DRILL = (("x-tenant-id", "tenant-drill"), ("x-fault", "abort:UNAVAILABLE"), ("x-request-id", "probe-1"))
PROBES = 5


def _counts(service: str) -> dict[str, float]:
    """Every server-side call count of `service`'s hop, by grpc_method (the started counter has no service)."""
    out: dict[str, float] = {}
    for metric in (m.SERVER_CALLS, m.GRPC_SERVER_CALL_STARTED, m.FAULT_HITS):
        for family in metric.collect():
            for s in family.samples:
                if s.labels.get("service", service) != service or not s.name.endswith("_total"):
                    continue
                key = f"{s.name}|{s.labels['grpc_method']}"
                out[key] = out.get(key, 0.0) + s.value
    return out


def _settings(service: str) -> FaultSettings:
    return FaultSettings(enabled=True, service=service, tenants=frozenset({"tenant-drill"}))


def _probe_sync(channel) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    for md in ((), DRILL):
        for _ in range(PROBES):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), metadata=md, timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    answers = list(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                             metadata=DRILL, timeout=5))  # fmt: skip
    assert answers and answers[0].list_services_response.service
    # one real call, so the test shows the hop does count traffic
    drill_pb2_grpc.DemoStub(channel).Call(drill_pb2.CallRequest(payload="x"), timeout=5)


@pytest.mark.parametrize("flavour", ["aio", "sync"])
def test_health_checks_and_reflection_are_neither_faulted_nor_counted(flavour):
    service = f"probe-{flavour}"
    before = _counts(service)
    if flavour == "aio":
        import asyncio

        async def main():
            server = aio.server(interceptors=[FaultServerInterceptor(_settings(service))])
            drill_pb2_grpc.add_DemoServicer_to_server(CountingAioServicer(), server)
            hs = health.aio.HealthServicer()
            health_pb2_grpc.add_HealthServicer_to_server(hs, server)
            reflection.enable_server_reflection((drill_pb2.DESCRIPTOR.services_by_name["Demo"].full_name,
                                                 health.SERVICE_NAME, reflection.SERVICE_NAME), server)  # fmt: skip
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            try:
                with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                    await asyncio.to_thread(_probe_sync, ch)
            finally:
                await server.stop(0)

        asyncio.run(main())
    else:
        with contextlib.ExitStack() as stack:
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                                 interceptors=[SyncFaultServerInterceptor(_settings(service))])  # fmt: skip
            stack.callback(server.stop, 0)
            drill_pb2_grpc.add_DemoServicer_to_server(CountingServicer(), server)
            health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
            reflection.enable_server_reflection((drill_pb2.DESCRIPTOR.services_by_name["Demo"].full_name,
                                                 health.SERVICE_NAME, reflection.SERVICE_NAME), server)  # fmt: skip
            port = server.add_insecure_port("127.0.0.1:0")
            server.start()
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                _probe_sync(ch)
    after = _counts(service)
    moved = {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k, 0.0)}
    # the one Demo call is counted (started, and drill_server_calls_total), and nothing else is
    assert moved == {
        "drill_server_calls_total|drill.v1.Demo/Call": 1.0,
        "grpc_server_call_started_total|drill.v1.Demo/Call": 1.0,
    }


def test_a_bounded_hop_answers_probes_without_a_slot_and_never_sheds_them():
    """The demo's admission (every attempt pays a slot and the work time) leaves probes alone: with its one slot
    held and no queue, a health check is answered SERVING while it is held, and neither it nor a shed is counted."""
    import asyncio

    from harness.demo.service import AdmissionInterceptor, Capacity

    service = "probe-admission"

    entered, release = asyncio.Event(), asyncio.Event()

    class Slow(CountingAioServicer):
        async def Call(self, request, context):  # noqa: N802
            entered.set()
            await release.wait()  # holds the hop's one slot until the test lets go
            return drill_pb2.CallReply(payload=request.payload)

    async def main():
        admission = AdmissionInterceptor(service, Capacity(concurrency=1, queue=0, work_ms=0))
        server = aio.server(interceptors=[admission, FaultServerInterceptor(_settings(service))])
        drill_pb2_grpc.add_DemoServicer_to_server(Slow(), server)
        hs = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(hs, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                held = asyncio.ensure_future(
                    drill_pb2_grpc.DemoStub(ch).Call(drill_pb2.CallRequest(payload="x"), timeout=30)
                )
                # the slow call is in its handler, so it holds the slot: a second Call would be shed now
                await asyncio.wait_for(entered.wait(), 10)
                before = _counts(service)
                reply = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
                assert not held.done()  # answered while the slot was still held
                assert _counts(service) == before
                release.set()
                assert (await held).payload == "x"
        finally:
            release.set()
            await server.stop(0)

    asyncio.run(main())
