"""Client interceptor for `grpc.aio` channels: drill tagging, active cancel, client metrics.

CANCELLED (from active cancel or the caller) is counted as CANCELLED, never as
an error, and surfaces to the caller as an `AioRpcError` with that code.

grpc.aio files each interceptor object under one call type only, so a channel
takes `interceptor.with_streams()`: this object for unary calls and one companion
per streaming kind, sharing its state. Every kind is tagged the same way; a
streaming call is recorded (status, latency, the `x-drill-fault` trailer) when it
ends, whoever reads it.
"""

from __future__ import annotations

import asyncio
import time

import grpc
from grpc import aio

from harness.core.collecting import collecting
from harness.core.headers import has_fault_marker, traffic_of
from harness.core.metrics import method_label
from harness.core.tracing import client_span_metadata, end_client_span, start_client_span, trace_id_hex
from harness.interceptors._client_core import ClientInterceptorBase, outgoing_metadata


class DrillClientInterceptor(ClientInterceptorBase, aio.UnaryUnaryClientInterceptor):
    """Tags calls, optionally cancels them after `cancel_after_ms`, records client metrics.

    `tagging` may be swapped at any time (`interceptor.tagging = Tagging(...)`),
    e.g. when a drill enters its fault phase. `record_calls=False` records only
    attempts, for callers (the retry layer) that count logical calls themselves.
    """

    def __init__(self, *args, tracer=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        #: OpenTelemetry tracer for CLIENT spans (the sync flavour has none: Locust measures there).
        self.tracer = tracer

    def _prepare(self, client_call_details, span=None):
        tagging = self.tagging
        method = client_call_details.method
        method = method_label(method.decode() if isinstance(method, bytes) else method)
        md, request_id, tenant = outgoing_metadata(
            client_call_details.metadata,
            tagging,
            client_call_details.timeout,
            method=method,
            drill_tenants=self.drill_tenants,
        )
        if span is not None:
            md.extend(client_span_metadata(span, tagging, tenant, request_id))
        details = aio.ClientCallDetails(
            client_call_details.method,
            client_call_details.timeout,
            aio.Metadata(*md),
            client_call_details.credentials,
            client_call_details.wait_for_ready,
        )
        return tagging, tenant, details, method

    def with_streams(self) -> list:
        """[self, a companion per streaming kind]: pass this as a channel's `interceptors`.

        grpc.aio files each interceptor object under one call type only, so
        server-, client- and bidi-streaming calls each need an object of their own;
        the companions share this one's state (tagging, recorder, tracer).
        """
        return [self, _UnaryStreamCompanion(self), _StreamUnaryCompanion(self), _StreamStreamCompanion(self)]

    async def intercept_streaming(self, continuation, client_call_details, request_or_iterator):
        """A streaming call of any kind, tagged like a unary one; its status is recorded when it ends."""
        span = start_client_span(self.tracer, client_call_details.method) if self.tracer is not None else None
        tagging, tenant, details, method = self._prepare(client_call_details, span)
        rec = self.recorder
        rec.attempt_started(method)
        start = time.perf_counter()
        call = await continuation(details, request_or_iterator)
        traffic = traffic_of(tenant, self.drill_tenants)
        if self.cancel_after_ms is not None:
            timer = asyncio.get_running_loop().call_later(self.cancel_after_ms / 1000.0, call.cancel)
            call.add_done_callback(lambda _c: timer.cancel())

        async def record(c) -> None:
            code = grpc.StatusCode.CANCELLED if c.cancelled() else await c.code()
            elapsed = time.perf_counter() - start
            rec.attempt_finished(method, code, elapsed)
            if self.record_calls:
                injected = not c.cancelled() and has_fault_marker(await c.trailing_metadata())
                exemplar = None
                if span is not None:
                    tid = trace_id_hex(span)
                    exemplar = {"trace_id": tid} if tid else None
                rec.call_finished(method, code, elapsed, tagging.fault_mode, traffic, exemplar, injected)
            if span is not None:
                end_client_span(span, code)

        call.add_done_callback(lambda c: asyncio.ensure_future(record(c)))
        return call

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        """Server-streaming calls: `intercept_streaming` (through the companion `with_streams` adds)."""
        return await self.intercept_streaming(continuation, client_call_details, request)

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        span = start_client_span(self.tracer, client_call_details.method) if self.tracer is not None else None
        tagging, tenant, details, method = self._prepare(client_call_details, span)
        rec = self.recorder
        rec.attempt_started(method)
        start = time.perf_counter()
        call = await continuation(details, request)
        timer = None
        fired: list[bool] | tuple = ()  # our cancel-after timer fired: grpc.aio also cancels the call of a task
        if self.cancel_after_ms is not None:  # that was cancelled, so `call.cancelled()` cannot tell them apart
            fired = []

            def cancel_after() -> None:
                fired.append(True)
                call.cancel()

            timer = asyncio.get_running_loop().call_later(self.cancel_after_ms / 1000.0, cancel_after)
        code = grpc.StatusCode.OK
        injected = False
        try:
            await call
            injected = has_fault_marker(await call.trailing_metadata())
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            if not fired:
                raise  # our own task was cancelled: propagate as asyncio expects
            raise aio.AioRpcError(
                grpc.StatusCode.CANCELLED, aio.Metadata(), aio.Metadata(), "cancelled by drill client"
            ) from None
        except aio.AioRpcError as err:
            code = err.code()
            injected = has_fault_marker(err.trailing_metadata())
            raise
        finally:
            if timer is not None:
                timer.cancel()
            if not collecting():  # in a finalizer the collector runs (the call's loop gone), record nothing
                elapsed = time.perf_counter() - start
                rec.attempt_finished(method, code, elapsed)
                exemplar = None
                if span is not None:
                    tid = trace_id_hex(span)
                    exemplar = {"trace_id": tid} if tid else None
                if self.record_calls:
                    traffic = traffic_of(tenant, self.drill_tenants)
                    rec.call_finished(method, code, elapsed, tagging.fault_mode, traffic, exemplar, injected)
                if span is not None:
                    end_client_span(span, code)
        return call


class _UnaryStreamCompanion(aio.UnaryStreamClientInterceptor):
    """Routes server-streaming calls to the DrillClientInterceptor it belongs to."""

    def __init__(self, parent: DrillClientInterceptor) -> None:
        self.parent = parent

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await self.parent.intercept_streaming(continuation, client_call_details, request)


class _StreamUnaryCompanion(aio.StreamUnaryClientInterceptor):
    """Routes client-streaming calls to the DrillClientInterceptor it belongs to."""

    def __init__(self, parent: DrillClientInterceptor) -> None:
        self.parent = parent

    async def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return await self.parent.intercept_streaming(continuation, client_call_details, request_iterator)


class _StreamStreamCompanion(aio.StreamStreamClientInterceptor):
    """Routes bidi-streaming calls to the DrillClientInterceptor it belongs to."""

    def __init__(self, parent: DrillClientInterceptor) -> None:
        self.parent = parent

    async def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return await self.parent.intercept_streaming(continuation, client_call_details, request_iterator)
