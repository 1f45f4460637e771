"""The demo gRPC service: one hop of the demo topology (`drill serve`).

With no downstream it answers every unary method OK (after its work time).
With a downstream it calls the next hop through a caller (plain, or the
resilience layer's) and passes the scope's drill keys along. Capacity is
bounded (max concurrent handlers plus a queue), so overload is real: calls
beyond both are refused with RESOURCE_EXHAUSTED (or the configured shed code).

Two places can enforce capacity. By default the servicer does (an injected
abort costs nothing). With `AdmissionInterceptor` placed before the fault
interceptor, every *attempt* takes a slot and pays the work time, even one the
fault then aborts: a failing dependency still costs its callers work, which is
what turns retries into a storm in the demo topology. The interceptor holds the
slot for the whole call, downstream included, like a worker thread would.

Work for a caller that left is not started: a call whose deadline passed while it
waited in the queue is answered DEADLINE_EXCEEDED as it gets its slot, without its
work or downstream calls, and counted in `drill_server_expired_total{where="queue"}`.
(grpc.aio cancels such a call at its deadline, but only once the event loop gets to
it: under overload that can be late.) `orphan_work=True` is the exception, on
purpose: it models a server that never checks.

`Exchange`, the demo's one bidi method, is served message by message: each message it
receives is one `Call` (its work time, then one unary `Call` down the chain under the
stream's drill scope, so the next hops see ordinary unary calls carrying the stream's
request id and drill keys) answered with one reply, in order, until the caller
half-closes. A failed downstream call ends the stream with its status. Capacity is
per message, not per stream: with `AdmissionInterceptor` each message takes a slot
(or a queue place, else the stream ends with the shed code) and pays the work time
(`admit_message`), as a unary call does; a stream's messages are never orphan work
(its handler ends with the caller).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import grpc
from grpc import aio

from harness.core import headers as h
from harness.core import metrics as m
from harness.core.faults import Mode
from harness.demo.proto import drill_pb2, drill_pb2_grpc

#: A downstream caller: (method name, request, context) -> reply. The resilience layer provides richer ones.
Downstream = Callable[[str, drill_pb2.CallRequest, aio.ServicerContext], Awaitable[drill_pb2.CallReply]]

_DEMO_SERVICE = drill_pb2.DESCRIPTOR.services_by_name["Demo"].full_name


def deadline_passed(context) -> bool:
    """Whether the caller's deadline has passed (a call without a deadline never expires)."""
    remaining = context.time_remaining()
    return remaining is not None and remaining <= 0


async def abort_expired(context, service: str, method: str, expired: m.ChildCache) -> None:
    """Count a call whose deadline passed in the queue and answer it DEADLINE_EXCEEDED (raises)."""
    expired(service, method, "queue").inc()
    await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"{service}: deadline passed while queued")


@dataclasses.dataclass
class Capacity:
    """Bounded work: `concurrency` handlers at once, `queue` more waiting, `work_ms` each."""

    concurrency: int = 64
    queue: int = 256
    work_ms: float = 0.0
    #: status of a shed call (RESOURCE_EXHAUSTED; load shedders often answer UNAVAILABLE)
    shed_code: str = "RESOURCE_EXHAUSTED"


class DemoServicer(drill_pb2_grpc.DemoServicer):
    def __init__(
        self,
        service: str,
        instance_id: str,
        capacity: Capacity | None = None,
        downstream: Downstream | None = None,
        admission: AdmissionInterceptor | None = None,
    ) -> None:
        self.service = service
        self.instance_id = instance_id
        self.capacity = capacity or Capacity()
        self.downstream = downstream
        #: the server's admission (None: `capacity` bounds the work): it admits each message of an Exchange
        self.admission = admission
        self._slots = asyncio.Semaphore(self.capacity.concurrency)
        self._waiting = 0
        self._expired = m.ChildCache(m.SERVER_EXPIRED)

    async def _serve(self, method: str, request, context) -> drill_pb2.CallReply:
        cap = self.capacity
        if self._slots.locked() and self._waiting >= cap.queue:
            await context.abort(grpc.StatusCode[cap.shed_code], f"{self.service} overloaded")
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        try:
            if deadline_passed(context):
                await abort_expired(context, self.service, f"{_DEMO_SERVICE}/{method}", self._expired)
            work = (cap.work_ms + max(0, request.work_ms)) / 1000.0
            if work > 0:
                await asyncio.sleep(work)
            if self.downstream is None:
                return drill_pb2.CallReply(
                    payload=request.payload, served_by=self.instance_id, path=[self.service]
                )
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
            yield drill_pb2.CallReply(
                payload=f"{request.payload}#{i}", served_by=self.instance_id, path=[self.service]
            )

    async def Exchange(self, request_iterator, context):  # noqa: N802
        """Bidi: each message served as a `Call` (down the chain under this stream's scope), one reply each."""
        async for request in request_iterator:
            if self.admission is None:
                yield await self._serve("Call", request, context)
            else:
                yield await self.admission.admit_message(
                    f"{_DEMO_SERVICE}/Exchange", context, lambda r=request: self._serve("Call", r, context)
                )


