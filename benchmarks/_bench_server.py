"""A demo server in one of the benchmark modes; prints its port, serves until killed.

    python benchmarks/_bench_server.py aio|sync MODE [--workers N] [--gc-freeze]   (DRILL_BENCH_TREE=DIR: other tree)

Modes: baseline (no interceptor), off (interceptor installed, switch off), on
(switch on, organic traffic, metrics), on-trace (switch on, metrics and an
OpenTelemetry span per call, every call sampled: `parentbased_always_on`),
on-trace-unsampled (the same with `parentbased_always_off`: the cost of tracing
being configured while callers send no sampled context), on-trace-exported (every
call sampled and each span handed to a BatchSpanProcessor whose exporter discards
it: what exporting costs in this process, without a collector).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import pathlib
import sys
from concurrent import futures

import grpc
from grpc import aio

#: The checkout whose harness serves (DRILL_BENCH_TREE, for before/after runs; default: this one).
sys.path.insert(0, os.environ.get("DRILL_BENCH_TREE") or str(pathlib.Path(__file__).resolve().parent.parent))

from harness.core.settings import FaultSettings  # noqa: E402
from harness.demo.proto import drill_pb2, drill_pb2_grpc  # noqa: E402
from harness.interceptors import FaultServerInterceptor, SyncFaultServerInterceptor  # noqa: E402

MODES = ("baseline", "off", "on", "on-trace", "on-trace-unsampled", "on-trace-exported")
SAMPLERS = {
    "on-trace": "parentbased_always_on",
    "on-trace-unsampled": "parentbased_always_off",
    "on-trace-exported": "parentbased_always_on",
}


class Aio(drill_pb2_grpc.DemoServicer):
    async def Call(self, request, context):  # noqa: N802
        return drill_pb2.CallReply(payload=request.payload)


class Sync(drill_pb2_grpc.DemoServicer):
    def Call(self, request, context):  # noqa: N802
        return drill_pb2.CallReply(payload=request.payload)


def interceptors(mode: str, sync: bool) -> list:
    if mode == "baseline":
        return []
    cls = SyncFaultServerInterceptor if sync else FaultServerInterceptor
    if mode == "off":
        return [cls(FaultSettings(enabled=False, service="bench"))]
    tracer = None
    if mode in SAMPLERS:
        os.environ["OTEL_TRACES_SAMPLER"] = SAMPLERS[mode]  # read when the provider is built
        from harness.core.tracing import setup_tracing

        tracer = setup_tracing("bench", exporter="none")
        if mode == "on-trace-exported":
            from opentelemetry import trace
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

            class Discard(SpanExporter):
                def export(self, spans):
                    return SpanExportResult.SUCCESS

            trace.get_tracer_provider().add_span_processor(BatchSpanProcessor(Discard()))
    # max_active well above rate x delay even when the machine stalls: every delayed call is delayed
    return [cls(FaultSettings(enabled=True, seed=1, service="bench", max_active=100_000), tracer=tracer)]


def freeze_heap() -> None:
    """What `drill serve` does once serving (`harness.demo.lifecycle.freeze_startup_heap`); the same two calls
    here when the tree under test (DRILL_BENCH_TREE) predates it."""
    try:
        from harness.demo.lifecycle import freeze_startup_heap
    except ImportError:
        gc.collect()
        gc.freeze()
    else:
        freeze_startup_heap()


async def serve_aio(mode: str, freeze: bool = False) -> None:
    server = aio.server(interceptors=interceptors(mode, sync=False))
    drill_pb2_grpc.add_DemoServicer_to_server(Aio(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    if freeze:
        freeze_heap()
    print(port, flush=True)
    await server.wait_for_termination()


def serve_sync(mode: str, workers: int, freeze: bool = False) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), interceptors=interceptors(mode, sync=True))
    drill_pb2_grpc.add_DemoServicer_to_server(Sync(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    if freeze:
        freeze_heap()
    print(port, flush=True)
    server.wait_for_termination()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("flavour", choices=("aio", "sync"))
    ap.add_argument("mode", choices=MODES)
    ap.add_argument("--workers", type=int, default=64, help="sync server threads")
    ap.add_argument("--gc-freeze", action="store_true", help="gc.collect() and gc.freeze() once started")
    args = ap.parse_args()
    if args.flavour == "aio":
        asyncio.run(serve_aio(args.mode, args.gc_freeze))
    else:
        serve_sync(args.mode, args.workers, args.gc_freeze)


if __name__ == "__main__":
    main()
