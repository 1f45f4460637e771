"""Spans on both data planes of `drill proxy`: each call a SERVER span, child of the caller's context, with the drill's
attributes and the call's status, the same on the link plane (`start_plane`) as on the aio plane (`start_proxy`).

In front of the Go probe, three calls, each under a caller's span of its own (a `traceparent` of its own): an organic
one, a drill call the directive hits (abort), and a drill call it does not (ratio 0). What each plane exported is
read back from an in-memory exporter: one span per call, in the caller's trace, its parent the caller's span, with
the tenant, the mode, the hit, the request id and the status the caller got.
"""

from __future__ import annotations

import asyncio

from grpc import aio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harness import protos
from harness.core import headers as h
from harness.core.settings import FaultSettings
from harness.core.tracing import HarnessTracer
from harness.link.plane import start_plane
from harness.proxy.cli import start_proxy
from tests.proxy.probe import SERVICE
from tests.proxy.test_forward import probe, service  # noqa: F401 - fixtures

DRILL = ((h.TENANT, "tenant-drill"), (h.FAULT, "abort:UNAVAILABLE"), (h.FAULT_TARGET, "probe"))
#: (call, its caller's trace id and span id, its metadata beside the traceparent, the status the caller gets)
CALLS = [
    ("organic", 0x1111, 0xA1, (), "OK"),
    ("hit", 0x2222, 0xB2, (*DRILL, (h.FAULT_RATIO, "100"), (h.REQUEST_ID, "r-hit")), "UNAVAILABLE"),
    ("missed", 0x3333, 0xC3, (*DRILL, (h.FAULT_RATIO, "0"), (h.REQUEST_ID, "r-missed")), "OK"),
]


def _traceparent(trace_id: int, span_id: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def _spans(plane: str, service, probe) -> dict[str, tuple]:  # noqa: F811
    """{call: (kind, parent span id, attributes)} of the spans `plane` exported for CALLS."""
    _, ds, msg, _ = probe
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = HarnessTracer(provider.get_tracer("test"))
    kinds = protos.from_descriptor_set(str(ds), option="--descriptor-set").kinds()

    async def main() -> list[str]:
        settings = FaultSettings.from_env(service="probe", enabled=True, seed=7)
        if plane == "aio":
            server, port, upstream = await start_proxy(service, settings=settings, method_kinds=kinds, tracer=tracer)
        else:
            links, port = await start_plane(service, settings=settings, method_kinds=kinds, tracer=tracer)
        codes = []
        try:
            async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                echo = channel.unary_unary(SERVICE + "Echo")
                for name, trace_id, span_id, md, _ in CALLS:
                    metadata = (("traceparent", _traceparent(trace_id, span_id)), *md)
                    try:
                        await echo(msg(id=name).SerializeToString(), metadata=metadata, timeout=10)
                        codes.append("OK")
                    except aio.AioRpcError as e:
                        codes.append(e.code().name)
        finally:
            if plane == "aio":
                await server.stop(0)
                await upstream.close()
            else:
                await links.close()
        return codes

    codes = asyncio.run(main())
    assert codes == [want for *_, want in CALLS], (plane, codes)
    by_trace = {s.context.trace_id: s for s in exporter.get_finished_spans()}
    assert len(exporter.get_finished_spans()) == len(CALLS) == len(by_trace), exporter.get_finished_spans()
    out = {}
    for name, trace_id, span_id, _, _ in CALLS:
        span = by_trace[trace_id]  # in the caller's trace
        out[name] = (span.name, span.kind, span.parent.span_id if span.parent else None, dict(span.attributes))
        assert span.parent.span_id == span_id and span.kind is trace.SpanKind.SERVER, (plane, name, span)
    return out


def test_each_call_is_a_server_span_under_its_callers_context_on_both_planes(service, probe):  # noqa: F811
    aio_spans, link_spans = _spans("aio", service, probe), _spans("link", service, probe)
    assert link_spans == aio_spans
    assert aio_spans["organic"][3] == {"drill.tenant": "", "drill.fault.mode": "none", "drill.fault.hit": False,
                                       "drill.request_id": "", "rpc.grpc.status_code": "OK"}  # fmt: skip
    hit, missed = aio_spans["hit"][3], aio_spans["missed"][3]
    assert hit["drill.tenant"] == "tenant-drill" and hit["drill.fault.hit"] is True
    assert hit["drill.request_id"] == "r-hit" and hit["rpc.grpc.status_code"] == "UNAVAILABLE"
    assert missed["drill.fault.hit"] is False and missed["rpc.grpc.status_code"] == "OK"
