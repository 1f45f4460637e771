"""A service that is not the demo, with drill harness added as the README says: its own proto, compiled here.

`python -m tests.stacks.own_service --ready-file F` compiles shop.proto (grpcio-tools), serves
`shop.v1.Cart` with `aio.server(interceptors=server_interceptors(...))`, server reflection on and no
health service, binds port 0 for gRPC and for /metrics, and writes both ports to F once serving.
Its name, the switch and the seed come from the environment (DRILL_SERVICE, DRILL_FAULT_ENABLED,
DRILL_FAULT_SEED), as in a deployment: the code names none of them.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import pathlib
import sys
import tempfile

PROTO = """
syntax = "proto3";
package shop.v1;
message AddRequest { string item = 1; int32 qty = 2; }
message AddReply { int32 total = 1; }
service Cart {
  rpc Add(AddRequest) returns (AddReply);
  rpc Watch(AddRequest) returns (stream AddReply);
}
"""


def compile_proto(workdir: pathlib.Path):
    from grpc_tools import protoc

    (workdir / "shop.proto").write_text(PROTO)
    code = protoc.main(["protoc", f"-I{workdir}", f"--python_out={workdir}", f"--grpc_python_out={workdir}",
                        str(workdir / "shop.proto")])  # fmt: skip
    if code != 0:
        raise SystemExit(f"protoc failed: {code}")
    sys.path.insert(0, str(workdir))
    return importlib.import_module("shop_pb2"), importlib.import_module("shop_pb2_grpc")


async def serve(ready_file: str) -> None:
    from grpc import aio
    from grpc_reflection.v1alpha import reflection
    from prometheus_client import start_http_server

    from harness.interceptors import server_interceptors

    pb, pb_grpc = compile_proto(pathlib.Path(tempfile.mkdtemp(prefix="shop-")))

    class Cart(pb_grpc.CartServicer):
        async def Add(self, request, context):  # noqa: N802
            return pb.AddReply(total=request.qty)

    # the README's two lines: the interceptors from the environment (none unless DRILL_FAULT_ENABLED; the name
    # x-fault-target must say from DRILL_SERVICE)
    server = aio.server(interceptors=server_interceptors())
    pb_grpc.add_CartServicer_to_server(Cart(), server)
    reflection.enable_server_reflection(
        (pb.DESCRIPTOR.services_by_name["Cart"].full_name, reflection.SERVICE_NAME), server
    )
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
    asyncio.run(serve(p.parse_args().ready_file))


if __name__ == "__main__":
    main()
