"""Every kind of method gets every fault, in both server flavours, against a service that is not the demo.

`tests/interceptors/kinds.py`: unary, server-, client- and bidi-streaming methods on grpc.aio (coroutine and
async-generator handlers; handlers that use `context.read()`/`write()`; plain functions and generators
on its executor) and on sync grpc. Each call is made by a plain grpc client (no harness interceptor),
so what is checked is what any caller sees: the status, the `x-drill-fault` trailer, the messages, and
on the server the hit, the call's series, the audit line and the span.

Timing: a fault's wait is checked where the method guarantees it, as a lower bound on one monotonic
clock shared by the test and its servers (same process): a delay of D on a single response holds the
response for at least D after the handler returned (the handler notes its end before it returns; the
client notes the response's arrival after it came); a delay of D on a response stream starts the handler
at least D after the call began (the client notes the start before the call is sent; the server's wait
begins after it received the call). A drop of D closes the call at least D after it began. No upper
bound is asserted: nothing bounds how late a loaded machine runs a thread.
"""

from __future__ import annotations

import logging
import time

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harness.core.faults import Kind
from harness.core.tracing import HarnessTracer
from tests.conftest import sample
from tests.interceptors import kinds as K

FLAVOURS = ("aio", "aio-rw", "aio-sync", "sync")
D = 0.2  # the delay and drop, seconds
DIRECTIVES = (f"delay:{int(D * 1000)}", "abort:UNAVAILABLE", f"drop:{int(D * 1000)}")


def wait_for(predicate, timeout: float = 10.0) -> bool:
    """The server records a call when its handler's wrapper ends, which may be just after the caller saw the
    status (an abort sends it before the handler unwinds): poll, bounded."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


@pytest.fixture(scope="module")
def servers():
    """One server per flavour for the whole module; yields {flavour: (port, log, service)}."""
    with K.servers("sf", FLAVOURS) as out:
        yield out


@pytest.mark.parametrize("directive", DIRECTIVES)
@pytest.mark.parametrize("kind", K.KINDS, ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_every_kind_gets_every_directive_with_the_marker(servers, flavour, kind, directive, caplog):
    caplog.set_level(logging.INFO, logger="drill.audit")
    port, log, service = servers[flavour]
    mode = directive.partition(":")[0]
    rid = f"{flavour}-{kind.value}-{mode}"
    m = K.method(kind)
    calls = dict(service=service, grpc_method=m, traffic="drill", fault_mode=mode)
    status = "OK" if mode == "delay" else "UNAVAILABLE"
    before = sample("drill_server_calls_total", grpc_status=status, **calls)
    hits = sample("drill_fault_hits_total", service=service, grpc_method=m, mode=mode)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        seen = K.call(ch, kind, K.drill_md(directive, rid), n=4)

    assert seen.marker == mode  # before: no marker on client- and bidi-streaming methods
    if mode == "abort":
        assert (seen.code, seen.details, seen.count) == ("UNAVAILABLE", "injected fault: UNAVAILABLE", 0)
        assert log.times(rid, "start") == []  # the handler never ran, nor read a message
    elif mode == "drop":
        assert (seen.code, seen.details, seen.count) == ("UNAVAILABLE", "injected drop", 0)
        assert log.times(rid, "start") == []
        assert seen.end - seen.start >= D
    else:
        assert seen.code == "OK" and seen.count == (1 if not kind.response_streaming else 4)
        if kind.response_streaming:  # the first message is late: the handler starts D after the call began
            assert log.times(rid, "start")[0] - seen.start >= D
        else:  # the response is late: it arrives D after the handler returned
            assert seen.arrived[0] - log.times(rid, "end")[0] >= D
    assert sample("drill_fault_hits_total", service=service, grpc_method=m, mode=mode) == hits + 1
    assert wait_for(lambda: sample("drill_server_calls_total", grpc_status=status, **calls) == before + 1)
    lines = [r.getMessage() for r in caplog.records if '"event":"fault_hit"' in r.getMessage()]
    assert any(f'"request_id":"{rid}"' in x and f'"mode":"{mode}"' in x and f'"method":"{m}"' in x for x in lines)


@pytest.mark.parametrize("kind", K.KINDS, ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_organic_and_missed_calls_of_every_kind_are_untouched_and_counted(servers, flavour, kind):
    port, log, service = servers[flavour]
    m = K.method(kind)
    organic = dict(service=service, grpc_method=m, grpc_status="OK", fault_mode="none")
    before = {t: sample("drill_server_calls_total", traffic=t, **organic) for t in ("organic", "drill")}
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        plain = K.call(ch, kind, (), n=3)
        missed = K.call(ch, kind, K.drill_md("abort:UNAVAILABLE", f"miss-{flavour}-{kind.value}", x_fault_ratio="0"))
        foreign = K.call(ch, kind, (("x-tenant-id", "tenant-acme"), ("x-fault", "abort:UNAVAILABLE")), n=3)
    expected = 1 if not kind.response_streaming else 3
    assert (plain.code, plain.marker, plain.count) == ("OK", None, expected)
    assert (missed.code, missed.marker) == ("OK", None)
    assert (foreign.code, foreign.marker, foreign.count) == ("OK", None, expected)
    assert wait_for(lambda: sample("drill_server_calls_total", traffic="organic", **organic) == before["organic"] + 2)
    assert sample("drill_server_calls_total", traffic="drill", **organic) == before["drill"] + 1
    assert sample("drill_fault_skipped_total", service=service, grpc_method=m, reason="tenant") >= 1
    assert sample("drill_fault_skipped_total", service=service, grpc_method=m, reason="ratio") >= 1


@pytest.mark.parametrize("flavour", ["aio", "sync"])
def test_streams_get_a_span_whose_trace_id_is_in_the_audit_line(flavour, caplog):
    caplog.set_level(logging.INFO, logger="drill.audit")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = HarnessTracer(provider.get_tracer("test"))
    service = f"sf-span-{flavour}"
    with K.server(flavour, K.settings(service), tracer=tracer) as (port, _):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            for kind in (Kind.CLIENT_STREAMING, Kind.BIDI_STREAMING):
                K.call(ch, kind, K.drill_md("abort:INTERNAL", f"span-{flavour}-{kind.value}"))
                K.call(ch, kind, ())
        assert wait_for(lambda: len(exporter.get_finished_spans()) == 4)
    spans = {(s.name, s.attributes["drill.fault.mode"]): s for s in exporter.get_finished_spans()}
    for kind in (Kind.CLIENT_STREAMING, Kind.BIDI_STREAMING):
        hit, organic = spans[(K.method(kind), "abort")], spans[(K.method(kind), "none")]
        assert hit.attributes["drill.fault.hit"] is True and hit.attributes["rpc.grpc.status_code"] == "INTERNAL"
        assert organic.attributes["drill.fault.hit"] is False and organic.attributes["rpc.grpc.status_code"] == "OK"
        tid = format(hit.context.trace_id, "032x")
        assert any(f'"trace_id":"{tid}"' in r.getMessage() and f"span-{flavour}-{kind.value}" in r.getMessage()
                   for r in caplog.records)  # fmt: skip
