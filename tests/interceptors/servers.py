"""Real demo servers for core tests: aio and sync, with a handler-call counter."""

from __future__ import annotations

import contextlib
from concurrent import futures

import grpc
from grpc import aio

from harness.core.settings import FaultSettings
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import (
    DrillClientInterceptor,
    FaultServerInterceptor,
    SyncDrillClientInterceptor,
    SyncFaultServerInterceptor,
    Tagging,
)


class CountingAioServicer(drill_pb2_grpc.DemoServicer):
    """aio servicer that counts handler runs (to prove abort/drop never run the handler)."""

    def __init__(self) -> None:
        self.calls = 0

    async def Call(self, request, context):  # noqa: N802
        self.calls += 1
        return drill_pb2.CallReply(payload=request.payload, served_by="aio")

    async def Stream(self, request, context):  # noqa: N802
        self.calls += 1
        for i in range(request.count or 3):
            yield drill_pb2.CallReply(payload=f"{i}")


@contextlib.asynccontextmanager
async def aio_server(settings: FaultSettings, metrics: bool | None = True, tracer=None, servicer=None, stop=None):
    """A real grpc.aio server with the fault interceptor on 127.0.0.1; yields (port, servicer)."""
    servicer = CountingAioServicer() if servicer is None else servicer
    server = aio.server(interceptors=[FaultServerInterceptor(settings, metrics=metrics, tracer=tracer, stop=stop)])
    drill_pb2_grpc.add_DemoServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port, servicer
    finally:
        await server.stop(0)


@contextlib.asynccontextmanager
async def aio_stub(port: int, tagging: Tagging | None = None, **kw):
    ic = DrillClientInterceptor(tagging or Tagging(), **kw)
    async with aio.insecure_channel(f"127.0.0.1:{port}", interceptors=ic.with_streams()) as ch:
        yield drill_pb2_grpc.DemoStub(ch)


class CountingServicer(drill_pb2_grpc.DemoServicer):
    """Sync servicer that counts handler runs."""

    def __init__(self) -> None:
        self.calls = 0

    def Call(self, request, context):  # noqa: N802
        self.calls += 1
        return drill_pb2.CallReply(payload=request.payload, served_by="sync")

    def Stream(self, request, context):  # noqa: N802
        self.calls += 1
        for i in range(request.count or 3):
            yield drill_pb2.CallReply(payload=f"{i}")


@contextlib.contextmanager
def sync_server(settings: FaultSettings, metrics: bool | None = True, servicer=None, stop=None, workers: int = 16):
    servicer = CountingServicer() if servicer is None else servicer
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers),
        interceptors=[SyncFaultServerInterceptor(settings, metrics=metrics, stop=stop)],
    )
    drill_pb2_grpc.add_DemoServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port, servicer
    finally:
        server.stop(0)


@contextlib.contextmanager
def sync_stub(port: int, tagging: Tagging | None = None, **kw):
    ic = SyncDrillClientInterceptor(tagging or Tagging(), **kw)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        yield drill_pb2_grpc.DemoStub(grpc.intercept_channel(ch, ic))
