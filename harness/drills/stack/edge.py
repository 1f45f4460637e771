"""What a load calls: a full method, its kind (unary or a stream) and how to build each call's request bytes.

The load never needs a generated stub: it calls `channel.unary_unary(method)` (or
`unary_stream`, `stream_unary`, `stream_stream`) with serialized bytes and ignores the
reply's content, as ghz and grpcurl do. `demo_edge` builds the demo topology's
`drill.v1.Demo` call (the request id as payload, so a reply shows which request it
answers). `resolve_call` builds any other method's: its types found in a descriptor
set, a `.proto` compiled with grpcio-tools or the server's reflection, its request
given as JSON in protobuf's JSON mapping — one object, or for a client stream a list
of objects sent in order. The runner's stack edge (`resolve_edge`) and the Locust
user for any service (`loadtests/method_target.py`) both go through it, so a method
and a request mean the same to both and bad input reads the same, naming the key or
option it came from.
"""

from __future__ import annotations

import dataclasses
import pathlib
import tempfile
from collections.abc import Callable
from typing import Any

import pydantic

from harness.core.errors import BadInput, DrillError, RunFailed
from harness.demo.downstream import DEMO_SERVICE
from harness.demo.proto import drill_pb2
from harness.drills.plan.stack import EDGE_FORMS, EdgeSpec

#: The four call kinds, as gRPC names them (request stream × response stream).
UNARY = "unary"
SERVER_STREAMING = "server_streaming"
CLIENT_STREAMING = "client_streaming"
BIDI = "bidi_streaming"
KINDS = (UNARY, SERVER_STREAMING, CLIENT_STREAMING, BIDI)
#: Kinds whose request side is a stream (the request JSON is a list of messages).
CLIENT_STREAMS = (CLIENT_STREAMING, BIDI)


def kind_of(client_streaming: bool, server_streaming: bool) -> str:
    """The call kind of a method descriptor's two flags."""
    if client_streaming:
        return BIDI if server_streaming else CLIENT_STREAMING
    return SERVER_STREAMING if server_streaming else UNARY


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
    kind: str = UNARY
    #: every message of a client stream (None: the one `request`)
    stream: Callable[[str], tuple[bytes, ...]] | None = None
    #: messages/s within a client stream (None: as fast as the stream takes them)
    message_rate: float | None = None

    @property
    def streams_in(self) -> bool:
        """The request side is a stream (client-streaming, bidi): the call sends `messages`."""
        return self.kind in CLIENT_STREAMS

    @property
    def streams_out(self) -> bool:
        """The response side is a stream (server-streaming, bidi): the call reads replies to the end."""
        return self.kind in (SERVER_STREAMING, BIDI)

    def messages(self, request_id: str) -> tuple[bytes, ...]:
        return self.stream(request_id) if self.stream is not None else (self.request(request_id),)

    def multicallable(self, channel):
        """The channel's callable for this kind, bytes in and out (no serializers, as ghz and grpcurl call)."""
        open_call = {UNARY: channel.unary_unary, SERVER_STREAMING: channel.unary_stream,
                     CLIENT_STREAMING: channel.stream_unary, BIDI: channel.stream_stream}[self.kind]  # fmt: skip
        return open_call(self.method)

    def describe(self) -> str:
        """`/pkg.S/M (bidi-streaming, 3 messages at 20/s)`: what one call of the load is, for a log line (a unary
        method's is its name)."""
        if self.kind == UNARY:
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
DEMO_KINDS = {"Call": UNARY, "Write": UNARY, "Stream": SERVER_STREAMING, "Exchange": BIDI}


def demo_edge(method: str) -> EdgeCall:
    """The demo's `Call`, `Write`, `Stream` or `Exchange`, with the request id as the payload."""

    def request(rid: str) -> bytes:
        return drill_pb2.CallRequest(payload=rid).SerializeToString()

    kind = DEMO_KINDS[method]
    if kind != BIDI:
        return EdgeCall(f"/{DEMO_SERVICE}/{method}", request, kind=kind)

    def stream(rid: str) -> tuple[bytes, ...]:
        return tuple(
            drill_pb2.CallRequest(payload=f"{rid}#{i}").SerializeToString() for i in range(DEMO_EXCHANGE_MESSAGES)
        )

    return EdgeCall(f"/{DEMO_SERVICE}/{method}", request, kind, stream)


