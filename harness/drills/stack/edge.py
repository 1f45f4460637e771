"""What a load calls: a full method, its kind (unary or a stream) and how to build each call's request bytes.

The load never needs a generated stub: it calls `channel.unary_unary(method)` (or
`unary_stream`, `stream_unary`, `stream_stream`) with serialized bytes and ignores the
reply's content, as ghz and grpcurl do. `demo_edge` builds the demo topology's
`drill.v1.Demo` call (the request id as payload, so a reply shows which request it
answers). `resolve_call` builds any other method's: its types found (`harness.protos`) in
a descriptor set, a `.proto` compiled with grpcio-tools or the server's reflection, its request
given as JSON in protobuf's JSON mapping — one object, or for a client stream a list
of objects sent in order. The runner's stack edge (`resolve_edge`) and the Locust
user for any service (`loadtests/method_target.py`) both go through it, so a method
and a request mean the same to both and bad input reads the same, naming the key or
option it came from.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable
from typing import Any

import pydantic

from harness import protos
from harness.core.errors import BadInput, DrillError, RunFailed
from harness.core.faults import Kind
from harness.demo.downstream import DEMO_SERVICE
from harness.demo.proto import drill_pb2
from harness.drills.plan.stack import EDGE_FORMS, EdgeSpec


@dataclasses.dataclass(frozen=True)
class EdgeCall:
    """One method to call and its request bytes.

    `method` is `/pkg.Service/Method`. `request(request_id)` is the one request of a unary or
    server-streaming call (and the first message of a client stream); `messages(request_id)` every
    message a call sends, in order. A client stream (client-streaming or bidi) sends message i at
    i / `message_rate` s after the call starts (None: each as soon as the stream takes it), then
    half-closes; a response stream is read to its end.
    """

    method: str
    request: Callable[[str], bytes]
    kind: Kind = Kind.UNARY
    #: every message of a client stream (None: the one `request`)
    stream: Callable[[str], tuple[bytes, ...]] | None = None
    #: messages/s within a client stream (None: as fast as the stream takes them)
    message_rate: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Kind(self.kind))  # its value ("unary", …) is the same kind

    @property
    def streams_in(self) -> bool:
        """The request side is a stream (client-streaming, bidi): the call sends `messages`."""
        return self.kind.request_streaming

    @property
    def streams_out(self) -> bool:
        """The response side is a stream (server-streaming, bidi): the call reads replies to the end."""
        return self.kind.response_streaming

    def messages(self, request_id: str) -> tuple[bytes, ...]:
        return self.stream(request_id) if self.stream is not None else (self.request(request_id),)

    def multicallable(self, channel):
        """The channel's callable for this kind, bytes in and out (no serializers, as ghz and grpcurl call)."""
        open_call = {Kind.UNARY: channel.unary_unary, Kind.SERVER_STREAMING: channel.unary_stream,
                     Kind.CLIENT_STREAMING: channel.stream_unary,
                     Kind.BIDI_STREAMING: channel.stream_stream}[self.kind]  # fmt: skip
        return open_call(self.method)

    def describe(self) -> str:
        """`/pkg.S/M (bidi-streaming, 3 messages at 20/s)`: what one call of the load is, for a log line (a unary
        method's is its name)."""
        if self.kind is Kind.UNARY:
            return self.method
        kind = self.kind.replace("_", "-")
        if self.streams_in:
            n = len(self.messages(""))
            rate = f" at {self.message_rate:g}/s" if self.message_rate else ""
            kind += f", {n} message{'s' if n != 1 else ''}{rate}"
        return f"{self.method} ({kind})"


#: Messages one call of the demo's bidi `Exchange` sends (`ID#0`, `ID#1`, …), each relayed down the chain
#: as one `Call` (harness.demo.service), as fast as the stream takes them
DEMO_EXCHANGE_MESSAGES = 3
#: The kind of each demo method (`traffic.method`)
DEMO_KINDS = {"Call": Kind.UNARY, "Write": Kind.UNARY, "Stream": Kind.SERVER_STREAMING, "Exchange": Kind.BIDI_STREAMING}


