"""OpenTelemetry wiring: spans with drill attributes, W3C context in gRPC metadata.

Exporters are configured by the standard `OTEL_*` variables. Tracing is off
unless `setup_tracing()` is called (or the interceptors are given a tracer),
so the hot path pays nothing for it by default. With it on, every call is
sampled by default (`ParentBased(AlwaysOn)`, or `OTEL_TRACES_SAMPLER`): a server
span reads the caller's context only when the metadata carries a key the
propagator reads, and gets its drill attributes in one go at start.
"""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagate import extract, get_global_textmap, inject

ATTR_TENANT = "drill.tenant"
ATTR_MODE = "drill.fault.mode"
ATTR_HIT = "drill.fault.hit"
ATTR_REQUEST_ID = "drill.request_id"

_configured = False


def setup_tracing(service: str, exporter: str | None = None) -> trace.Tracer:
    """Install an SDK TracerProvider once per process and return the harness tracer.

    `exporter` (or `OTEL_TRACES_EXPORTER`): `otlp` needs the OTLP exporter
    package; `console` prints spans; anything else keeps spans in-process
    (they still give trace ids for exemplars and audit lines).
    """
    global _configured
    if not _configured:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        kind = (exporter or os.environ.get("OTEL_TRACES_EXPORTER", "none")).lower()
        if kind == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif kind == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            except ImportError as exc:  # pragma: no cover - optional dependency
                raise RuntimeError("OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp") from exc
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        _configured = True
    return trace.get_tracer("drill-harness")


def trace_id_hex(span: trace.Span | None) -> str:
    """32-hex trace id of a recording span, or '' (for audit lines and exemplars)."""
    if span is None:
        return ""
    ctx = span.get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""


def extract_context(metadata) -> object:
    """Parent context from incoming gRPC metadata (W3C traceparent)."""
    carrier = {}
    for item in metadata or ():
        if isinstance(item[1], str):
            carrier[item[0]] = item[1]
    return extract(carrier)


_NO_PARENT = Context()
_fields: tuple[object, frozenset[str]] = (None, frozenset())


def _propagation_keys() -> frozenset[str]:
    """Metadata keys the global propagator reads (`traceparent`, `tracestate`, `baggage` by default)."""
    global _fields
    textmap = get_global_textmap()
    if _fields[0] is not textmap:
        _fields = (textmap, frozenset(textmap.fields))
    return _fields[1]


def start_server_span(
    tracer, name: str, metadata, tenant: str, mode: str, hit: bool, request_id: str
) -> trace.Span:
    """A SERVER span for one call, child of the caller's span when the metadata carries its context."""
    keys = _propagation_keys()
    parent = _NO_PARENT  # what extracting from metadata without any propagation key gives
    for item in metadata or ():
        if item[0] in keys:
            parent = extract_context(metadata)
            break
    attributes = {ATTR_TENANT: tenant, ATTR_MODE: mode, ATTR_HIT: hit, ATTR_REQUEST_ID: request_id}
    return tracer.start_span(name, context=parent, kind=trace.SpanKind.SERVER, attributes=attributes)


def end_server_span(span: trace.Span, status: str) -> None:
    span.set_attribute("rpc.grpc.status_code", status)
    span.end()


def start_client_span(tracer, method) -> trace.Span:
    """A CLIENT span for one outgoing call, child of the current context (e.g. the server span)."""
    name = method.decode() if isinstance(method, bytes) else method
    return tracer.start_span(name.lstrip("/"), kind=trace.SpanKind.CLIENT)


def client_span_metadata(span: trace.Span, tagging, tenant: str | None, request_id: str) -> list[tuple[str, str]]:
    """Tag the client span with the drill attributes and return its W3C context as metadata."""
    span.set_attribute(ATTR_TENANT, tenant or "")
    span.set_attribute(ATTR_MODE, tagging.fault_mode)
    span.set_attribute(ATTR_REQUEST_ID, request_id)
    carrier: dict[str, str] = {}
    inject(carrier, context=trace.set_span_in_context(span))
    return list(carrier.items())


def end_client_span(span: trace.Span, code) -> None:
    name = getattr(code, "name", str(code))
    span.set_attribute("rpc.grpc.status_code", name)
    span.end()