def constant_edge(
    method: str, body: bytes | tuple[bytes, ...], kind: str = UNARY, message_rate: float | None = None
) -> EdgeCall:
    """The same serialized request (or client stream) for every call: the request id travels in metadata."""
    method = method if method.startswith("/") else "/" + method
    if kind in CLIENT_STREAMS:
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
    """A method's call: found in a descriptor pool (descriptor set, .proto or the server's reflection at
    `spec.address`), the JSON request parsed into its input type and serialized once.

    `spec` has `MethodSpec`'s fields (a stack's `EdgeSpec` does). A method that does not exist or a request
    that does not fit the type is bad input (exit 2); an address that cannot be reached for reflection is a
    failed run (exit 1). Each says which input, by `names`.
    """
    from google.protobuf import message_factory

    full = spec.method.lstrip("/")
    service, _, method = full.rpartition("/")
    where = f"{names.method} {spec.method!r}"
    if not service or not method:
        raise BadInput(f"{where}: expected a full method name, package.Service/Method")
    pool = _pool(spec, names)
    try:
        try:
            svc = pool.FindServiceByName(service)
        except KeyError:
            known = ", ".join(pool.services()) or "none"
            raise BadInput(f"{where}: no service {service!r} {_source(spec)} (it has: {known})") from None
        m = svc.methods_by_name.get(method)
        if m is None:
            known = ", ".join(sorted(svc.methods_by_name))
            raise BadInput(f"{where}: {service} has no method {method!r} (it has: {known})")
        kind = kind_of(m.client_streaming, m.server_streaming)
        cls = message_factory.GetMessageClass(m.input_type)
        body = encode_request(cls, spec.request, kind, names.request)
    finally:
        pool.close()
    rate = getattr(spec, "message_rate", None)
    return constant_edge(full, body, kind, message_rate=rate if kind in CLIENT_STREAMS and rate else None)


def encode_request(cls, request: Any, kind: str, name: str = STACK_NAMES.request) -> bytes | tuple[bytes, ...]:
    """The JSON request as bytes of `cls`: one message, or for a client stream a tuple of them.

    A unary or server-streaming call takes one JSON object. A client stream (client-streaming, bidi) takes a
    list of objects, sent in order (an empty list is a stream of no messages); an object alone is a stream
    of that one message.
    """
    from google.protobuf import json_format

    type_name = cls.DESCRIPTOR.full_name

    def one(value: Any, where: str) -> bytes:
        if not isinstance(value, dict):
            raise BadInput(f"{where} must be a JSON object ({type_name}), not {type(value).__name__}")
        try:
            return json_format.ParseDict(value, cls()).SerializeToString()
        except json_format.ParseError as exc:  # its text may run over two lines ("Available Fields…")
            raise BadInput(f"{where} does not fit {type_name}: {one_line(str(exc))}") from None

    if kind in CLIENT_STREAMS:
        items = request if isinstance(request, list) else [request]
        return tuple(one(item, f"{name}[{i}]") for i, item in enumerate(items))
    if isinstance(request, list):
        raise BadInput(f"{name}: a {kind.replace('_', '-')} method takes one message (a JSON object), "
                       f"not a list of {len(request)}")  # fmt: skip
    return one(request, name)


def one_line(text: str, limit: int = 400, sep: str = " ") -> str:
    """`text`'s lines joined on one by `sep` (an error of ours is one line), cut at `limit` characters."""
    joined = sep.join(part.strip() for part in text.splitlines() if part.strip())
    return joined if len(joined) <= limit else joined[: limit - 1] + "…"


def _source(spec) -> str:
    if spec.descriptor_set:
        return f"in {spec.descriptor_set}"
    if spec.proto:
        return f"in {spec.proto}"
    return f"by reflection at {spec.address}"


