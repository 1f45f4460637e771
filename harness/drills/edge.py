"""What the load calls at the edge: a full method name and how to build each request's bytes.

The load never needs a generated stub: it calls `channel.unary_unary(method)` (or
`unary_stream`) with serialized bytes and ignores the reply's content, as ghz and
grpcurl do. `demo_edge` builds the demo topology's `drill.v1.Demo` call (the request
id as payload, so a reply shows which request it answers); `harness.drills.stacks`
builds a stack's from a JSON body typed by a `.proto`, a descriptor set or server
reflection.
"""

from __future__ import annotations

import dataclasses
import pathlib
import tempfile
from collections.abc import Callable

from harness.core.errors import BadInput, RunFailed
from harness.demo.downstream import DEMO_SERVICE
from harness.demo.proto import drill_pb2


@dataclasses.dataclass(frozen=True)
class EdgeCall:
    """`method` is `/pkg.Service/Method`; `request(request_id)` returns the serialized request."""

    method: str
    request: Callable[[str], bytes]
    #: server-streaming (the demo's Stream): the load reads the stream to its end
    streaming: bool = False


def demo_edge(method: str) -> EdgeCall:
    """The demo's `Call`, `Write` or `Stream`, with the request id as the payload."""

    def request(rid: str) -> bytes:
        return drill_pb2.CallRequest(payload=rid).SerializeToString()

    return EdgeCall(f"/{DEMO_SERVICE}/{method}", request, streaming=method == "Stream")


def constant_edge(method: str, body: bytes) -> EdgeCall:
    """A stack's edge: the same serialized request for every call (the request id travels in metadata)."""
    method = method if method.startswith("/") else "/" + method
    return EdgeCall(method, lambda _rid: body)


def resolve_edge(spec) -> EdgeCall:
    """The stack's edge call: its method found in a descriptor pool (descriptor set, .proto or the server's
    reflection), the JSON request parsed into the method's input type and serialized once.

    A method that does not exist, a streaming one, or a request that does not fit the type is bad input
    (exit 2); an edge that cannot be reached for reflection is a failed run (exit 1).
    """
    from google.protobuf import json_format, message_factory

    full = spec.method.lstrip("/")
    service, _, method = full.rpartition("/")
    where = f"stack.edge.method {spec.method!r}"
    pool = _pool(spec)
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
        if m.client_streaming or m.server_streaming:
            raise BadInput(f"{where}: a streaming method; a stack's edge is unary (the local topology keeps Stream)")
        cls = message_factory.GetMessageClass(m.input_type)
        try:
            body = json_format.ParseDict(spec.request, cls()).SerializeToString()
        except json_format.ParseError as exc:
            raise BadInput(f"stack.edge.request does not fit {m.input_type.full_name}: {exc}") from None
    finally:
        pool.close()
    return constant_edge(full, body)


def _source(spec) -> str:
    if spec.descriptor_set:
        return f"in {spec.descriptor_set}"
    if spec.proto:
        return f"in {spec.proto}"
    return f"by reflection at {spec.address}"


def _pool(spec):
    """A descriptor pool holding the method's service: from a descriptor set, a compiled .proto, or reflection."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    if spec.descriptor_set or spec.proto:
        data = pathlib.Path(spec.descriptor_set).read_bytes() if spec.descriptor_set else _compile(spec)
        files = descriptor_pb2.FileDescriptorSet()
        try:
            files.ParseFromString(data)
        except Exception as exc:  # noqa: BLE001 - protobuf raises its own DecodeError
            raise BadInput(f"stack.edge.descriptor_set: not a FileDescriptorSet ({exc})") from None
        pool = descriptor_pool.DescriptorPool()
        for f in files.file:
            pool.Add(f)
        return _FilePool(pool, sorted(f"{f.package}.{sv.name}".lstrip(".") for f in files.file for sv in f.service))
    import grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    channel = grpc.insecure_channel(spec.address)
    try:
        grpc.channel_ready_future(channel).result(timeout=10)
    except grpc.FutureTimeoutError:
        channel.close()
        raise RunFailed(f"cannot reach the edge at {spec.address} for server reflection (10 s)") from None
    database = ProtoReflectionDescriptorDatabase(channel)
    try:
        database.get_services()
    except grpc.RpcError as err:
        channel.close()
        raise BadInput(f"stack.edge: {spec.address} offers no server reflection ({err.code().name}); give proto or "
                       "descriptor_set") from None  # fmt: skip
    return _ReflectionPool(database, channel)


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


def _compile(spec) -> bytes:
    """`protoc --include_imports --descriptor_set_out` through grpcio-tools (the .proto route needs it)."""
    try:
        from grpc_tools import protoc
    except ImportError:
        raise BadInput(
            "stack.edge.proto needs grpcio-tools (pip install grpcio-tools), or give descriptor_set "
            "(protoc --include_imports --descriptor_set_out=FILE your.proto)"
        ) from None
    proto = pathlib.Path(spec.proto)
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "set.pb"
        includes = [f"-I{d}" for d in (spec.proto_path or [str(proto.parent)])]
        import importlib.resources

        well_known = str(importlib.resources.files("grpc_tools") / "_proto")
        code = protoc.main(["protoc", *includes, f"-I{well_known}", "--include_imports",
                            f"--descriptor_set_out={out}", str(proto)])  # fmt: skip
        if code != 0 or not out.exists():
            raise BadInput(f"stack.edge.proto: {proto} does not compile (protoc exit {code})")
        return out.read_bytes()
