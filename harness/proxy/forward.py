"""Forward every call, as bytes, to one upstream: the proxy's handler for methods it has no proto for.

A gRPC server for any method and a gRPC client of the upstream, joined message by
message: no proto is needed to forward, only a method's kind (`harness.proxy.cli`'s table),
and without it a call is forwarded as a bidi stream, which is what every kind is on
the wire. Exactness is the contract, each point an easy mistake in a generic proxy:

- messages pass as bytes, of any size (no 4 MiB cap of the proxy's own);
- request metadata goes up; the upstream's headers come back as soon as they
  arrive (also when it fails before its first message), its trailers, status,
  details and `grpc-status-details-bin` with the end of the call;
- the caller's deadline goes up as the time it has left;
- a caller's cancel reaches the upstream as a cancel, never as an end of stream:
  grpc.aio ends a cancelled call's request iterator exactly as a half-close would
  and tells the handler of the cancel later, so at the end of a request stream the
  forwarder waits for the call to be done, at most CANCEL_GRACE_S (20 ms), before
  it half-closes (`_end_of_requests`): a half-close reaches the service that late;
- a half-closed bidi stream keeps receiving until the upstream ends it;
- flow control: each message is awaited into the other side before the next is
  read, so a slow reader slows the writer and nothing buffers without bound;
- an upstream that is down is UNAVAILABLE at once (no wait for ready), and served
  again when it is back: the channel retries its connection at most every
  `RECONNECT_MAX_MS`.

The fault pipeline is not here: the proxy's server runs the interceptors' own
(`FaultServerInterceptor`) around these handlers, exactly as a Python service does;
for `@served` a handler here is the service's work (the upstream's answer, relayed),
and the pipeline's context holds what it relays until the fault has acted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import grpc
from grpc import aio

from harness.core.faults import Kind
from harness.interceptors import method_handler

#: metadata the gRPC library owns on each side: never copied from one call to the other
_TRANSPORT_KEYS = frozenset({"user-agent", "te", "content-type", "grpc-timeout", "grpc-encoding",
                             "grpc-accept-encoding", "grpc-message", "grpc-status"})  # fmt: skip
#: the longest wait between the proxy's attempts to reach an upstream that is down
RECONNECT_MAX_MS = 1000
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", RECONNECT_MAX_MS),
    ("grpc.enable_retries", 0),  # a forwarded call is sent once: retrying is the caller's business
    # every address the upstream's name resolves to (replicas behind one name), each call to the next one;
    # one address is one connection, as with the default pick_first
    ("grpc.lb_policy_name", "round_robin"),
)
SERVER_OPTIONS = (
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
)


def _outgoing(context) -> tuple[tuple[str, str | bytes], ...]:
    return tuple((k, v) for k, v in context.invocation_metadata() if k not in _TRANSPORT_KEYS and k[0] != ":")


async def _relay_headers(call, context) -> None:
    metadata = await call.initial_metadata()
    if metadata:
        await context.send_initial_metadata(tuple(metadata))


async def _relay_end(call, context, error: aio.AioRpcError | None) -> None:
    """The upstream's trailers and status, as the caller's."""
    if error is None:
        trailers = await call.trailing_metadata()
        if trailers:
            context.set_trailing_metadata(tuple(trailers))
        return
    trailers = tuple(error.trailing_metadata() or ())
    await context.abort(error.code(), error.details() or "", trailers)


#: how long a request stream's end waits to be told from a cancel (see _end_of_requests)
CANCEL_GRACE_S = 0.02


async def _end_of_requests(call, context) -> None:
    """The caller's request stream ended: half-close the upstream's, unless the caller cancelled.

    grpc.aio ends a cancelled call's request iterator exactly as a half-close ends it, and tells the
    handler of the cancel separately, later (its task is cancelled once the core reports the call
    closed), and later still on a busy machine. So the half-close waits until the call is done or
    CANCEL_GRACE_S has passed: a cancel in that time raises here (the upstream is cancelled, never
    half-closed); a half-close reaches the service that much later. A caller that half-closes keeps
    its call open, so the wait never ends early on its account."""
    done = asyncio.Event()
    context.add_done_callback(lambda _: done.set())
    if not context.done():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), CANCEL_GRACE_S)
    if context.cancelled():
        raise asyncio.CancelledError
    await call.done_writing()


class Forwarder:
    """The handlers of one upstream channel: `handler(method, kind)` builds grpc's handler for a method."""

    def __init__(self, channel: aio.Channel) -> None:
        self.channel = channel

    def handler(self, method: str, kind: Kind | None):
        """grpc's handler forwarding `method` as `kind` (None, unknown: as a bidi stream), bytes in and out."""
        kind = kind or Kind.BIDI_STREAMING
        if kind is Kind.UNARY:
            return method_handler(kind, self._unary(method))
        if kind is Kind.SERVER_STREAMING:
            return method_handler(kind, self._server_stream(method))
        if kind is Kind.CLIENT_STREAMING:
            return method_handler(kind, self._client_stream(method))
        return method_handler(kind, self._bidi(method))

    def _unary(self, method: str) -> Callable:
        stub = self.channel.unary_unary(method)

        async def unary(request: bytes, context):
            # one message each way: the headers are relayed once the answer is in (they arrived before it, and
            # a failure carries its own), so a call costs one wait on the upstream, not two
            call = stub(request, timeout=context.time_remaining(), metadata=_outgoing(context))
            try:
                response = await call
            except aio.AioRpcError as error:
                await _relay_headers(call, context)
                await _relay_end(call, context, error)
            except asyncio.CancelledError:
                call.cancel()
                raise
            await _relay_headers(call, context)
            await _relay_end(call, context, None)
            return response

        return unary

    def _client_stream(self, method: str) -> Callable:
        stub = self.channel.stream_unary(method)

        async def client_stream(requests, context):
            call = stub(timeout=context.time_remaining(), metadata=_outgoing(context))
            try:
                async for message in requests:
                    await call.write(message)
                await _end_of_requests(call, context)
                await _relay_headers(call, context)
                response = await call
            except aio.AioRpcError as error:
                await _relay_end(call, context, error)
            except BaseException:
                call.cancel()
                raise
            await _relay_end(call, context, None)
            return response

        return client_stream

    def _server_stream(self, method: str) -> Callable:
        stub = self.channel.unary_stream(method)

        async def server_stream(request: bytes, context):
            call = stub(request, timeout=context.time_remaining(), metadata=_outgoing(context))
            try:
                await _relay_headers(call, context)
                while True:
                    message = await call.read()
                    if message is aio.EOF:
                        break
                    yield message
            except aio.AioRpcError as error:
                await _relay_end(call, context, error)
            except BaseException:
                call.cancel()
                raise
            await _relay_end(call, context, None)

        return server_stream

    def _bidi(self, method: str) -> Callable:
        stub = self.channel.stream_stream(method)

        async def bidi(requests, context):
            call = stub(timeout=context.time_remaining(), metadata=_outgoing(context))
            failed: list[BaseException] = []

            async def pump() -> None:
                try:
                    async for message in requests:
                        await call.write(message)
                    await _end_of_requests(call, context)
                except asyncio.CancelledError:
                    raise
                except aio.AioRpcError:
                    pass  # the upstream ended the call: the reader relays how
                except BaseException as exc:  # a fault's abort on a read (`@read`): the call ends with it
                    failed.append(exc)
                    call.cancel()

            pumping = asyncio.ensure_future(pump())
            try:
                await _relay_headers(call, context)
                while True:
                    message = await call.read()
                    if message is aio.EOF:
                        break
                    yield message
            except aio.AioRpcError as error:
                if failed:
                    raise failed[0] from None
                await _relay_end(call, context, error)
            except BaseException:
                call.cancel()
                raise
            finally:
                pumping.cancel()
            if failed:
                raise failed[0]
            await _relay_end(call, context, None)

        return bidi


class ForwardAll(grpc.GenericRpcHandler):
    """grpc's generic handler: every method is forwarded; `kind_of(method)` says its kind (None: unknown)."""

    LIMIT = 4096  # handlers kept per method name; a caller naming ever new methods must not grow this

    def __init__(self, forwarder: Forwarder, kind_of: Callable[[str], Kind | None]) -> None:
        self._forwarder = forwarder
        self._kind_of = kind_of
        self._handlers: dict[str, object] = {}

    def service(self, handler_call_details):
        method = handler_call_details.method
        handler = self._handlers.get(method)
        if handler is None:
            handler = self._forwarder.handler(method, self._kind_of(method))
            if len(self._handlers) < self.LIMIT:
                self._handlers[method] = handler
        return handler
