"""A backend that stalls (a paused process, a busy box) only delays the shipped `resilient` caller's calls.

What the full retry-storm drill showed on a shared 2-core box: `resilient` breached its SLO
in every trial, in short bursts of 5–10 organic DEADLINE_EXCEEDED, some of them in the
fault-free warm-up, each in a second where the gateway had retried with no fault active.
The cause: its per-attempt timeout for `Call` was p99-derived (TP99 + 50 %, floor 250 ms).
A stall longer than the floor cuts every attempt in flight at once; each cut asks the 10 %
retry budget for a retry in the same second, the budget funds a few, and the rest fail
DEADLINE_EXCEEDED with most of their 2-s deadline unused. A stall only delays the same calls
under a per-attempt timeout that is longer than the stall.
"""

from __future__ import annotations

import asyncio

import grpc
from grpc import aio

from harness.core.settings import FaultSettings
from harness.demo.downstream import demo_caller
from harness.demo.proto import drill_pb2
from harness.demo.serve import start_server
from harness.resilience import config as rconfig

REQ = drill_pb2.CallRequest(payload="p")
#: Calls the caller makes before the stall: enough for a latency window to learn the backend's p99
#: (the p99 rule answers its cap until `minSamples`, 20 in the shipped configurations).
WARM_CALLS = 40
#: Calls in flight during the stall (~0.5 s of the retry-storm drill's organic 40/s + drill 20/s).
STALLED_CALLS = 30
#: The stall: longer than the old 250-ms floor; the shipped per-attempt timeout (1 s) leaves
#: 0.6 s for the test process itself to be late (it is one asyncio loop; two CPU hogs beside it
#: delay it by scheduler slices of milliseconds), and the call's 2-s deadline more still.
STALL_S = 0.4
#: How long the calls may take to reach the stalled server (normally a few ms: same process, loopback), a
#: bound for a clear failure only
HELD_WITHIN_S = 10.0


class _Stall(aio.ServerInterceptor):
    """Holds every call that arrives while it is closed, as a paused process would."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()
        self.held = 0

    async def intercept_service(self, continuation, details):
        if not self.open.is_set():
            self.held += 1
            await self.open.wait()
        return await continuation(details)


async def _stalled_calls(config_name: str) -> tuple[list[str], int]:
    stall = _Stall()
    settings = FaultSettings(enabled=False, service="stalled", seed=1)
    server, port, _ = await start_server(port=0, settings=settings, extra_interceptors=[stall])
    caller = demo_caller([f"127.0.0.1:{port}"], rconfig.load(config_name), service="stall-client")
    try:
        for _ in range(WARM_CALLS):
            await caller.call("Call", REQ)
        stall.open.clear()
        loop = asyncio.get_running_loop()
        closed = loop.time()
        calls = [asyncio.ensure_future(caller.call("Call", REQ)) for _ in range(STALLED_CALLS)]
        # open once every call is held and STALL_S have passed since the stall closed, not after a fixed sleep:
        # a busy loop may take longer than STALL_S to bring all of them in, and a call that arrived after the
        # opening would not have met the stall at all
        arrived_by = closed + HELD_WITHIN_S
        while stall.held < STALLED_CALLS or loop.time() < closed + STALL_S:
            if loop.time() > arrived_by:
                raise AssertionError(f"{stall.held} of {STALLED_CALLS} calls held {HELD_WITHIN_S:g} s after the "
                                     "stall closed")  # fmt: skip
            await asyncio.sleep(0.01)
        stall.open.set()
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
    finally:
        stall.open.set()
        await caller.close()
        await server.stop(None)
    return [_code(o) for o in outcomes], stall.held


def _code(outcome) -> str:
    if isinstance(outcome, grpc.RpcError):
        return outcome.code().name
    return type(outcome).__name__ if isinstance(outcome, BaseException) else "OK"


def test_a_stall_shorter_than_the_deadline_fails_none_of_the_shipped_resilient_callers_calls():
    codes, held = asyncio.run(asyncio.wait_for(_stalled_calls("resilient"), 30))
    assert held >= STALLED_CALLS  # every call met the stall (retries of cut attempts would add more)
    assert codes == ["OK"] * STALLED_CALLS, {c: codes.count(c) for c in set(codes)}
