"""A gRPC service's types: what the load's edge, the proxy (and `drill init`) ask of a `.proto`, a descriptor set
or a server's reflection.

One place for reading types, so every command reads them alike: a `.proto` compiled
through grpcio-tools (with its import paths and protobuf's well-known types), a
FileDescriptorSet, or server reflection (v1alpha) with a deadline on every question;
each gives `Types`, one descriptor pool with the same questions (services, a service,
every `Method` with its `Kind` and input and output message descriptors, kinds alone).
`list_methods` is the one call for "the methods of this source, with kinds and messages".
Bad input is `BadInput` naming the caller's option (`option=`); a server that cannot
be asked is `ReflectionError`.

May import: harness.core, grpc and protobuf (grpc only where reflection is asked).
"""

from harness.protos._files import compile_proto, parse_descriptor_set, read_descriptor_set
from harness.protos._kinds import method_kinds
from harness.protos._reflection import ReflectionError
from harness.protos._types import (
    INFRA_SERVICES,
    Method,
    Types,
    from_descriptor_set,
    from_files,
    from_proto,
    from_reflection,
    kind_of,
    list_methods,
    message_class,
    open_types,
)

__all__ = [
    "INFRA_SERVICES",
    "Method",
    "ReflectionError",
    "Types",
    "compile_proto",
    "from_descriptor_set",
    "from_files",
    "from_proto",
    "from_reflection",
    "kind_of",
    "list_methods",
    "message_class",
    "method_kinds",
    "open_types",
    "parse_descriptor_set",
    "read_descriptor_set",
]