def demo_edge(method: str) -> EdgeCall:
    """The demo's `Call`, `Write`, `Stream` or `Exchange`, with the request id as the payload."""

    def request(rid: str) -> bytes:
        return drill_pb2.CallRequest(payload=rid).SerializeToString()

    kind = DEMO_KINDS[method]
    if kind is not Kind.BIDI_STREAMING:
        return EdgeCall(f"/{DEMO_SERVICE}/{method}", request, kind=kind)

    def stream(rid: str) -> tuple[bytes, ...]:
        return tuple(
            drill_pb2.CallRequest(payload=f"{rid}#{i}").SerializeToString() for i in range(DEMO_EXCHANGE_MESSAGES)
        )

    return EdgeCall(f"/{DEMO_SERVICE}/{method}", request, kind, stream)


def constant_edge(
    method: str, body: bytes | tuple[bytes, ...], kind: Kind = Kind.UNARY, message_rate: float | None = None
) -> EdgeCall:
    """The same serialized request (or client stream) for every call: the request id travels in metadata."""
    method = method if method.startswith("/") else "/" + method
    if Kind(kind).request_streaming:
        stream = tuple(body) if isinstance(body, tuple) else (body,)
        first = stream[0] if stream else b""
        return EdgeCall(method, lambda _rid: first, kind, lambda _rid: stream, message_rate)
    return EdgeCall(method, lambda _rid: body, kind)


@dataclasses.dataclass(frozen=True)
class InputNames:
    """What the user calls each input, for error lines: a stack file's keys or Locust's options."""

    method: str = "stack.edge.method"
    request: str = "stack.edge.request"
    proto: str = "stack.edge.proto"
    descriptor_set: str = "stack.edge.descriptor_set"
    edge: str = "stack.edge"
    #: what the address is, in "cannot reach … ADDRESS"
    address: str = "the edge at"
    #: the alternatives to name when reflection is off
    sources: str = "give proto or descriptor_set"
    message_rate: str = "stack.edge.message_rate"
    proto_path: str = "stack.edge.proto_path"
    #: the input that holds the address, when it is refused before anything is called
    address_key: str = "stack.edge.address"

    def of_field(self, field: str) -> str:
        """The input a field of a stack's `EdgeSpec` came from (`request` -> `--drill-request` for Locust)."""
        return {"address": self.address_key}.get(field) or getattr(self, field, None) or f"{self.edge}.{field}"


STACK_NAMES = InputNames()


@dataclasses.dataclass(frozen=True)
class MethodSpec:
    """What `resolve_call` reads (the fields of a stack's `EdgeSpec`): where, which method, which request."""

    address: str
    method: str
    #: protobuf JSON: one object, or for a client stream a list of objects (an object alone is one message)
    request: Any = dataclasses.field(default_factory=dict)
    proto: str | None = None
    descriptor_set: str | None = None
    proto_path: tuple[str, ...] = ()
    message_rate: float | None = None


def edge_spec(fields: dict[str, Any], names: InputNames = STACK_NAMES) -> EdgeSpec:
    """`fields` checked as a stack file's `stack.edge` is checked (`EdgeSpec`: address, method, request of
    objects, message rate, one type source), each problem naming its input by `names`, on one line.

    The Locust user for any service builds its edge here from its options, so its options and a stack file's
    keys take and refuse the same values."""
    try:
        return EdgeSpec.model_validate({k: v for k, v in fields.items() if v is not None})
    except pydantic.ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else ""
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "string_pattern_mismatch":
                msg = f"{err['input']!r}: {EDGE_FORMS.get(field, msg)}"
            problems.append(f"{names.of_field(field)}: {msg}" if field else msg)
        raise BadInput("; ".join(dict.fromkeys(problems))) from None


def resolve_edge(spec, *, names: InputNames = STACK_NAMES) -> EdgeCall:
    """The edge a load calls, of any kind: `resolve_call`, and a `message_rate` only where the method's
    request is a stream (on a method that sends one message a rate means nothing: bad input, never a
    silent default). The runner's stack edge and the Locust user for any service both come here."""
    call = resolve_call(spec, names=names)
    if getattr(spec, "message_rate", None) and not call.streams_in:
        raise BadInput(f"{names.message_rate}: {call.method.lstrip('/')} is a "
                       f"{call.kind.replace('_', '-')} method: it sends one message (a rate is for a client-"
                       "streaming or bidi method's list of messages)")  # fmt: skip
    return call


