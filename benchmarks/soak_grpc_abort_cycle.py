"""Minimal reproduction for grpcio's maintainers: an aio handler that aborts leaves its frame in a cycle.

    .venv/bin/python benchmarks/soak_grpc_abort_cycle.py

Plain grpcio, no interceptors, no harness code: a generic unary handler that returns, and one
that calls `await context.abort(...)`. After N calls of each (the cyclic collector disabled
meanwhile) it counts the objects the handler's frame held that are still alive, and what
`gc.collect()` then finds unreachable. A returning handler's frame is freed at once; an
aborting handler's frame (and everything it references: request, context, whatever the handler
built) stays until the next full collection. Found by the soak: under overload most calls end
in an abort, so the garbage a full collection would free rises with the calls that failed.
"""

from __future__ import annotations

import asyncio
import gc
import sys

import grpc
from grpc import aio

N = 200


class Held:
    """Stands for whatever the handler's frame holds (request state, buffers...)."""


async def ok(request, context):
    held = Held()  # noqa: F841 - kept in the frame on purpose
    return b"ok"


async def abort(request, context):
    held = Held()  # noqa: F841
    await context.abort(grpc.StatusCode.UNAVAILABLE, "no")


async def main() -> None:
    handlers = {"OK": grpc.unary_unary_rpc_method_handler(ok), "Abort": grpc.unary_unary_rpc_method_handler(abort)}
    server = aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.S", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        for name in ("OK", "Abort"):
            call = ch.unary_unary(f"/t.S/{name}")
            for _ in range(5):  # warm
                try:
                    await call(b"x", timeout=5)
                except aio.AioRpcError:
                    pass
            gc.collect()
            gc.disable()
            for _ in range(N):
                try:
                    await call(b"x", timeout=5)
                except aio.AioRpcError:
                    pass
            await asyncio.sleep(0.2)
            alive = sum(1 for o in gc.get_objects() if type(o) is Held)
            found = gc.collect()
            gc.enable()
            print(
                f"{name}: {N} calls -> {alive} objects held by a handler frame still alive without a collection; "
                f"gc.collect() then found {found} unreachable objects ({found / N:.0f} per call)"
            )
    await server.stop(0)
    print(f"grpcio {grpc.__version__}, Python {sys.version.split()[0]}")


if __name__ == "__main__":
    asyncio.run(main())
