"""A demo server in one of the benchmark modes; prints its port, serves until killed.

Modes: baseline (no interceptor), off (interceptor installed, switch off),
on (switch on, organic traffic, metrics), on-trace (switch on, metrics and tracing).
"""

from __future__ import annotations

import asyncio
import sys
from concurrent import futures

import grpc
from grpc import aio

from harness.core.settings import FaultSettings
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import FaultServerInterceptor, SyncFaultServerInterceptor


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
    if mode == "on-trace":
        from harness.core.tracing import setup_tracing

        tracer = setup_tracing("bench", exporter="none")
    return [cls(FaultSettings(enabled=True, seed=1, service="bench"), tracer=tracer)]


async def serve_aio(mode: str) -> None:
    server = aio.server(interceptors=interceptors(mode, sync=False))
    drill_pb2_grpc.add_DemoServicer_to_server(Aio(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


def serve_sync(mode: str) -> None:
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=64), interceptors=interceptors(mode, sync=True)
    )
    drill_pb2_grpc.add_DemoServicer_to_server(Sync(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    flavour, mode = sys.argv[1], sys.argv[2]
    if flavour == "aio":
        asyncio.run(serve_aio(mode))
    else:
        serve_sync(mode)
