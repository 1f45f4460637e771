"""A service's types, wherever they came from: its services, each method's kind and message descriptors.

`Types` is one descriptor pool over one descriptor database: the files of a descriptor
set or a compiled `.proto` (all known at once), or a server's reflection (asked as
needed). Callers ask it the same questions either way: which services there are, a
service's descriptor, every method with its kind (`harness.core.faults.Kind`) and its
input and output messages. Kinds alone (`kinds()`) are read from the files as written,
without building descriptors, so a set that lacks an import still tells each method's kind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from google.protobuf import descriptor, descriptor_database, descriptor_pb2, descriptor_pool, message_factory

from harness.core.errors import BadInput
from harness.core.faults import Kind
from harness.protos._files import compile_proto, parse_descriptor_set, read_descriptor_set
from harness.protos._reflection import ReflectionDatabase, ReflectionError

#: Services any gRPC server may offer that say nothing of its own methods (`infra=False` leaves them out).
INFRA_SERVICES = ("grpc.reflection.", "grpc.health.")


@dataclasses.dataclass(frozen=True)
class Method:
    """One method: `name` is its full name as called (`/pkg.Service/Method`), `input` and `output` its messages'
    descriptors (`input.fields` are what a request may set; `message_class(input)` builds one)."""

    name: str
    kind: Kind
    input: descriptor.Descriptor
    output: descriptor.Descriptor

    @property
    def service(self) -> str:
        """`pkg.Service`."""
        return self.name[1:].rpartition("/")[0]


def kind_of(method: descriptor.MethodDescriptor | descriptor_pb2.MethodDescriptorProto) -> Kind:
    """A method's kind, from its descriptor (or its proto as written in a file)."""
    return Kind.of(method.client_streaming, method.server_streaming)


def message_class(message: descriptor.Descriptor) -> type:
    """The Python message class of a message descriptor (what parses and serializes its bytes)."""
    return message_factory.GetMessageClass(message)


class Types:
    """A descriptor pool and the services its source declares; `close()` (or `with`) ends a reflection channel.

    `where` says where the types came from, for error lines (`in cart.pb`, `by reflection at HOST:PORT`)."""

    def __init__(self, database: descriptor_database.DescriptorDatabase, services: Sequence[str], *, where: str,
                 option: str = "", channel=None) -> None:  # fmt: skip
        self.database = database
        self.pool = descriptor_pool.DescriptorPool(database)
        self.where, self._option, self._channel = where, option, channel
        self._services = sorted(services)

    def services(self, *, infra: bool = True) -> list[str]:
        """Full names of the services (`pkg.Service`), sorted; `infra=False`: without reflection's and health's."""
        return [s for s in self._services if infra or not s.startswith(INFRA_SERVICES)]

    def service(self, name: str) -> descriptor.ServiceDescriptor:
        """The descriptor of service `name` (`pkg.Service`); KeyError when the source has none by that name,
        bad input when its types do not build (a descriptor set written without `--include_imports`)."""
        try:
            self.database.FindFileContainingSymbol(name)
        except KeyError:
            raise KeyError(name) from None
        try:
            return self.pool.FindServiceByName(name)
        except KeyError:
            raise
        except Exception as exc:  # noqa: BLE001 - a pool that cannot build a file raises TypeError (upb) or others
            what = f"{self._option}: " if self._option else ""
            raise BadInput(f"{what}the types {self.where} do not build ({exc}); a descriptor set needs every file "
                           "it imports (protoc --include_imports)") from None  # fmt: skip

    def methods(self, *, infra: bool = True) -> list[Method]:
        """Every method of every service, in order of service then declaration, with its kind and messages."""
        out = []
        for name in self.services(infra=infra):
            svc = self.service(name)
            for m in svc.methods:
                out.append(Method(f"/{svc.full_name}/{m.name}", kind_of(m), m.input_type, m.output_type))
        return out

    def kinds(self, *, infra: bool = True) -> dict[str, Kind]:
        """`/pkg.Service/Method` → kind for every method, read from the files as written (no descriptor is
        built: a file's missing import does not matter here). A service the source lists but cannot give the
        file of (reflection that does not know it) is left out."""
        out: dict[str, Kind] = {}
        for name in self.services(infra=infra):
            try:
                file = self.database.FindFileContainingSymbol(name)
            except KeyError:
                continue
            prefix = f"{file.package}." if file.package else ""
            for svc in file.service:
                if f"{prefix}{svc.name}" == name:
                    out.update({f"/{name}/{m.name}": kind_of(m) for m in svc.method})
        return out

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()

    def __enter__(self) -> Types:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def from_files(files: descriptor_pb2.FileDescriptorSet, *, where: str, option: str = "") -> Types:
    """The types of a FileDescriptorSet's files (in any order)."""
    database = descriptor_database.DescriptorDatabase()
    services = []
    for f in files.file:
        database.Add(f)
        services += [f"{f.package}.{s.name}" if f.package else s.name for s in f.service]
    return Types(database, services, where=where, option=option)


