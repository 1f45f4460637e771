"""A bare grpc.aio server for `proxy_overhead.py`: every method answers its request bytes, no interceptor.

    python benchmarks/_bare_echo.py PORT-FILE

The yardstick for the proxy's CPU per call: the least a Python gRPC server does for a unary call.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import grpc
from grpc import aio


async def _echo(request: bytes, context) -> bytes:
    return request


class _All(grpc.GenericRpcHandler):
    handler = grpc.unary_unary_rpc_method_handler(_echo)

    def service(self, handler_call_details):
        return self.handler


async def main(port_file: str) -> None:
    server = aio.server()
    server.add_generic_rpc_handlers((_All(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    with open(port_file + ".tmp", "w") as fh:
        fh.write(str(port))
    os.replace(port_file + ".tmp", port_file)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
