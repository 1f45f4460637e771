"""Calls the garbage collector closes while the thread it interrupted holds every metric's lock (a program of its
own, run by tests/interceptors/test_collected.py: a thread that waits for itself there would hang any process).

A real grpc.aio server with the fault interceptor, on an event loop of its own thread, serves three calls whose
handler never returns: an organic one, a drill one (through the drill path: `delay:100@served`, acting after the
handler), and a call made by the drill's aio client interceptor on the same loop. Then the loop stops for good,
as when a service's loop ends with calls in its handlers: their coroutines are tasks nobody will resume. A
finalizer run by the collector closes them (GeneratorExit), which is what collecting an ended loop's tasks does.
The collection runs in a thread holding the lock of every metric of harness.core.metrics, as a thread inside
`labels()` holds its metric's lock when the allocation of a new child starts a collection
(prometheus_client's locks are not reentrant).

Prints one JSON line: whether the collection finished within 10 s, which of the calls recorded anything, and
whether the interrupted thread's own call scope is still current after it; exits 0 when it finished, 1 when the
thread waits for itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import threading

import grpc
from grpc import aio
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

from harness.core import headers as h
from harness.core import metrics as m
from harness.core import scope
from harness.core.settings import FaultSettings
from harness.interceptors import DrillClientInterceptor, Tagging
from harness.interceptors.server_aio import FaultServerInterceptor

SERVICE = "collected"
CLIENT = "collected-client"
TENANT = "tenant-drill"


def main() -> int:
    gc.disable()  # the one collection is the scenario's
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    held: list[asyncio.Task] = []
    servers: list[aio.Server] = []
    started = threading.Event()

    async def never(request, context):
        held.append(asyncio.current_task())
        if len(held) == 3:
            started.set()
        await asyncio.Event().wait()

    settings = FaultSettings(enabled=True, seed=7, service=SERVICE, instance_id=f"{SERVICE}-0",
                             tenants=frozenset({TENANT}))  # fmt: skip

    async def serve() -> int:
        srv = aio.server(interceptors=[FaultServerInterceptor(settings, metrics=True)])
        srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "own.v1.Own", {"Do": grpc.unary_unary_rpc_method_handler(never)}),))  # fmt: skip
        port = srv.add_insecure_port("127.0.0.1:0")
        await srv.start()
        servers.append(srv)  # kept: the server outlives the loop, as a service's does
        return port

    port = asyncio.run_coroutine_threadsafe(serve(), loop).result(10)
    sync = grpc.insecure_channel(f"127.0.0.1:{port}")
    do = sync.unary_unary("/own.v1.Own/Do")
    pending = [do.future(b"organic", timeout=60),
               do.future(b"drill", timeout=60, metadata=((h.TENANT, TENANT), (h.REQUEST_ID, "c1"),
                                                          (h.FAULT, "delay:100@served")))]  # fmt: skip

    async def client_call() -> None:
        ic = DrillClientInterceptor(Tagging(tenant=TENANT, directive="delay:100@served"),
                                    service=CLIENT)  # fmt: skip
        async with aio.insecure_channel(f"127.0.0.1:{port}", interceptors=[ic]) as ch:
            await ch.unary_unary("/own.v1.Own/Do")(b"client", timeout=60)

    asyncio.run_coroutine_threadsafe(client_call(), loop)
    assert started.wait(10), f"{len(held)} of the three calls reached the handler"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    assert not thread.is_alive()
    tasks = list(asyncio.all_tasks(loop))  # the handlers', grpc's, the client interceptor's: every one left

    class Closer:
        """Garbage with a finalizer: it closes the calls' coroutines, as collecting their tasks does."""

        def __init__(self, tasks) -> None:
            self.tasks = tasks
            self.me = self  # a cycle: only the collector frees it

        def __del__(self) -> None:
            for task in self.tasks:
                with contextlib.suppress(RuntimeError):
                    task.get_coro().close()

    Closer(tasks)
    del tasks
    held.clear()
    locks = [metric._lock for metric in vars(m).values()
             if isinstance(metric, MetricWrapperBase) and hasattr(metric, "_lock")]  # parents: labels() takes it
    done = threading.Event()

    mine = scope.CallScope(service="interrupted", method="own.v1.Own/Work")
    kept: list[bool] = []

    def collect() -> None:
        """The interrupted thread: serving a call of its own (its scope current), inside `labels()`."""
        scope.enter(mine)
        for lock in locks:
            lock.acquire()
        gc.collect()
        for lock in locks:
            lock.release()
        kept.append(scope.current() is mine)
        done.set()

    threading.Thread(target=collect, daemon=True).start()
    finished = done.wait(10)
    recorded = {}
    if finished:
        recorded = {
            "server": [s.labels for mf in REGISTRY.collect() if mf.name == "drill_server_calls"
                       for s in mf.samples if s.labels.get("service") == SERVICE and s.value],
            "client": [s.labels for mf in REGISTRY.collect() if mf.name == "drill_client_calls"
                       for s in mf.samples if s.labels.get("service") == CLIENT and s.value],
        }  # fmt: skip
    print(json.dumps({"finished": finished, "recorded": recorded, "locks": len(locks), "scope_kept": kept == [True]}),
          flush=True)  # fmt: skip
    for call in pending:
        call.cancel()
    os._exit(0 if finished else 1)  # a thread that waits for itself would keep the interpreter from ending


if __name__ == "__main__":
    raise SystemExit(main())
