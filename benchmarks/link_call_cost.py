"""What carrying the drill's call faults costs `drill link` per unary call, in-process: bytes and CPU of frame work.

    .venv/bin/python benchmarks/link_call_cost.py

1. Bytes per call: N sequential unary calls (grpc.aio client and server, 100-byte messages, a fresh x-request-id and
   a tenant each) through a link on one connection, counted where the link reads them, with call faults off
   (HPACK's dynamic table in use) and on (every block stands alone: SETTINGS_HEADER_TABLE_SIZE = 0, docs/link.md).
2. CPU per call of the link's frame work: the chunks each conversation carried (from the connection's first byte)
   are replayed through a fresh `H2Conn` (no sockets, no event loop, writes discarded), best of 7, process CPU
   time / calls: off; on with organic calls; on with drill calls the gate passes (tenant, no directive); on with
   every call aborted at the start (the gate, the plan, metrics off, the answer written). Then as
   `drill proxy --plane link` carries them (a hop: every call is begun and recorded, organic ones too), the organic
   and abort loads, a caller that sends a `traceparent`, without spans and with them, as the proxy makes them when
   OTEL_TRACES_EXPORTER names an exporter: the harness's tracer over an SDK TracerProvider with a
   BatchSpanProcessor whose exporter discards the batch (a span's start, attributes, end and queueing are
   counted, an exporter's encoding and sending are not); the batch thread's CPU is counted (process CPU time, the
   provider flushed inside the timed part, every span checked exported).
The sockets, the event loop and the metrics are left out on purpose: what differs between off and on is the
frame work, and benchmarks/call_fault_planes.py measures the whole process beside drill proxy. The last line is
machine-readable: `link_call_cost off_us=… on_organic_us=… on_abort_us=… off_bytes=… on_bytes=… hop_organic_us=…
hop_organic_spans_us=… hop_abort_us=… hop_abort_spans_us=…`.
"""

import asyncio
import pathlib
import sys
import time

from grpc import aio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._cpu import header  # noqa: E402
from harness.core.safety import EmergencyStop  # noqa: E402
from harness.core.settings import FaultSettings  # noqa: E402
from harness.core.tracing import HarnessTracer  # noqa: E402
from harness.link import h2, pipe  # noqa: E402
from harness.link.calls import LinkCalls  # noqa: E402
from harness.link.links import LinkSet  # noqa: E402
from tests.link.echo import BIG, echo_server, unary  # noqa: E402

N = 2000


def settings() -> FaultSettings:
    return FaultSettings(enabled=True, service="bench", max_active=N + 10)


async def record(calls_on: bool, md):
    """(bytes up per call, bytes down per call, the chunks each way in order) of N calls on one connection."""
    chunks: list[tuple[bool, bytes]] = []
    orig = pipe.Pipe.receive

    def receive(self, data):
        chunks.append((self is self.conn.up, bytes(data)))
        return orig(self, data)

    pipe.Pipe.receive = receive
    try:
        async with echo_server() as port:
            calls = LinkCalls(settings(), stop=EmergencyStop(), metrics=False)
            links = LinkSet(calls=calls if calls_on else None)
            link = await links.add("b", "127.0.0.1:0", f"127.0.0.1:{port}")
            async with aio.insecure_channel(f"127.0.0.1:{link.port}", options=BIG) as ch:
                await unary(ch)(b"warm", timeout=5)
                start = len(chunks)
                for i in range(N):
                    try:
                        await unary(ch)(b"x" * 100, metadata=md(i), timeout=5)
                    except aio.AioRpcError:
                        pass
                calls_part = chunks[start:]
            await links.close()
    finally:
        pipe.Pipe.receive = orig
    up = sum(len(c) for s, c in calls_part if s) / N
    down = sum(len(c) for s, c in calls_part if not s) / N
    return up, down, chunks


class Discard(SpanExporter):
    """An exporter that drops each batch: what is left is what the link and the SDK do per span."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def replay(chunks, calls_on: bool, hop: bool = False, spans: bool = False) -> float:
    """µs of CPU per call to read the recorded chunks through a fresh connection view."""
    best = float("inf")
    for _ in range(7):
        conn = h2.H2Conn(frozenset({"tenant-drill"}))
        conn.up.send = conn.down.send = lambda b: None
        loop = asyncio.new_event_loop()
        provider = exporter = tracer = None
        if spans:
            exporter = Discard()
            provider = TracerProvider()
            provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=4 * N))
            tracer = HarnessTracer(provider.get_tracer("drill-harness"))
        if calls_on:
            LinkCalls(settings(), stop=EmergencyStop(), metrics=False, hop=hop, tracer=tracer).connection(conn, loop)
        feed_up, feed_down = conn.up.feed, conn.down.feed
        t = time.process_time()
        for to_server, data in chunks:
            (feed_up if to_server else feed_down)(data)
        if provider is not None:
            provider.force_flush()
        best = min(best, time.process_time() - t)
        if provider is not None:
            assert exporter.spans == N + 1, f"{exporter.spans} spans exported of {N + 1} calls"  # none dropped
            provider.shutdown()
        loop.close()
    return best / (N + 1) * 1e6


async def main():
    organic = lambda i: (("x-request-id", f"req-{i:08d}"), ("x-tenant-id", "tenant-a"))  # noqa: E731
    drill = lambda i: (("x-request-id", f"req-{i:08d}"), ("x-tenant-id", "tenant-drill"))  # noqa: E731
    abort = lambda i: (*drill(i), ("x-fault", "abort:UNAVAILABLE"))  # noqa: E731
    traced = lambda md: lambda i: (*md(i), ("traceparent", f"00-{i + 1:032x}-{i + 1:016x}-01"))  # noqa: E731
    out = []
    for name, on, md in (("off", False, organic), ("on-organic", True, organic), ("on-drill-pass", True, drill),
                         ("on-abort", True, abort), ("hop-organic", True, traced(organic)),
                         ("hop-abort", True, traced(abort))):  # fmt: skip
        out.append((name, on, *await record(on, md)))
    return out


if __name__ == "__main__":
    print(header("link_call_cost", pinned=False))
    print(f"# python {sys.version.split()[0]}, N={N} unary calls on one connection, 100-byte messages", flush=True)
    got = {}
    for name, on, up, down, chunks in asyncio.run(main()):
        hop = name.startswith("hop-")
        for label, spans in ((name, False), (f"{name}-spans", True)) if hop else ((name, False),):
            got[label] = (up + down, replay(chunks, on, hop=hop, spans=spans))
            print(f"{label:18s} bytes/call up {up:6.1f} down {down:6.1f}   frame work {got[label][1]:5.1f} µs CPU/call",
                  flush=True)  # fmt: skip
    print(f"link_call_cost off_us={got['off'][1]:.1f} on_organic_us={got['on-organic'][1]:.1f} "
          f"on_abort_us={got['on-abort'][1]:.1f} off_bytes={got['off'][0]:.1f} on_bytes={got['on-organic'][0]:.1f} "
          + " ".join(f"{k.replace('-', '_')}_us={got[k][1]:.1f}" for k in
                     ("hop-organic", "hop-organic-spans", "hop-abort", "hop-abort-spans")))  # fmt: skip
