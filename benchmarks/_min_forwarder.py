"""The least a Python gRPC forwarder does for a unary call, for `proxy_floor.py`: no interceptor, no metadata
or status relay, no kinds, no deadline care beyond passing it on.

    python benchmarks/_min_forwarder.py aio|sync UPSTREAM PORT-FILE

`aio`: a grpc.aio server whose every method awaits the same method on a grpc.aio channel (what `drill proxy`
is built on); `sync`: the thread-pool server and a blocking channel. Neither is a proxy anyone should run:
they are the floors `drill proxy`'s own cost is read against.
"""

from __future__ import annotations

import asyncio
import pathlib
import signal
import sys
from concurrent import futures

import grpc
from grpc import aio


def _aio(upstream: str, port_file: str) -> None:
    async def main() -> None:
        channel = aio.insecure_channel(upstream)
        stubs: dict = {}

        class _All(grpc.GenericRpcHandler):
            def service(self, details):
                stub = stubs.setdefault(details.method, channel.unary_unary(details.method))

                async def unary(request: bytes, context) -> bytes:
                    return await stub(request, timeout=context.time_remaining())

                return grpc.unary_unary_rpc_method_handler(unary)

        server = aio.server()
        server.add_generic_rpc_handlers((_All(),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        pathlib.Path(port_file).write_text(str(port))
        await stop.wait()
        await server.stop(0)

    asyncio.run(main())


def _sync(upstream: str, port_file: str) -> None:
    channel = grpc.insecure_channel(upstream)
    stubs: dict = {}

    class _All(grpc.GenericRpcHandler):
        def service(self, details):
            stub = stubs.setdefault(details.method, channel.unary_unary(details.method))
            return grpc.unary_unary_rpc_method_handler(lambda req, ctx: stub(req, timeout=ctx.time_remaining()))

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((_All(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    signal.signal(signal.SIGTERM, lambda *_: server.stop(0))
    pathlib.Path(port_file).write_text(str(port))
    server.wait_for_termination()


if __name__ == "__main__":
    {"aio": _aio, "sync": _sync}[sys.argv[1]](*sys.argv[2:4])
