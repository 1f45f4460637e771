"""Which kind each method of the upstream is, so the pipeline judges `@after` and `@read` as in process.

Read once at start, from a descriptor set (`--descriptor-set`, as `protoc
--descriptor_set_out --include_imports` writes it), a `.proto` (`--proto`, compiled
with grpcio-tools) or the upstream's server reflection. A method found in none is
forwarded as a bidi stream (every kind is one on the wire) and the fault pipeline
judges it by what the wire shows.
"""

from __future__ import annotations

import importlib.resources
import pathlib
import tempfile

import grpc
from google.protobuf import descriptor_pb2

from harness.core.errors import BadInput
from harness.core.faults import Kind

#: services every gRPC server may offer that say nothing about the upstream's own methods
_INFRA = ("grpc.reflection.", "grpc.health.")


def from_descriptor_set(path: str) -> dict[str, Kind]:
    """`/pkg.Service/Method` → kind for every method of every service in a FileDescriptorSet."""
    try:
        data = pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise BadInput(f"proxy: --descriptor-set {path}: {exc.strerror}") from None
    files = descriptor_pb2.FileDescriptorSet()
    try:
        files.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError or others on garbage
        raise BadInput(f"proxy: --descriptor-set {path}: not a FileDescriptorSet ({exc})") from None
    return _methods(files.file)


def compile_proto(path: str, include: list[str] | None = None, *, option: str = "proxy: --proto") -> bytes:
    """A `.proto` compiled to a FileDescriptorSet's bytes (`protoc --include_imports --descriptor_set_out`)
    through grpcio-tools; without it, bad input that names the alternative."""
    try:
        from grpc_tools import protoc
    except ImportError:
        raise BadInput(f"{option} needs grpcio-tools (pip install grpcio-tools), or give a descriptor set "
                       "(protoc --include_imports --descriptor_set_out=FILE your.proto)") from None  # fmt: skip
    proto = pathlib.Path(path)
    if not proto.is_file():
        raise BadInput(f"{option}: no file {proto}")
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "set.pb"
        includes = [f"-I{d}" for d in (include or [str(proto.parent)])]
        well_known = str(importlib.resources.files("grpc_tools") / "_proto")
        code = protoc.main(["protoc", *includes, f"-I{well_known}", "--include_imports",
                            f"--descriptor_set_out={out}", str(proto)])  # fmt: skip
        if code != 0 or not out.exists():
            raise BadInput(f"{option}: {proto} does not compile (protoc exit {code})")
        return out.read_bytes()


def from_proto(path: str, include: list[str] | None = None) -> dict[str, Kind]:
    """`/pkg.Service/Method` → kind for every method of a `.proto` (and what it imports)."""
    files = descriptor_pb2.FileDescriptorSet.FromString(compile_proto(path, include))
    return _methods(files.file)


def from_reflection(target: str, timeout_s: float = 5.0) -> dict[str, Kind] | None:
    """The same from the upstream's server reflection; None when it offers none or cannot be reached."""
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    channel = grpc.insecure_channel(target)
    try:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)

        def ask(**request):
            replies = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(**request)]),
                                                timeout=timeout_s)  # fmt: skip
            return next(iter(replies))

        listed = ask(list_services="")
        names = [s.name for s in listed.list_services_response.service if not s.name.startswith(_INFRA)]
        seen: dict[str, descriptor_pb2.FileDescriptorProto] = {}
        for name in names:
            reply = ask(file_containing_symbol=name)
            for raw in reply.file_descriptor_response.file_descriptor_proto:
                proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
                seen[proto.name] = proto
        return _methods(seen.values())
    except grpc.RpcError:
        return None
    finally:
        channel.close()


def _methods(files) -> dict[str, Kind]:
    out = {}
    for f in files:
        prefix = f"{f.package}." if f.package else ""
        for service in f.service:
            for m in service.method:
                out[f"/{prefix}{service.name}/{m.name}"] = Kind.of(m.client_streaming, m.server_streaming)
    return out
