"""The demo gRPC service: one hop of the demo topology (`drill serve`).

With no downstream it answers every unary method OK (after its work time).
With a downstream it calls the next hop through a caller (plain, or the
resilience layer's) and passes the scope's drill keys along. Capacity is
bounded (max concurrent handlers plus a queue), so overload is real: calls
beyond both are refused with RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

import grpc
from grpc import aio

from harness.proto import drill_pb2, drill_pb2_grpc

#: A downstream caller: (method name, request, context) -> reply. The resilience layer provides richer ones.
Downstream = Callable[[str, drill_pb2.CallRequest, aio.ServicerContext], Awaitable[drill_pb2.CallReply]]


@dataclasses.dataclass
class Capacity:
    """Bounded work: `concurrency` handlers at once, `queue` more waiting, `work_ms` each."""

    concurrency: int = 64
    queue: int = 256
    work_ms: float = 0.0


class DemoServicer(drill_pb2_grpc.DemoServicer):
    def __init__(
        self,
        service: str,
        instance_id: str,
        capacity: Capacity | None = None,
        downstream: Downstream | None = None,
    ) -> None:
        self.service = service
        self.instance_id = instance_id
        self.capacity = capacity or Capacity()
        self.downstream = downstream
        self._slots = asyncio.Semaphore(self.capacity.concurrency)
        self._waiting = 0

    async def _serve(self, method: str, request, context) -> drill_pb2.CallReply:
        cap = self.capacity
        if self._slots.locked() and self._waiting >= cap.queue:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{self.service} overloaded")
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        try:
            work = (cap.work_ms + max(0, request.work_ms)) / 1000.0
            if work > 0:
                await asyncio.sleep(work)
            if self.downstream is None:
                return drill_pb2.CallReply(payload=request.payload, served_by=self.instance_id, path=[self.service])
            reply = await self.downstream(method, request, context)
            return drill_pb2.CallReply(
                payload=reply.payload, served_by=reply.served_by, path=[self.service, *reply.path]
            )
        finally:
            self._slots.release()

    async def Call(self, request, context):  # noqa: N802 - grpc naming
        return await self._serve("Call", request, context)

    async def Write(self, request, context):  # noqa: N802
        return await self._serve("Write", request, context)

    async def Stream(self, request, context):  # noqa: N802
        count = request.count or 3
        for i in range(min(count, 1000)):
            if self.capacity.work_ms:
                await asyncio.sleep(self.capacity.work_ms / 1000.0)
            yield drill_pb2.CallReply(payload=f"{request.payload}#{i}", served_by=self.instance_id, path=[self.service])


def plain_downstream(channel: aio.Channel, timeout_s: float | None = None) -> Downstream:
    """Downstream caller without resilience: one attempt, the given timeout (None = none)."""
    stub = drill_pb2_grpc.DemoStub(channel)

    async def call(method: str, request, context):
        try:
            return await getattr(stub, method)(request, timeout=timeout_s)
        except aio.AioRpcError as err:
            await context.abort(err.code(), err.details() or "downstream failed")

    return call
