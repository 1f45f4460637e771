"""Property: random sequences of drill and organic calls, with the switch on, never touch organic traffic.

Handlers include one that spawns a background task calling a downstream service,
a sync handler on the grpc.aio server and a plain-generator stream. Every organic
call must end OK, carry no `x-drill-fault` trailer and be counted `organic`;
the background calls must reach the downstream as organic; and organic latency
with the switch on stays within noise of the same calls against a switch-off server.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import grpc
from grpc import aio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.core.settings import FaultSettings
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import Tagging
from tests.conftest import sample_sum
from tests.interceptors.servers import aio_server, aio_stub

Req = drill_pb2.CallRequest
WORK_S = 0.03  # the sync handler's work: large enough that running three on the loop (serially) shows


class Mixed(drill_pb2_grpc.DemoServicer):
    """Call: async, spawns a background call to the downstream; Write: sync; Stream: plain generator."""

    def __init__(self, bg_port: int) -> None:
        self.bg_port = bg_port
        self.tasks: set[asyncio.Task] = set()

    async def _background(self) -> None:
        await asyncio.sleep(0.005)
        async with aio_stub(self.bg_port) as b:
            await b.Call(Req(), timeout=5)

    async def Call(self, request, context):  # noqa: N802
        task = asyncio.ensure_future(self._background())
        self.tasks.add(task)
        return drill_pb2.CallReply(payload="call")

    def Write(self, request, context):  # noqa: N802
        time.sleep(WORK_S)
        return drill_pb2.CallReply(payload="write")

    def Stream(self, request, context):  # noqa: N802
        for i in range(2):
            yield drill_pb2.CallReply(payload=str(i))


_op = st.tuples(
    st.sampled_from(["organic", "drill"]),
    st.sampled_from(["Call", "Write", "Stream"]),
    st.sampled_from(["delay:20", "delay:10-40", "abort:INTERNAL", "drop:20", "abort:UNAVAILABLE"]),
    st.sampled_from([None, 50, 100]),
    st.sampled_from([None, "prop-on", "prop-bg"]),
)


async def _one(stub, method: str, timeout: float = 30) -> tuple[grpc.StatusCode, bool]:
    """(status, x-drill-fault trailer present). The organic deadline only guards against a hang: nothing here
    waits anywhere near it unless a drill leaked (a leaked drop or delay still ends in a status other than OK),
    but a box starved by other work stalled 3 concurrent calls past 5 s once."""
    if method == "Stream":
        call = stub.Stream(Req(), timeout=timeout)
        try:
            async for _ in call:
                pass
        except aio.AioRpcError as err:
            return err.code(), any(k == "x-drill-fault" for k, _ in err.trailing_metadata() or ())
    else:
        call = getattr(stub, method)(Req(), timeout=timeout)
        try:
            await call
        except aio.AioRpcError as err:
            return err.code(), any(k == "x-drill-fault" for k, _ in err.trailing_metadata() or ())
    trailers = await call.trailing_metadata()
    return await call.code(), any(k == "x-drill-fault" for k, _ in trailers or ())


def test_no_organic_call_ever_feels_a_drill():
    loop = asyncio.new_event_loop()
    stack = []

    def enter(cm):
        stack.append(cm)
        return loop.run_until_complete(cm.__aenter__())

    bg_port, _ = enter(aio_server(FaultSettings(enabled=True, seed=2, service="prop-bg")))
    on_servicer, off_servicer = Mixed(bg_port), Mixed(bg_port)
    on_port, _ = enter(aio_server(FaultSettings(enabled=True, seed=2, service="prop-on"), servicer=on_servicer))
    off_port, _ = enter(aio_server(FaultSettings(enabled=False, service="prop-off"), metrics=True,
                                   servicer=off_servicer))  # fmt: skip
    organic_on, organic_off = enter(aio_stub(on_port)), enter(aio_stub(off_port))
    latency = {"on": [], "off": []}
    counted = {"organic": 0, "drill": 0}

    async def organic_batch(stub, method: str) -> tuple[float, list]:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(_one(stub, method) for _ in range(3)))  # concurrent, as real traffic
        return time.perf_counter() - t0, results

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(_op, min_size=1, max_size=6))
    def check(ops):
        async def run() -> None:
            for kind, method, directive, ratio, target in ops:
                if kind == "drill":
                    tagging = Tagging(tenant="tenant-drill", directive=directive, ratio=ratio, target=target)
                    async with aio_stub(on_port, tagging) as stub:
                        await _one(stub, method, timeout=2)
                    counted["drill"] += 1
                    continue
                order = [("on", organic_on), ("off", organic_off)]
                if len(latency["on"]) % 2:
                    order.reverse()  # alternate who goes first: no systematic warm-up advantage
                for name, stub in order:
                    elapsed, results = await organic_batch(stub, method)
                    assert all(r == (grpc.StatusCode.OK, False) for r in results), (name, method, results)
                    latency[name].append(elapsed)
                counted["organic"] += 3

        loop.run_until_complete(run())

    try:
        check()
        loop.run_until_complete(asyncio.gather(*on_servicer.tasks, *off_servicer.tasks))
    finally:
        for cm in reversed(stack):
            loop.run_until_complete(cm.__aexit__(None, None, None))
        loop.close()

    # Counted as what they are, on the server that saw them.
    assert sample_sum("drill_server_calls_total", service="prop-on", traffic="organic") == counted["organic"]
    assert sample_sum("drill_server_calls_total", service="prop-on", traffic="drill") == counted["drill"]
    # Background calls spawned during drill calls reached the downstream as organic and were never faulted.
    assert sample_sum("drill_server_calls_total", service="prop-bg", traffic="drill") == 0
    assert sample_sum("drill_fault_hits_total", service="prop-bg") == 0
    assert sample_sum("drill_server_calls_total", service="prop-bg", grpc_status="OK") == len(
        on_servicer.tasks
    ) + len(off_servicer.tasks)
    # Latency: the same batches against the switch-off server are the baseline. The interceptor costs
    # tens of microseconds; the bound allows 50 % plus 15 ms of scheduling noise on a busy machine,
    # well below what a leaked fault (>= 20 ms on every call) or sync handlers run one after another on
    # the loop (three times the work, +60 ms a batch) would add to the median.
    if latency["on"]:
        on_median, off_median = statistics.median(latency["on"]), statistics.median(latency["off"])
        assert on_median <= 1.5 * off_median + 0.015, (on_median, off_median, len(latency["on"]))
