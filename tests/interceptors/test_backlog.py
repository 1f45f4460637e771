"""The gRPC core's backlog bound (`backlog_options`) and its count (`drill_server_backlog_refused_total`).

grpc.aio takes one call at a time from the core; while its event loop is busy, the calls that arrive wait in
the core. Here the loop is held by a handler that blocks it until the core has seen every call of a burst
(read from the core's own count, channelz), so what the core did with them is exact: with a backlog of B it
handed B + 2 to the process once the loop was free (one taken by the request grpc.aio had already made, B + 1
waiting) and refused the others at once, which callers see as CANCELLED (grpcio 1.85's filter-stack server);
the process never saw those, and the metric counts exactly them, from the core's calls started minus the calls
that reached the interceptor.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time

import grpc
from grpc import aio

from harness.core.settings import FaultSettings
from harness.interceptors import FaultServerInterceptor, backlog_options, channelz_server_ids, watch_backlog
from harness.interceptors._overload import calls_started
from tests.conftest import sample

BACKLOG = 3
BURST = 30


def test_past_its_backlog_the_core_refuses_at_once_and_the_refusals_are_counted():
    service = "backlog-count"
    counts: collections.Counter = collections.Counter()
    blocking = threading.Event()

    async def main():
        fault = FaultServerInterceptor(FaultSettings(service=service, max_in_flight=1000), metrics=True)
        before = channelz_server_ids()
        server = aio.server(interceptors=[fault], options=backlog_options(BACKLOG))
        (server_id,) = channelz_server_ids() - before
        watch_backlog(server_id, service, fault.core.flight)

        def block(request, context):  # run on the loop: it holds the loop, as a saturated loop would be held
            blocking.set()
            for _ in range(1000):  # until the core has seen the whole burst (≤ 10 s)
                if calls_started(server_id) >= 2 + BURST:
                    break
                time.sleep(0.01)
            return b"blocked"

        async def block_on_loop(request, context):
            return block(request, context)

        async def echo(request, context):
            return request

        class Handlers(grpc.GenericRpcHandler):
            def service(self, details):
                behavior = block_on_loop if details.method.endswith("Block") else echo
                return grpc.unary_unary_rpc_method_handler(behavior)

        server.add_generic_rpc_handlers((Handlers(),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()

        def client():  # its own thread: the server's loop is held while the burst is sent
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                channel.unary_unary("/t.T/Echo")(b"warm", timeout=10)
                held = channel.unary_unary("/t.T/Block").future(b"b", timeout=30)
                assert blocking.wait(10)
                burst = [channel.unary_unary("/t.T/Echo").future(b"x", timeout=30) for _ in range(BURST)]
                for f in burst:
                    try:
                        f.result()
                        counts["OK"] += 1
                    except grpc.RpcError as err:
                        counts[err.code().name] += 1
                held.result()

        thread = threading.Thread(target=client)
        thread.start()
        while thread.is_alive():
            await asyncio.sleep(0.01)
        thread.join()
        value = sample("drill_server_backlog_refused_total", service=service)
        await server.stop(0)
        return value

    counted = asyncio.run(main())
    assert counts == {"OK": BACKLOG + 2, "CANCELLED": BURST - BACKLOG - 2}, counts
    assert counted == BURST - BACKLOG - 2
