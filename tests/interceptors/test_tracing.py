"""Spans of the harness tracer: the SDK's ids, sampling and attributes; SDK spans as soon as something exports.

`setup_tracing()` returns a `HarnessTracer`. With no span processor on the provider
(the `none` exporter), a sampled span is an `UnexportedSpan`: it must make the
same decisions as the SDK (parent, trace id, sampler, flags, attributes) and carry
the trace id to audit lines, exemplars and downstream calls. With a processor, the
spans are the SDK's own and get exported.
"""

from __future__ import annotations

import asyncio
import logging

from opentelemetry import trace
from opentelemetry.propagate import extract, inject
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace import sampling as s
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from harness.core import headers as h
from harness.core.settings import FaultSettings
from harness.core.tracing import HarnessTracer, UnexportedSpan, start_server_span, trace_id_hex
from harness.demo.proto import drill_pb2
from harness.interceptors import Tagging
from tests.interceptors.servers import aio_server, aio_stub

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
PARENT_TRACE = int("0af7651916cd43dd8448eb211c80319c", 16)


def tracer(sampler=None) -> tuple[HarnessTracer, TracerProvider]:
    provider = TracerProvider(sampler=sampler or s.ParentBased(s.ALWAYS_ON))
    return HarnessTracer(provider.get_tracer("test")), provider


def test_a_child_of_a_remote_parent_keeps_its_trace_and_sampled_flag():
    t, _ = tracer()
    span = start_server_span(t, "pkg.S/M", ((("traceparent", PARENT)),), "tenant-drill", "delay", True, "r1")
    ctx = span.get_span_context()
    assert isinstance(span, UnexportedSpan) and span.is_recording()
    assert ctx.trace_id == PARENT_TRACE and ctx.trace_flags.sampled and not ctx.is_remote
    assert span.attributes == {
        "drill.tenant": "tenant-drill", "drill.fault.mode": "delay", "drill.fault.hit": True, "drill.request_id": "r1",
    }  # fmt: skip
    span.set_attribute("rpc.grpc.status_code", "OK")
    span.end()
    assert span.attributes["rpc.grpc.status_code"] == "OK" and not span.is_recording()


def test_root_spans_get_fresh_valid_ids_and_the_sampler_decides():
    t, _ = tracer()
    a = t.start_span("x", kind=trace.SpanKind.SERVER).get_span_context()
    b = t.start_span("x", kind=trace.SpanKind.SERVER).get_span_context()
    assert a.is_valid and b.is_valid and a.trace_id != b.trace_id and a.trace_flags.sampled
    off, _ = tracer(s.ParentBased(s.ALWAYS_OFF))
    span = start_server_span(off, "pkg.S/M", (), "", "none", False, "")
    assert not span.is_recording() and not span.get_span_context().trace_flags.sampled
    assert trace_id_hex(span) == ""  # no audit line or exemplar points at a trace that is never recorded
    # a sampled remote parent is still followed by ParentBased(AlwaysOff), as the SDK does
    child = start_server_span(off, "pkg.S/M", (("traceparent", PARENT),), "", "none", False, "")
    assert child.is_recording() and child.get_span_context().trace_id == PARENT_TRACE


def test_the_context_injected_from_an_unexported_span_is_its_own():
    t, _ = tracer()
    span = t.start_span("client", kind=trace.SpanKind.CLIENT)
    carrier: dict[str, str] = {}
    inject(carrier, context=trace.set_span_in_context(span))
    got = trace.get_current_span(extract(carrier)).get_span_context()
    assert (got.trace_id, got.span_id) == (span.get_span_context().trace_id, span.get_span_context().span_id)


def test_with_a_span_processor_the_spans_are_the_sdks_and_are_exported():
    t, provider = tracer()
    assert isinstance(t.start_span("before"), UnexportedSpan)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = start_server_span(t, "pkg.S/M", (), "tenant-drill", "abort", True, "r2")
    assert not isinstance(span, UnexportedSpan)
    span.end()
    (done,) = exporter.get_finished_spans()
    assert done.attributes["drill.request_id"] == "r2"


def test_a_hit_served_with_unexported_spans_carries_the_callers_trace_to_audit_line_and_exemplar(caplog):
    t, _ = tracer()
    caplog.set_level(logging.INFO, logger="drill.audit")
    settings = FaultSettings(enabled=True, seed=1, service="fast-traced")

    async def main():
        async with aio_server(settings, tracer=t) as (port, _):
            async with aio_stub(port, Tagging(tenant="tenant-drill", directive="delay:5")) as stub:
                await stub.Call(drill_pb2.CallRequest(), metadata=((h.REQUEST_ID, "fast-1"), ("traceparent", PARENT)))

    asyncio.run(main())
    trace_hex = format(PARENT_TRACE, "032x")
    assert any(trace_hex in r.getMessage() and "fast-1" in r.getMessage() for r in caplog.records)
    lines = openmetrics_latest(REGISTRY).decode().splitlines()  # exemplars: OpenMetrics only
    assert any(
        x.startswith("drill_server_latency_seconds_bucket") and 'service="fast-traced"' in x and trace_hex in x
        for x in lines
    )


def _as_sdk_decides(t: HarnessTracer) -> HarnessTracer:
    """The same tracer with the root-span shortcut off: every span asks the sampler, as the SDK does."""
    t._root = None
    return t


def test_a_root_span_without_the_sampler_call_is_what_the_sampler_would_give():
    """For the SDK's always_on/always_off samplers, alone or as a ParentBased root, a root span skips the
    sampler call (its answer is fixed); the span must be the one the sampler's answer gives: same
    flags, recording or not, attributes, and a context equal to SpanContext's own constructor's."""
    attributes = {"drill.tenant": "", "drill.fault.mode": "none", "drill.fault.hit": False, "drill.request_id": ""}
    for sampler in (s.ParentBased(s.ALWAYS_ON), s.ParentBased(s.ALWAYS_OFF), s.ALWAYS_ON, s.ALWAYS_OFF):
        fast, _ = tracer(sampler)
        slow = _as_sdk_decides(tracer(sampler)[0])
        assert fast._root is not None, sampler.get_description()  # the shortcut is taken for these samplers
        a = start_server_span(fast, "pkg.S/M", (("user-agent", "x"),), "", "none", False, "")
        b = start_server_span(slow, "pkg.S/M", (("user-agent", "x"),), "", "none", False, "")
        ca, cb = a.get_span_context(), b.get_span_context()
        assert type(a) is type(b) and a.is_recording() == b.is_recording(), sampler.get_description()
        assert (ca.trace_flags, ca.is_remote, ca.is_valid, ca.trace_state) == (
            cb.trace_flags, cb.is_remote, cb.is_valid, cb.trace_state
        )  # fmt: skip
        assert ca == trace.SpanContext(ca.trace_id, ca.span_id, False, ca.trace_flags)
        assert ca.trace_id != cb.trace_id and ca.span_id != cb.span_id  # fresh ids each
        if a.is_recording():
            assert a.attributes == b.attributes == attributes
    ratio, _ = tracer(s.ParentBased(s.TraceIdRatioBased(0.5)))
    assert ratio._root is None  # any other sampler is asked for every span
