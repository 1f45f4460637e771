"""grpc's `RpcMethodHandler` for each kind of method, rebuilt around a wrapped behaviour, cheaply.

grpc's own `unary_unary_rpc_method_handler` (and its three siblings) imports a
module on every call (~1 µs of the ~1.4 µs it costs per wrapped call), and an
organic unary call is wrapped on every call. When grpc's handler type is the
namedtuple of the documented fields, it is built positionally instead
(`tuple.__new__`: what the namedtuple's own `__new__` does, without its Python
frame); otherwise the public functions are used.
"""

from __future__ import annotations

import grpc

from harness.core.faults import Kind


def _noop(request, context):  # pragma: no cover - never called: a probe's behaviour
    return None


_FIELDS = (
    "request_streaming", "response_streaming", "request_deserializer", "response_serializer",
    "unary_unary", "unary_stream", "stream_unary", "stream_stream",
)  # fmt: skip


def _handler_type():
    probe = grpc.unary_unary_rpc_method_handler(_noop)
    kind = type(probe)
    try:
        ok = kind._fields == _FIELDS and kind(False, False, None, None, _noop, None, None, None) == probe
    except Exception:  # noqa: BLE001 - not a namedtuple of that shape: use the public functions
        ok = False
    return kind if ok else None


#: grpc's RpcMethodHandler type when it has the documented fields, else None.
HANDLER = _handler_type()
_new = tuple.__new__


def unary_unary_handler(behavior, like):
    """`grpc.unary_unary_rpc_method_handler(behavior, ...)` with `like`'s (de)serializers."""
    if HANDLER is not None:
        fields = (False, False, like.request_deserializer, like.response_serializer, behavior, None, None, None)
        return _new(HANDLER, fields)
    return grpc.unary_unary_rpc_method_handler(
        behavior, request_deserializer=like.request_deserializer, response_serializer=like.response_serializer
    )


def unary_stream_handler(behavior, like):
    """`grpc.unary_stream_rpc_method_handler(behavior, ...)` with `like`'s (de)serializers."""
    if HANDLER is not None:
        fields = (False, True, like.request_deserializer, like.response_serializer, None, behavior, None, None)
        return _new(HANDLER, fields)
    return grpc.unary_stream_rpc_method_handler(
        behavior, request_deserializer=like.request_deserializer, response_serializer=like.response_serializer
    )


def stream_unary_handler(behavior, like):
    """`grpc.stream_unary_rpc_method_handler(behavior, ...)` with `like`'s (de)serializers."""
    if HANDLER is not None:
        fields = (True, False, like.request_deserializer, like.response_serializer, None, None, behavior, None)
        return _new(HANDLER, fields)
    return grpc.stream_unary_rpc_method_handler(
        behavior, request_deserializer=like.request_deserializer, response_serializer=like.response_serializer
    )


def stream_stream_handler(behavior, like):
    """`grpc.stream_stream_rpc_method_handler(behavior, ...)` with `like`'s (de)serializers."""
    if HANDLER is not None:
        fields = (True, True, like.request_deserializer, like.response_serializer, None, None, None, behavior)
        return _new(HANDLER, fields)
    return grpc.stream_stream_rpc_method_handler(
        behavior, request_deserializer=like.request_deserializer, response_serializer=like.response_serializer
    )


#: The handler constructor of each kind.
BUILD = {
    Kind.UNARY: unary_unary_handler,
    Kind.SERVER_STREAMING: unary_stream_handler,
    Kind.CLIENT_STREAMING: stream_unary_handler,
    Kind.BIDI_STREAMING: stream_stream_handler,
}


class _Bytes:
    """No (de)serializers: the behaviour sees the bytes on the wire."""

    request_deserializer = None
    response_serializer = None


def method_handler(kind: Kind, behavior, like=None):
    """grpc's `RpcMethodHandler` of `kind` around `behavior`, with `like`'s `request_deserializer` and
    `response_serializer` (None: none, the behaviour takes and gives the bytes on the wire)."""
    return BUILD[kind](behavior, like if like is not None else _Bytes)


def behavior_of(handler, kind: Kind):
    """The servicer's behaviour a handler of `kind` carries."""
    if kind is Kind.UNARY:
        return handler.unary_unary
    if kind is Kind.SERVER_STREAMING:
        return handler.unary_stream
    if kind is Kind.CLIENT_STREAMING:
        return handler.stream_unary
    return handler.stream_stream
