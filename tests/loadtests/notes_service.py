"""A service that is not the demo, with one method of each kind, drill harness added as the README says.

`python -m tests.loadtests.notes_service --ready-file F --record R` compiles notes.proto (grpcio-tools),
serves `notes.v1.Notes` with `aio.server(interceptors=server_interceptors(...))`, server reflection on,
binds port 0 for gRPC and for /metrics and writes both ports to F once serving. Every call the handler
ran appends one JSON line to R: method, request id, tenant, directive, messages received and sent. The
switch and the seed come from the environment (DRILL_FAULT_ENABLED, DRILL_FAULT_SEED); the audit lines
go to stderr.

- `Put` (unary): answers `seen: 1`;
- `Watch` (server-streaming): answers `count` replies (the request's), 5 ms apart;
- `Upload` (client-streaming): reads the stream to its end, answers `seen: N`;
- `Chat` (bidi): answers each message with the count so far.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import pathlib
import sys
import tempfile

PROTO = """
syntax = "proto3";
package notes.v1;
message Note { string text = 1; int32 count = 2; }
message Receipt { int32 seen = 1; string text = 2; }
service Notes {
  rpc Put(Note) returns (Receipt);
  rpc Watch(Note) returns (stream Receipt);
  rpc Upload(stream Note) returns (Receipt);
  rpc Chat(stream Note) returns (stream Receipt);
}
"""


def write_proto(workdir: pathlib.Path) -> pathlib.Path:
    path = workdir / "notes.proto"
    path.write_text(PROTO)
    return path


def compile_proto(workdir: pathlib.Path):
    from grpc_tools import protoc

    proto = write_proto(workdir)
    code = protoc.main(["protoc", f"-I{workdir}", f"--python_out={workdir}", f"--grpc_python_out={workdir}",
                        str(proto)])  # fmt: skip
    if code != 0:
        raise SystemExit(f"protoc failed: {code}")
    sys.path.insert(0, str(workdir))
    return importlib.import_module("notes_pb2"), importlib.import_module("notes_pb2_grpc")


async def serve(ready_file: str, record_file: str, reflection_on: bool) -> None:
    from grpc import aio
    from grpc_reflection.v1alpha import reflection
    from prometheus_client import start_http_server

    from harness.core import headers as h
    from harness.core.settings import FaultSettings
    from harness.interceptors import server_interceptors

    pb, pb_grpc = compile_proto(pathlib.Path(tempfile.mkdtemp(prefix="notes-")))
    record = open(record_file, "a", buffering=1)

    def note(context, method: str, received: int, sent: int) -> None:
        md = dict(context.invocation_metadata() or ())
        line = {"method": method, "request_id": md.get(h.REQUEST_ID), "tenant": md.get(h.TENANT),
                "fault": md.get(h.FAULT), "received": received, "sent": sent}  # fmt: skip
        record.write(json.dumps(line) + "\n")

    class Notes(pb_grpc.NotesServicer):
        async def Put(self, request, context):  # noqa: N802
            note(context, "Put", 1, 1)
            return pb.Receipt(seen=1, text=request.text)

        async def Watch(self, request, context):  # noqa: N802
            for i in range(request.count):
                await asyncio.sleep(0.005)
                yield pb.Receipt(seen=i + 1, text=request.text)
            note(context, "Watch", 1, request.count)

        async def Upload(self, request_iterator, context):  # noqa: N802
            seen = 0
            async for _ in request_iterator:
                seen += 1
            note(context, "Upload", seen, 1)
            return pb.Receipt(seen=seen)

        async def Chat(self, request_iterator, context):  # noqa: N802
            seen = 0
            async for message in request_iterator:
                seen += 1
                yield pb.Receipt(seen=seen, text=message.text)
            note(context, "Chat", seen, seen)

    # the README's two lines: the interceptors from the environment's switch (off unless DRILL_FAULT_ENABLED)
    server = aio.server(interceptors=server_interceptors(FaultSettings.from_env(service="notes")))
    pb_grpc.add_NotesServicer_to_server(Notes(), server)
    if reflection_on:
        names = (pb.DESCRIPTOR.services_by_name["Notes"].full_name, reflection.SERVICE_NAME)
        reflection.enable_server_reflection(names, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    http, _thread = start_http_server(0, addr="127.0.0.1")
    tmp = ready_file + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"port": port, "metrics_port": http.server_port, "pid": os.getpid()}, fh)
    os.replace(tmp, ready_file)
    await server.wait_for_termination()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ready-file", required=True)
    p.add_argument("--record", required=True)
    p.add_argument("--no-reflection", action="store_true")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")  # the audit lines
    asyncio.run(serve(args.ready_file, args.record, not args.no_reflection))


if __name__ == "__main__":
    main()
