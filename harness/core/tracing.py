"""OpenTelemetry wiring: spans with drill attributes, W3C context in gRPC metadata.

Exporters are configured by the standard `OTEL_*` variables. Tracing is off
unless `setup_tracing()` is called (or the interceptors are given a tracer),
so the hot path pays nothing for it by default. With it on, every call is
sampled by default (`ParentBased(AlwaysOn)`, or `OTEL_TRACES_SAMPLER`): a server
span reads the caller's context only when the metadata carries a key the
propagator reads, and gets its drill attributes in one go at start.

`setup_tracing` returns a `HarnessTracer`. While the provider has a span
processor (an exporter), its spans are the SDK's own. With none (the `none`
exporter: spans give trace ids to exemplars and audit lines and nothing reads
them), a sampled span is an `UnexportedSpan`: the same ids, sampling decision
and attributes, without the SDK's bookkeeping for an export that never happens
(locked bounded attributes, a read-only copy at end): about a fifth of the cost.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence

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
    return HarnessTracer(trace.get_tracer("drill-harness"))


_UNSET = trace.Status(trace.StatusCode.UNSET)
_FLAGS = {
    (sampled, random): trace.TraceFlags(
        (trace.TraceFlags.SAMPLED if sampled else trace.TraceFlags.DEFAULT)
        | (trace.TraceFlags.RANDOM_TRACE_ID if random else 0)
    )
    for sampled in (False, True)
    for random in (False, True)
}


class UnexportedSpan(trace.Span):
    """A sampled, recording span of a provider with no span processor: ids, attributes and times only."""

    __slots__ = ("_context", "_name", "_kind", "_parent", "_attributes", "_events", "_status", "_start", "_end")

    def __init__(self, name, context, parent, kind, attributes, start_time) -> None:
        self._name = name
        self._context = context
        self._parent = parent
        self._kind = kind
        self._attributes = dict(attributes) if attributes else {}
        self._events: list = []
        self._status = _UNSET
        self._start = start_time if start_time is not None else time.time_ns()
        self._end: int | None = None

    def get_span_context(self) -> trace.SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._end is None

    def set_attributes(self, attributes: Mapping) -> None:
        if self._end is None:
            self._attributes.update(attributes)

    def set_attribute(self, key: str, value) -> None:
        if self._end is None:
            self._attributes[key] = value

    def add_event(self, name: str, attributes=None, timestamp: int | None = None) -> None:
        if self._end is None:
            self._events.append((name, attributes, timestamp if timestamp is not None else time.time_ns()))

    def update_name(self, name: str) -> None:
        if self._end is None:
            self._name = name

    def set_status(self, status, description: str | None = None) -> None:
        if self._end is None:
            self._status = status if isinstance(status, trace.Status) else trace.Status(status, description)

    def record_exception(self, exception, attributes=None, timestamp=None, escaped=False) -> None:
        self.add_event("exception", {"exception.type": type(exception).__name__, **(attributes or {})}, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end is None:
            self._end = end_time if end_time is not None else time.time_ns()

    @property
    def attributes(self) -> Mapping:
        return self._attributes

    @property
    def name(self) -> str:
        return self._name


def _checked_layout() -> bool:
    """Whether `SpanContext` is the tuple its own `__new__` builds: (trace id, span id, remote, flags,
    state, valid). Then a local span context of generated (valid) ids is built without that `__new__`."""
    try:
        flags = _FLAGS[(True, True)]
        made = trace.SpanContext(0x1F, 0x2F, False, flags)
        fast = tuple.__new__(trace.SpanContext, (0x1F, 0x2F, False, flags, trace.DEFAULT_TRACE_STATE, True))
        read = (fast.trace_id, fast.span_id, fast.is_remote, fast.is_valid, fast.trace_flags)
        return made == fast and read == (0x1F, 0x2F, False, True, flags)
    except Exception:  # noqa: BLE001 - another layout: the public constructor
        return False


_FAST_CONTEXT = _checked_layout()


def _span_context(trace_id: int, span_id: int, flags: trace.TraceFlags) -> trace.SpanContext:
    """A local span context for generated ids (never 0, within range: the SDK's id generators' promise)."""
    if _FAST_CONTEXT and trace_id and span_id:
        return tuple.__new__(trace.SpanContext, (trace_id, span_id, False, flags, trace.DEFAULT_TRACE_STATE, True))
    return trace.SpanContext(trace_id, span_id, False, flags)


#: Descriptions of the SDK's samplers whose answer for a root span is fixed: (sampled, recording).
_STATIC = {"AlwaysOnSampler": (True, True), "AlwaysOffSampler": (False, False)}


def _root_decision(sampler) -> tuple[bool, bool] | None:
    """What the SDK's `always_on`/`always_off` sampler, alone or as a `ParentBased` root (the default,
    `parentbased_always_on`), answers for a root span: the same every time (attributes kept, no trace
    state), so a root span needs no call to it. None for any other sampler: it is asked every time."""
    from opentelemetry.sdk.trace.sampling import ParentBased, StaticSampler

    description = sampler.get_description()
    if type(sampler) is StaticSampler:
        return _STATIC.get(description)
    if type(sampler) is ParentBased and description.startswith("ParentBased{root:"):
        return _STATIC.get(description[len("ParentBased{root:") :].split(",", 1)[0])
    return None


class HarnessTracer(trace.Tracer):
    """The SDK tracer, with `UnexportedSpan`s for sampled spans while its provider has no span processor."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer
        self._sampler = getattr(tracer, "sampler", None)
        self._ids = getattr(tracer, "id_generator", None)
        self._processors = getattr(getattr(tracer, "span_processor", None), "_span_processors", None)
        self._processor = getattr(tracer, "span_processor", None)
        self._fast = self._sampler is not None and self._ids is not None and self._processors is not None
        self._random_ids = bool(self._ids.is_trace_id_random()) if self._fast else False
        #: (sampled, recording) of a root span when the sampler's answer for one is fixed, else None.
        self._root = _root_decision(self._sampler) if self._fast else None

    def _unexported(self) -> bool:
        # the provider's processors may be added later: looked at on every span (one attribute read)
        return self._fast and not self._processor._span_processors

    def start_span(
        self,
        name: str,
        context=None,
        kind: trace.SpanKind = trace.SpanKind.INTERNAL,
        attributes=None,
        links: Sequence | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        if not self._unexported():
            return self._tracer.start_span(
                name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception
            )
        if context is _NO_PARENT and self._root is not None:  # a root span of a fixed-answer sampler
            sampled, recording = self._root
            span_context = _span_context(
                self._ids.generate_trace_id(), self._ids.generate_span_id(), _FLAGS[(sampled, self._random_ids)]
            )
            if not recording:
                return trace.NonRecordingSpan(span_context)
            return UnexportedSpan(name, span_context, None, kind, attributes, start_time)
        # what the SDK's own start_span decides: the parent, the ids, the sampler's word
        parent = None if context is _NO_PARENT else trace.get_current_span(context).get_span_context()
        if parent is None or not parent.is_valid:  # a root span
            parent = None
            trace_id = self._ids.generate_trace_id()
        else:
            trace_id = parent.trace_id
        result = self._sampler.should_sample(context, trace_id, name, kind, attributes, links)
        random = parent.trace_flags.random_trace_id if parent is not None else self._random_ids
        span_context = trace.SpanContext(
            trace_id, self._ids.generate_span_id(), is_remote=False,
            trace_flags=_FLAGS[(result.decision.is_sampled(), bool(random))], trace_state=result.trace_state,
        )  # fmt: skip
        if not result.decision.is_recording():
            return trace.NonRecordingSpan(span_context)
        return UnexportedSpan(name, span_context, parent, kind, result.attributes, start_time)

    def start_as_current_span(self, *args, **kwargs):
        return self._tracer.start_as_current_span(*args, **kwargs)


def sampled_trace_id(span: trace.Span | None) -> int:
    """The trace id of a sampled span, or 0 (an int: what a batch keeps instead of the span itself)."""
    if span is None:
        return 0
    ctx = span.get_span_context()
    return ctx.trace_id if ctx.is_valid and ctx.trace_flags.sampled else 0


def trace_id_hex(span: trace.Span | None) -> str:
    """32-hex trace id of a sampled span, or '' (for audit lines and exemplars: an unsampled trace is
    never recorded, so nothing could be found under its id)."""
    tid = sampled_trace_id(span)
    return format(tid, "032x") if tid else ""


def extract_context(metadata) -> object:
    """Parent context from incoming gRPC metadata (W3C traceparent)."""
    carrier = {}
    for item in metadata or ():
        if isinstance(item[1], str):
            carrier[item[0]] = item[1]
    return extract(carrier)


_NO_PARENT = Context()
_fields: tuple[object, frozenset[str]] = (None, frozenset())


def propagation_keys() -> frozenset[str]:
    """Metadata keys the global propagator reads (`traceparent`, `tracestate`, `baggage` by default)."""
    global _fields
    textmap = get_global_textmap()
    if _fields[0] is not textmap:
        _fields = (textmap, frozenset(textmap.fields))
    return _fields[1]


def start_server_span(tracer, name: str, metadata, tenant: str, mode: str, hit: bool, request_id: str) -> trace.Span:
    """A SERVER span for one call, child of the caller's span when the metadata carries its context."""
    keys = propagation_keys()
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
