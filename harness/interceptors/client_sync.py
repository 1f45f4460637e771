"""Client interceptor for sync `grpc` channels (and Locust's gevent-patched grpc).

Same tagging and metrics as the aio interceptor. Active cancel works on calls
made with `.future()` (a blocking call has already finished when an interceptor
sees its outcome); `call_with_cancel` wraps that for callers.
"""

from __future__ import annotations

import threading
import time

import grpc

from harness.core.headers import has_fault_marker, traffic_of
from harness.core.metrics import method_label
from harness.interceptors._client_core import ClientInterceptorBase, outgoing_metadata


class _Details(grpc.ClientCallDetails):
    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression):
        self.method = method
        self.timeout = timeout
        self.metadata = metadata
        self.credentials = credentials
        self.wait_for_ready = wait_for_ready
        self.compression = compression


class SyncDrillClientInterceptor(
    ClientInterceptorBase,
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Tags calls of every kind and records client metrics; cancels `.future()` calls (and streams) after
    `cancel_after_ms`. grpc's call object of every kind is also a future: a call is recorded when it ends."""

    def intercept_unary_unary(self, continuation, client_call_details, request):
        tagging = self.tagging
        method = client_call_details.method
        method = method_label(method.decode() if isinstance(method, bytes) else method)
        md, _request_id, tenant = outgoing_metadata(
            client_call_details.metadata,
            tagging,
            client_call_details.timeout,
            method=method,
            drill_tenants=self.drill_tenants,
        )
        details = _Details(
            client_call_details.method,
            client_call_details.timeout,
            md,
            client_call_details.credentials,
            getattr(client_call_details, "wait_for_ready", None),
            getattr(client_call_details, "compression", None),
        )
        rec = self.recorder
        rec.attempt_started(method)
        start = time.perf_counter()
        outcome = continuation(details, request)
        traffic = traffic_of(tenant, self.drill_tenants)

        def done(fut) -> None:
            code = fut.code() if not fut.cancelled() else grpc.StatusCode.CANCELLED
            elapsed = time.perf_counter() - start
            rec.attempt_finished(method, code, elapsed)
            if self.record_calls:
                injected = False
                if not fut.cancelled():
                    try:
                        injected = has_fault_marker(fut.trailing_metadata())
                    except Exception:  # noqa: BLE001 - a call object without trailers: not marked
                        injected = False
                rec.call_finished(method, code, elapsed, tagging.fault_mode, traffic, injected=injected)

        if self.cancel_after_ms is not None and not outcome.done():
            timer = threading.Timer(self.cancel_after_ms / 1000.0, outcome.cancel)
            timer.daemon = True
            timer.start()
            outcome.add_done_callback(lambda _f: timer.cancel())
        outcome.add_done_callback(done)
        return outcome

    def intercept_unary_stream(self, continuation, client_call_details, request):
        """Streams are tagged and recorded like unary calls (the call object is also a future)."""
        return self.intercept_unary_unary(continuation, client_call_details, request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return self.intercept_unary_unary(continuation, client_call_details, request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return self.intercept_unary_unary(continuation, client_call_details, request_iterator)


def call_with_cancel(multicallable, request, cancel_after_ms: float, **kwargs):
    """Start `multicallable.future(request)` and cancel it after `cancel_after_ms`.

    Returns the response, or raises the `grpc.RpcError` (CANCELLED when the
    cancel won). Use it where a blocking call needs active cancellation.
    """
    future = multicallable.future(request, **kwargs)
    timer = threading.Timer(cancel_after_ms / 1000.0, future.cancel)
    timer.daemon = True
    timer.start()
    try:
        return future.result()
    except grpc.FutureCancelledError:
        raise _Cancelled() from None
    finally:
        timer.cancel()


class _Cancelled(grpc.RpcError, grpc.Call):
    """The RpcError a cancelled future surfaces as (code CANCELLED)."""

    def code(self):
        return grpc.StatusCode.CANCELLED

    def details(self):
        return "cancelled by drill client"

    def initial_metadata(self):
        return ()

    def trailing_metadata(self):
        return ()

    def is_active(self):
        return False

    def time_remaining(self):
        return None

    def cancel(self):
        return False

    def add_callback(self, callback):
        return False