def resolve_call(spec, *, names: InputNames = STACK_NAMES) -> EdgeCall:
    """A method's call: found in the types of a descriptor set, a .proto or the server's reflection at
    `spec.address` (`harness.protos`), the JSON request parsed into its input type and serialized once.

    `spec` has `MethodSpec`'s fields (a stack's `EdgeSpec` does). A method that does not exist or a request
    that does not fit the type is bad input (exit 2); an address that cannot be reached for reflection is a
    failed run (exit 1). Each says which input, by `names`.
    """
    full = spec.method.lstrip("/")
    service, _, method = full.rpartition("/")
    where = f"{names.method} {spec.method!r}"
    if not service or not method:
        raise BadInput(f"{where}: expected a full method name, package.Service/Method")
    with _types(spec, names) as types:
        try:
            svc = types.service(service)
        except KeyError:
            known = ", ".join(types.services()) or "none"
            raise BadInput(f"{where}: no service {service!r} {types.where} (it has: {known})") from None
        except protos.ReflectionError as err:
            raise RunFailed(f"{names.edge}: {spec.address}'s server reflection did not tell {service} "
                            f"({err.code})") from None  # fmt: skip
        m = svc.methods_by_name.get(method)
        if m is None:
            known = ", ".join(sorted(svc.methods_by_name))
            raise BadInput(f"{where}: {service} has no method {method!r} (it has: {known})")
        kind = protos.kind_of(m)
        body = encode_request(protos.message_class(m.input_type), spec.request, kind, names.request)
    rate = getattr(spec, "message_rate", None)
    return constant_edge(full, body, kind, message_rate=rate if kind.request_streaming and rate else None)


def encode_request(cls, request: Any, kind: Kind, name: str = STACK_NAMES.request) -> bytes | tuple[bytes, ...]:
    """The JSON request as bytes of `cls`: one message, or for a client stream a tuple of them.

    A unary or server-streaming call takes one JSON object. A client stream (client-streaming, bidi) takes a
    list of objects, sent in order (an empty list is a stream of no messages); an object alone is a stream
    of that one message. A request that does not fit names the fields as the .proto writes them.
    """
    from google.protobuf import json_format

    kind = Kind(kind)
    type_name = cls.DESCRIPTOR.full_name

    def one(value: Any, where: str) -> bytes:
        if not isinstance(value, dict):
            raise BadInput(f"{where} must be a JSON object ({type_name}), not {type(value).__name__}")
        try:
            return json_format.ParseDict(value, cls()).SerializeToString()
        except json_format.ParseError as exc:  # its text may run over two lines ("Available Fields…")
            said = _fields_as_written(str(exc), cls.DESCRIPTOR.file.pool)
            raise BadInput(f"{where} does not fit {type_name}: {one_line(said)}") from None

    if kind.request_streaming:
        items = request if isinstance(request, list) else [request]
        return tuple(one(item, f"{name}[{i}]") for i, item in enumerate(items))
    if isinstance(request, list):
        raise BadInput(f"{name}: a {kind.replace('_', '-')} method takes one message (a JSON object), "
                       f"not a list of {len(request)}")  # fmt: skip
    return one(request, name)


#: protobuf's json_format on a key the message lacks: it lists the fields by their JSON names (`amountCents`)
_NO_FIELD = re.compile(r'Message type "([\w.]+)" has no field named "([^"]*)" at "([^"]*)"\.\s*'
                       r'Available Fields\(except extensions\): "\[[^\]]*\]"')  # fmt: skip


def _fields_as_written(text: str, pool) -> str:
    """json_format's error with each "Available Fields" list as the .proto writes the names (`amount_cents`), the
    names a user finds in the .proto (the request takes either spelling)."""

    def as_written(m: re.Match) -> str:
        try:
            fields = pool.FindMessageTypeByName(m.group(1)).fields
        except KeyError:
            return m.group(0)
        return (f'Message type "{m.group(1)}" has no field named "{m.group(2)}" at "{m.group(3)}". '
                f"Available Fields(except extensions): {', '.join(f.name for f in fields)}")  # fmt: skip

    return _NO_FIELD.sub(as_written, text)


def one_line(text: str, limit: int = 400, sep: str = " ") -> str:
    """`text`'s lines joined on one by `sep` (an error of ours is one line), cut at `limit` characters."""
    joined = sep.join(part.strip() for part in text.splitlines() if part.strip())
    return joined if len(joined) <= limit else joined[: limit - 1] + "…"