def from_descriptor_set(path: str, *, option: str) -> Types:
    """The types of the FileDescriptorSet at `path` (`protoc --include_imports --descriptor_set_out`);
    bad input naming `option` when it cannot be read or is not one."""
    return from_files(read_descriptor_set(path, option=option), where=f"in {path}", option=option)


def from_proto(path: str, include: Sequence[str] = (), *, option: str) -> Types:
    """The types of a `.proto` and every file it imports, compiled through grpcio-tools (`compile_proto`)."""
    data = compile_proto(path, include, option=option)
    return from_files(parse_descriptor_set(data, option=f"{option}: {path}"), where=f"in {path}", option=option)


def from_reflection(target, *, timeout_s: float = 5.0, address: str | None = None) -> Types:
    """The types a server's reflection gives (v1alpha), each file asked for when first needed, each question at
    most `timeout_s`.

    `target` is `HOST:PORT` or a grpc.Channel already open to it (`address` then names it in messages);
    either way the channel is the Types' to close. `ReflectionError` (with the gRPC status) when the server
    cannot be asked for its services: no reflection, nothing listening, no answer in time."""
    import grpc

    channel = grpc.insecure_channel(target) if isinstance(target, str) else target
    address = address or (target if isinstance(target, str) else "the server")
    database = ReflectionDatabase(channel, address, timeout_s)
    try:
        services = database.services()
    except ReflectionError:
        channel.close()
        raise
    return Types(database, services, where=f"by reflection at {address}", channel=channel)


def open_types(*, proto: str | None = None, descriptor_set: str | None = None, target: str | None = None,
               include: Sequence[str] = (), option: str = "", timeout_s: float = 5.0) -> Types:  # fmt: skip
    """The types of exactly one source: a `.proto` (with `include` paths), a descriptor set, or the server
    reflection of `target`. `option` names the input in errors (`init: --proto`); the `.proto`'s and the
    descriptor set's errors name it, as `from_proto` and `from_descriptor_set` do."""
    given = [name for name, value in (("proto", proto), ("descriptor_set", descriptor_set), ("target", target))
             if value]  # fmt: skip
    if len(given) != 1:
        raise ValueError(f"one of proto, descriptor_set or target, not {given or 'none'}")
    if proto:
        return from_proto(proto, include, option=option)
    if descriptor_set:
        return from_descriptor_set(descriptor_set, option=option)
    return from_reflection(target, timeout_s=timeout_s)


def list_methods(*, proto: str | None = None, descriptor_set: str | None = None, target: str | None = None,
                 include: Sequence[str] = (), option: str = "", timeout_s: float = 5.0,
                 infra: bool = False) -> list[Method]:  # fmt: skip
    """Every method of a `.proto`, a descriptor set or a server's reflection (exactly one), with its full name,
    kind and input and output message descriptors; by default without reflection's and health's services.
    Errors as `open_types` says (BadInput naming `option`; ReflectionError for a target)."""
    with open_types(proto=proto, descriptor_set=descriptor_set, target=target, include=include, option=option,
                    timeout_s=timeout_s) as types:  # fmt: skip
        return types.methods(infra=infra)
