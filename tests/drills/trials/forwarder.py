"""A plain gRPC forwarder with none of our interceptors: a hop as a service that propagates nothing is.

`python -m tests.drills.trials.forwarder --upstream HOST:PORT --ready-file F [--keep-metadata]` serves every
unary method on 127.0.0.1 (a port the kernel picks, written to F as `{"port": N}`) and calls the same method on
the upstream with the request's bytes. By default it sends the upstream none of the caller's metadata, as a Go
or Node service without OpenTelemetry propagation does with `x-tenant-id`, `x-fault` and the rest;
`--keep-metadata` forwards every key but the transport's own (what a propagating hop does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal

import grpc
from grpc import aio

#: metadata the gRPC library owns: never copied from one call to the other
TRANSPORT = frozenset({"user-agent", "te", "content-type", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding"})


def _same(b: bytes) -> bytes:
    return b


class Forward(grpc.GenericRpcHandler):
    def __init__(self, channel: aio.Channel, keep: bool) -> None:
        self.channel, self.keep = channel, keep

    def service(self, details):
        method, keep = details.method, self.keep
        upstream = self.channel.unary_unary(method, request_serializer=_same, response_deserializer=_same)

        async def handle(request: bytes, context: aio.ServicerContext) -> bytes:
            md = [(k, v) for k, v in context.invocation_metadata() if k not in TRANSPORT] if keep else []
            left = context.time_remaining()
            try:
                return await upstream(request, metadata=md, timeout=left)
            except aio.AioRpcError as err:
                await context.abort(err.code(), err.details() or "")

        return grpc.unary_unary_rpc_method_handler(handle, request_deserializer=_same, response_serializer=_same)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--ready-file", required=True)
    ap.add_argument("--keep-metadata", action="store_true")
    args = ap.parse_args()
    channel = aio.insecure_channel(args.upstream)
    server = aio.server()
    server.add_generic_rpc_handlers((Forward(channel, args.keep_metadata),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    tmp = args.ready_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"port": port, "metrics_port": 0, "pid": os.getpid()}, f)
    os.replace(tmp, args.ready_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(0.5)
    await channel.close()


if __name__ == "__main__":
    asyncio.run(main())