def _types(spec, names: InputNames) -> protos.Types:
    """The types holding the method's service: from a descriptor set, a compiled .proto, or the reflection of
    the server at `spec.address` (waited for until it serves, REACH_S at most)."""
    if spec.descriptor_set:
        return protos.from_descriptor_set(spec.descriptor_set, option=names.descriptor_set)
    if spec.proto:
        return protos.from_proto(spec.proto, spec.proto_path, option=names.proto)
    import grpc

    channel = grpc.insecure_channel(spec.address)
    try:
        _wait_ready(channel, spec.address, names)
    except DrillError:
        channel.close()
        raise
    try:
        return protos.from_reflection(channel, timeout_s=REACH_S, address=spec.address)
    except protos.ReflectionError as err:
        raise BadInput(f"{names.edge}: {spec.address} offers no server reflection ({err.code}); "
                       f"{names.sources}") from None  # fmt: skip


#: How long reflection waits for the address to serve gRPC (a service still starting gets this long)
REACH_S = 10.0
#: HTTP/2's client connection preface and an empty SETTINGS frame: what a gRPC client sends first
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _wait_ready(channel, address: str, names: InputNames) -> None:
    """Until the channel is ready (REACH_S at most); a port that answers but not as a gRPC server is said so at
    once (bad input: waiting will not change it), one that nothing answers on is "cannot reach" (exit 1)."""
    import time

    import grpc

    ready = grpc.channel_ready_future(channel)
    deadline = time.monotonic() + REACH_S
    while True:
        try:
            ready.result(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
            return
        except grpc.FutureTimeoutError:
            pass
        what = speaks_http2(address)
        if what is False:
            raise BadInput(f"{names.address_key}: {address} answered, but not as a gRPC server (no HTTP/2 "
                           "settings in reply to a client's preface; gRPC over TLS is not supported)")  # fmt: skip
        if time.monotonic() >= deadline:
            why = "nothing accepts a connection there" if what is None else "it does not become ready"
            raise RunFailed(f"cannot reach {names.address} {address} for server reflection ({why}, "
                            f"{REACH_S:g} s)")  # fmt: skip


class Reach(str, enum.Enum):
    """How a server at HOST:PORT met a gRPC client's first steps (`reach`)."""

    GRPC = "grpc"  # accepted the connection and sent HTTP/2 SETTINGS, as every gRPC server does
    SILENT = "silent"  # accepted it and sent nothing in time
    NOT_GRPC = "not_grpc"  # accepted it and answered otherwise, or closed it at once (TLS, another protocol)
    REFUSED = "refused"  # nothing listens there
    NO_CONNECTION = "no_connection"  # no connection in time (filtered, unreachable)
    UNRESOLVED = "unresolved"  # the host name resolves to nothing
    ERROR = "error"  # any other socket error (its text is the detail)


def reach(address: str, connect_s: float, answer_s: float) -> tuple[Reach, str]:
    """Connect to HOST:PORT within `connect_s`, send a plaintext HTTP/2 client preface and wait `answer_s` for the
    server's first frame: one connection, at most `connect_s + answer_s`; the OS's words for an error."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=connect_s)
    except ConnectionRefusedError:
        return Reach.REFUSED, ""
    except TimeoutError:
        return Reach.NO_CONNECTION, ""
    except socket.gaierror as exc:
        return Reach.UNRESOLVED, exc.strerror or str(exc)
    except (OSError, ValueError) as exc:
        return Reach.ERROR, getattr(exc, "strerror", None) or str(exc)
    with sock:
        sock.settimeout(answer_s)
        head = b""
        try:
            sock.sendall(_H2_PREFACE)
            while len(head) < 9:
                chunk = sock.recv(9 - len(head))
                if not chunk:
                    return Reach.NOT_GRPC, ""  # closed without a frame
                head += chunk
        except TimeoutError:
            return Reach.SILENT, ""
        except OSError:  # reset while it answered: not a gRPC server's way
            return Reach.NOT_GRPC, ""
    return (Reach.GRPC if head[3] == 0x4 else Reach.NOT_GRPC), ""  # a SETTINGS frame first


def speaks_http2(address: str, timeout_s: float = 1.0) -> bool | None:
    """Whether the server at HOST:PORT answers a plaintext HTTP/2 client as every gRPC server does, with a
    SETTINGS frame: True; False when it answered otherwise or closed the connection at once; None when no
    connection could be made or it stayed silent (nothing to tell yet)."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as sock:
            sock.sendall(_H2_PREFACE)
            head = b""
            while len(head) < 9:
                chunk = sock.recv(9 - len(head))
                if not chunk:
                    return False  # closed without a frame
                head += chunk
    except (OSError, ValueError):  # refused, unreachable, silent (timeout), or not HOST:PORT
        return None
    return head[3] == 0x4  # the frame type of the server's first frame: SETTINGS
