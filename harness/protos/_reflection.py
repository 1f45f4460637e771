"""A server's types asked from its server reflection (`grpc.reflection.v1alpha`, what grpcurl asks).

`ReflectionDatabase` is a protobuf descriptor database that asks the server for a file
when a descriptor pool needs one, as grpc's own `ProtoReflectionDescriptorDatabase`
does, with one difference that matters to a drill: every question has a deadline, so a
server that accepts a connection and never answers cannot hang the caller. A question
the server cannot answer (reflection not served, nothing listening, no answer in time)
is `ReflectionError` with its gRPC status; a symbol it does not know is a `KeyError`,
as a database's lookups say it.
"""

from __future__ import annotations

from google.protobuf import descriptor_database, descriptor_pb2


class ReflectionError(Exception):
    """`target`'s server reflection could not be asked: `code` is the gRPC status's name (UNIMPLEMENTED: the
    server offers no reflection; UNAVAILABLE: nothing answers there; DEADLINE_EXCEEDED: no answer in time)."""

    def __init__(self, target: str, code: str) -> None:
        super().__init__(f"{target} offers no server reflection ({code})")
        self.target, self.code = target, code


class ReflectionDatabase(descriptor_database.DescriptorDatabase):
    """The files a server's reflection gives, asked for when first needed, each question at most `timeout_s`."""

    def __init__(self, channel, target: str, timeout_s: float) -> None:
        from grpc_reflection.v1alpha import reflection_pb2_grpc

        super().__init__()
        self.target, self.timeout_s = target, timeout_s
        self._stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        self._names: set[str] = set()

    def services(self) -> list[str]:
        """Every service the server lists, sorted (reflection's own and health's among them, if it serves them)."""
        reply = self._ask(list_services="")
        return sorted(s.name for s in reply.list_services_response.service)

    def FindFileByName(self, name: str) -> descriptor_pb2.FileDescriptorProto:  # noqa: N802 - protobuf's API
        try:
            return super().FindFileByName(name)
        except KeyError:
            self._keep(self._ask(file_by_filename=name), name)
            return super().FindFileByName(name)

    def FindFileContainingSymbol(self, symbol: str) -> descriptor_pb2.FileDescriptorProto:  # noqa: N802
        try:
            return super().FindFileContainingSymbol(symbol)
        except KeyError:
            self._keep(self._ask(file_containing_symbol=symbol), symbol)
            return super().FindFileContainingSymbol(symbol)

    def _keep(self, reply, key: str) -> None:
        """The files of an answer (the one asked for and those it imports), each once; an error answer (the
        server does not know `key`) is a KeyError."""
        if reply.WhichOneof("message_response") == "error_response":
            raise KeyError(key)
        for raw in reply.file_descriptor_response.file_descriptor_proto:
            proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
            if proto.name not in self._names:
                self._names.add(proto.name)
                self.Add(proto)

    def _ask(self, **request):
        import grpc
        from grpc_reflection.v1alpha import reflection_pb2

        try:
            replies = self._stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(**request)]),
                                                      timeout=self.timeout_s)  # fmt: skip
            return next(iter(replies))
        except grpc.RpcError as err:
            raise ReflectionError(self.target, err.code().name) from None
        except StopIteration:  # the server ended the stream without an answer
            raise ReflectionError(self.target, "no answer") from None