def _pool(spec, names: InputNames):
    """A descriptor pool holding the method's service: from a descriptor set, a compiled .proto, or reflection."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    if spec.descriptor_set or spec.proto:
        if spec.descriptor_set:
            try:
                data = pathlib.Path(spec.descriptor_set).read_bytes()
            except OSError as exc:
                raise BadInput(f"{names.descriptor_set}: cannot read {spec.descriptor_set} ({exc.strerror})") from None
        else:
            data = _compile(spec, names)
        files = descriptor_pb2.FileDescriptorSet()
        try:
            files.ParseFromString(data)
        except Exception as exc:  # noqa: BLE001 - protobuf raises its own DecodeError
            raise BadInput(f"{names.descriptor_set}: not a FileDescriptorSet ({exc})") from None
        pool = descriptor_pool.DescriptorPool()
        for f in files.file:
            pool.Add(f)
        return _FilePool(pool, sorted(f"{f.package}.{sv.name}".lstrip(".") for f in files.file for sv in f.service))
    import grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    channel = grpc.insecure_channel(spec.address)
    try:
        _wait_ready(channel, spec.address, names)
    except DrillError:
        channel.close()
        raise
    database = ProtoReflectionDescriptorDatabase(channel)
    try:
        database.get_services()
    except grpc.RpcError as err:
        channel.close()
        raise BadInput(f"{names.edge}: {spec.address} offers no server reflection ({err.code().name}); "
                       f"{names.sources}") from None  # fmt: skip
    return _ReflectionPool(database, channel)


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


class _FilePool:
    """A descriptor pool from files, and the services they declare."""

    def __init__(self, pool, names: list[str]) -> None:
        self.pool, self.names = pool, names

    def FindServiceByName(self, name: str):  # noqa: N802 - the protobuf API's name
        return self.pool.FindServiceByName(name)

    def services(self) -> list[str]:
        return self.names

    def close(self) -> None:
        pass


class _ReflectionPool:
    """A descriptor pool over a server's reflection; a missing service is a KeyError like in a file pool."""

    def __init__(self, database, channel) -> None:
        from google.protobuf import descriptor_pool

        self.database, self.channel = database, channel
        self.pool = descriptor_pool.DescriptorPool(database)

    def FindServiceByName(self, name: str):  # noqa: N802 - the protobuf API's name
        try:
            return self.pool.FindServiceByName(name)
        except Exception:  # noqa: BLE001 - reflection's lookups raise grpc and protobuf errors alike
            raise KeyError(name) from None

    def services(self) -> list[str]:
        try:
            return sorted(self.database.get_services())
        except Exception:  # noqa: BLE001 - only for the error message
            return []

    def close(self) -> None:
        self.channel.close()


def _compile(spec, names: InputNames) -> bytes:
    """`protoc --include_imports --descriptor_set_out` through grpcio-tools (the .proto route needs it)."""
    try:
        from grpc_tools import protoc
    except ImportError:
        raise BadInput(
            f"{names.proto} needs grpcio-tools (pip install grpcio-tools), or give a descriptor set "
            "(protoc --include_imports --descriptor_set_out=FILE your.proto)"
        ) from None
    proto = pathlib.Path(spec.proto)
    if not proto.is_file():
        raise BadInput(f"{names.proto}: no file {proto}")
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "set.pb"
        includes = [f"-I{d}" for d in (spec.proto_path or [str(proto.parent)])]
        import importlib.resources

        well_known = str(importlib.resources.files("grpc_tools") / "_proto")
        args = ["protoc", *includes, f"-I{well_known}", "--include_imports", f"--descriptor_set_out={out}",
                str(proto)]  # fmt: skip
        code, said = _stderr_of(lambda: protoc.main(args))
        if code != 0 or not out.exists():
            why = f": {one_line(said, sep='; ')}" if said.strip() else ""
            raise BadInput(f"{names.proto}: {proto} does not compile (protoc exit {code}){why}")
        return out.read_bytes()


def _stderr_of(run: Callable[[], Any]) -> tuple[Any, str]:
    """`run()`'s result and what it wrote to file descriptor 2 meanwhile: protoc (C++) writes its errors there
    itself, and our error is one line that carries them."""
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as captured:
            os.dup2(captured.fileno(), 2)
            try:
                result = run()
            finally:
                os.dup2(saved, 2)
            captured.seek(0)
            return result, captured.read().decode("utf-8", "replace")
    finally:
        os.close(saved)
