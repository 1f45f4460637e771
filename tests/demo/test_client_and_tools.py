"""Client tagging, tokens end to end, tracing/exemplars, `drill hits`, the half-open probe."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time

import grpc
import pytest
from grpc import aio
from prometheus_client import REGISTRY
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from harness.core import headers as h
from harness.core.environ import environ_now
from harness.core.settings import FaultSettings
from harness.demo.conntrack import count_states, watch_port
from harness.demo.probe import half_open, summarize
from harness.demo.proto import drill_pb2
from harness.interceptors import Tagging
from harness.interceptors._client_core import outgoing_metadata
from tests.conftest import ROOT, sample
from tests.interceptors.servers import aio_server, aio_stub


def test_outgoing_metadata_keeps_a_callers_request_id_and_adds_the_origin_deadline():
    t = Tagging(tenant="tenant-drill", directive="delay:5", ratio=30, target="ledger", instances=50)
    before = time.time()
    md, rid, tenant = outgoing_metadata([(h.REQUEST_ID, "fixed-1")], t, timeout=2.0)
    after = time.time()
    d = dict(md)
    assert rid == "fixed-1" and tenant == "tenant-drill"
    assert d[h.FAULT] == "delay:5" and d[h.FAULT_RATIO] == "30" and d[h.FAULT_TARGET] == "ledger"
    assert d[h.FAULT_INSTANCES] == "50"
    # now + timeout, by the clock read inside the call (between `before` and `after`, whatever stalled), written
    # with 3 decimals: ±0.5 ms of rounding
    assert before + 2.0 - 0.0005 <= float(d[h.ORIGIN_DEADLINE]) <= after + 2.0 + 0.0005, (d, before, after)
    md2, rid2, _ = outgoing_metadata(None, Tagging(), timeout=None)
    assert len(rid2) == 36 and dict(md2) == {h.REQUEST_ID: rid2}  # organic: only a request id


def test_signed_directives_inject_and_unsigned_ones_do_not():
    s = FaultSettings(enabled=True, seed=1, service="tok", secret="drill-secret")

    async def main():
        async with aio_server(s) as (port, servicer):
            async with aio_stub(port, Tagging(tenant="tenant-drill", directive="abort:INTERNAL")) as stub:
                ok = await stub.Call(drill_pb2.CallRequest(payload="spoofed"))
            signed = Tagging(tenant="tenant-drill", directive="abort:INTERNAL", target="tok", secret="drill-secret")
            async with aio_stub(port, signed) as stub:
                with pytest.raises(aio.AioRpcError) as info:
                    await stub.Call(drill_pb2.CallRequest())
            return ok, info.value.code(), servicer.calls

    ok, code, calls = asyncio.run(main())
    assert ok.payload == "spoofed" and code is grpc.StatusCode.INTERNAL and calls == 1
    assert sample("drill_fault_skipped_total", service="tok", grpc_method="drill.v1.Demo/Call", reason="token") == 1


def test_spans_carry_drill_attributes_and_audit_lines_and_exemplars_carry_the_trace_id(caplog):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    caplog.set_level(logging.INFO, logger="drill.audit")
    s = FaultSettings(enabled=True, seed=1, service="traced")

    async def main():
        async with aio_server(s, tracer=tracer) as (port, _):
            async with aio_stub(port, Tagging(tenant="tenant-drill", directive="delay:10")) as stub:
                await stub.Call(drill_pb2.CallRequest(), metadata=((h.REQUEST_ID, "trace-me"),))

    asyncio.run(main())
    (span,) = exporter.get_finished_spans()
    assert span.attributes["drill.tenant"] == "tenant-drill"
    assert span.attributes["drill.fault.mode"] == "delay"
    assert span.attributes["drill.fault.hit"] is True
    assert span.attributes["drill.request_id"] == "trace-me"
    trace_id = format(span.context.trace_id, "032x")
    assert any(trace_id in r.getMessage() for r in caplog.records if r.name == "drill.audit")
    # the OpenMetrics exposition /metrics serves on that Accept header (exemplars exist only there), rendered
    # in-process: served over HTTP, a worker's registry late in a full run took longer than any fixed timeout
    body = openmetrics_latest(REGISTRY).decode()
    assert any(
        line.startswith("drill_server_latency_seconds_bucket") and 'service="traced"' in line and trace_id in line
        for line in body.splitlines()
    )


def _drill(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    env = {**environ_now(), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_drill_hits_prints_id_tab_decision_matching_the_java_vectors(shared_dir):
    rows = [
        line.split("\t")
        for line in (shared_dir / "vectors" / "fault_hit_java.tsv").read_text().splitlines()[1:]
        if line and not line.startswith("#")
    ]
    seed, _, directive, ratio = rows[0][:4]
    same = [r for r in rows if r[0] == seed and r[2] == directive and r[3] == ratio and "\t" not in r[1]]
    ids = "\n".join(r[1] for r in same) + "\n"
    out = _drill("hits", "--seed", seed, "--directive", directive, "--ratio", ratio, stdin=ids)
    assert out.returncode == 0, out.stderr
    got = [line.split("\t") for line in out.stdout.splitlines()]
    assert got == [[r[1], "hit" if r[5] == "true" else "miss"] for r in same]


def test_drill_hits_refuses_a_directive_servers_would_reject():
    out = _drill("hits", "--seed", "1", "--directive", "sleep:5", stdin="a\n")
    assert out.returncode == 2 and "would refuse" in out.stderr


#: How long the half-open probe watches its connections (it stops once all closed)
PROBE_TIMEOUT_S = 10.0


def test_half_open_probe_reports_what_the_server_did_and_tcp_states_are_counted():
    s = FaultSettings(enabled=True, service="probe")

    async def main():
        async with aio_server(s) as (port, _):
            watch_port(port)
            loop = asyncio.get_running_loop()
            results = await loop.run_in_executor(None, lambda: half_open("127.0.0.1", port, count=5,
                                                                         timeout_s=PROBE_TIMEOUT_S))
            listening = count_states([port])
            return summarize(results), listening, port

    summary, states, port = asyncio.run(main())
    assert summary["connections"] == 5 and summary["refused"] == 0
    # grpc reads the client's EOF and closes: every half-open connection is reclaimed (eof or reset) while the
    # probe watches, which it does for PROBE_TIMEOUT_S at most (it stops once the last one closed). Quickly, but
    # not timed to the second: the server closes at once on a quiet box, a stalled one delays that by a second or
    # two, and the failure this guards (a server that keeps half-open connections until an idle or keepalive
    # timeout, minutes by default) leaves them open past the probe's 10 s
    assert summary["eof"] + summary["reset"] == 5, summary
    assert states.get((port, "LISTEN"), 0) >= 1


def test_probe_cli_rejects_bad_targets():
    out = _drill("probe", "half-open", "nonsense")
    assert out.returncode == 2 and "HOST:PORT" in out.stderr


def test_client_spans_parent_the_server_span_across_the_wire():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    from harness.interceptors import DrillClientInterceptor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")

    async def main():
        async with aio_server(FaultSettings(enabled=True, service="traced2"), tracer=tracer) as (port, _):
            ic = DrillClientInterceptor(Tagging(tenant="tenant-drill", directive="delay:1"), tracer=tracer)
            async with aio.insecure_channel(f"127.0.0.1:{port}", interceptors=[ic]) as ch:
                from harness.demo.proto import drill_pb2_grpc

                await drill_pb2_grpc.DemoStub(ch).Call(drill_pb2.CallRequest())

    asyncio.run(main())
    spans = {s.kind: s for s in exporter.get_finished_spans()}
    client, server = spans[SpanKind.CLIENT], spans[SpanKind.SERVER]
    assert server.context.trace_id == client.context.trace_id
    assert server.parent.span_id == client.context.span_id
    assert client.attributes["drill.fault.mode"] == "delay"
    assert client.attributes["rpc.grpc.status_code"] == "OK"