def plain_downstream(
    channel: aio.Channel | Sequence[aio.Channel], timeout_s: float | None = None
) -> Downstream:
    """Downstream caller without resilience: one attempt, the given timeout (None = none).

    Several channels (replicas of the next hop) are used round robin.
    """
    channels = list(channel) if isinstance(channel, (list, tuple)) else [channel]
    stubs = itertools.cycle([drill_pb2_grpc.DemoStub(c) for c in channels])

    async def call(method: str, request, context):
        stub = next(stubs)
        try:
            return await getattr(stub, method)(request, timeout=timeout_s)
        except aio.AioRpcError as err:
            await context.abort(err.code(), err.details() or "downstream failed")

    return call


class AdmissionInterceptor(aio.ServerInterceptor):
    """Bounded capacity for every attempt: a slot (or a queue place, else shed) plus the work time.

    Place it before the fault interceptor. Shed calls never reach the fault
    interceptor's metrics, so they are counted here: in `drill_server_calls_total`
    (status = the shed code, `traffic` by the tenant allowlist `tenants`, fault_mode
    `none`), so error rates and amplification see them, and in `drill_server_shed_total`.

    `orphan_work=True` models a thread-per-request server that never checks for
    cancellation: once admitted, the call's work (queue wait, work time, its own
    downstream calls) goes on after the caller has gone, holding its slot, and
    the answer is thrown away. That wasted work is what deadline propagation saves.
    """

    def __init__(
        self,
        service: str,
        capacity: Capacity,
        *,
        orphan_work: bool = False,
        tenants: frozenset[str] = frozenset({h.DEFAULT_DRILL_TENANT}),
    ) -> None:
        self.service = service
        self.capacity = capacity
        self.orphan_work = orphan_work
        self.tenants = tenants
        self._calls = m.ChildCache(m.SERVER_CALLS)
        self._slots = asyncio.Semaphore(capacity.concurrency)
        self._waiting = 0
        self._shed = m.ChildCache(m.SERVER_SHED)
        #: calls waiting for a slot, exported so a drill can show the queue that sustains an overload
        self._queue = m.SERVER_QUEUE.labels(service)
        self._queue.set(0)
        self._code = grpc.StatusCode[capacity.shed_code]
        self._orphans: set[asyncio.Task] = set()
        self._expired = m.ChildCache(m.SERVER_EXPIRED)

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """Hold one of the `concurrency` slots, waiting in the queue for it."""
        self._waiting += 1
        self._queue.set(self._waiting)
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
            self._queue.set(self._waiting)
        try:
            yield
        finally:
            self._slots.release()

    async def admit_message(self, method: str, context, serve: Callable[[], Awaitable]):
        """One message of a stream the servicer serves itself (the demo's `Exchange`): a slot, else the stream
        ends with the shed code; the work time; then `serve()`. The fault interceptor saw the stream begin and
        counts its status, so a shed or expired message counts only in `drill_server_shed_total` or
        `drill_server_expired_total` here."""
        if self._slots.locked() and self._waiting >= self.capacity.queue:
            self._shed(self.service, method).inc()
            await context.abort(self._code, f"{self.service} overloaded")
        async with self._slot():
            if deadline_passed(context):
                await abort_expired(context, self.service, method, self._expired)
            if self.capacity.work_ms > 0:
                await asyncio.sleep(self.capacity.work_ms / 1000.0)
            return await serve()

    async def _admitted(self, behavior, request, context, method: str):
        async with self._slot():
            if not self.orphan_work and deadline_passed(context):
                tenant = None
                try:
                    tenant = h.metadata_dict(context.invocation_metadata()).get(h.TENANT)
                except Exception:  # noqa: BLE001 - an odd context: count it organic
                    pass
                traffic = h.traffic_of(tenant, self.tenants)
                self._calls(self.service, method, "DEADLINE_EXCEEDED", traffic, Mode.NONE.value).inc()
                await abort_expired(context, self.service, method, self._expired)
            if self.capacity.work_ms > 0:
                await asyncio.sleep(self.capacity.work_ms / 1000.0)
            return await behavior(request, context)

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.response_streaming:
            return handler
        if m.is_infrastructure(handler_call_details.method):
            return handler  # a health check or reflection is a probe: it takes no slot and is never counted
        behavior = handler.unary_unary
        method = handler_call_details.method.lstrip("/")

        async def unary(request, context):
            if self._slots.locked() and self._waiting >= self.capacity.queue:
                self._shed(self.service, method).inc()
                tenant = h.metadata_dict(handler_call_details.invocation_metadata).get(h.TENANT)
                traffic = h.traffic_of(tenant, self.tenants)
                self._calls(self.service, method, self.capacity.shed_code, traffic, Mode.NONE.value).inc()
                await context.abort(self._code, f"{self.service} overloaded")
            if not self.orphan_work:
                return await self._admitted(behavior, request, context, method)
            task = asyncio.ensure_future(self._admitted(behavior, request, context, method))
            self._orphans.add(task)
            task.add_done_callback(self._forget)
            return await asyncio.shield(task)

        return grpc.unary_unary_rpc_method_handler(
            unary,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _forget(self, task: asyncio.Task) -> None:
        self._orphans.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: an orphan's failure has nobody to go to
