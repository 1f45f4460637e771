"""Minimal reproduction: grpc.aio keeps native memory of every call whose batch is cut short.

    .venv/bin/python benchmarks/soak_grpc_cancel_leak.py [--calls 3000]

Plain grpcio, no interceptors, no harness code. One process, a grpc.aio server and client on
127.0.0.1; for each pattern, N unary calls, then a full garbage collection, then glibc's
allocated bytes (`mallinfo2().uordblks`) compared with before: what is still allocated per call
once nothing of the calls is alive.

Each pattern makes N calls twice: memory a leak keeps grows by the same amount per call in both
halves; a high-water mark (caches, free lists sized by the peak) is paid in the first only.

* `ok`: the handler answers at once (the control);
* `deadline`: the client's grpc deadline (timeout) passes while the handler sleeps; grpc
  cancels the handler;
* `client-task-cancelled`: the client's asyncio task awaiting the call is cancelled while the
  call is in flight (`asyncio.wait_for`, as when a server handler that called downstream is
  itself cancelled because its own caller left);
* `handler-returns-after-cancel`: the handler catches the cancellation and returns a reply,
  so the server sends a status on a call its client already left.

This is grpc/grpc#43360 ("aio leaks a batch's grpc_op array when the batch fails or its awaiter
is cancelled"; fixes proposed in grpc/grpc#43361 and #43409): the array of 80-byte `grpc_op`s a
batch was started with is freed only when the awaiting coroutine reads the batch's event. The
soak found it as native memory that stayed allocated after an overload, in proportion to the
calls that expired at the gateway (`docs/benchmarks.md`, "What belongs to a dependency").
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import sys

import grpc
from grpc import aio


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]  # fmt: skip


_libc = ctypes.CDLL("libc.so.6")
_libc.mallinfo2.restype = _Mallinfo2


def allocated() -> int:
    """Bytes glibc has handed out and not had back (all arenas)."""
    return _libc.mallinfo2().uordblks


async def answer(request, context):
    return b"ok"


async def slow(request, context):
    await asyncio.sleep(0.2)
    return b"late"


async def stubborn(request, context):
    try:
        await asyncio.sleep(0.2)
    except asyncio.CancelledError:
        return b"anyway"  # a status on a call the client has left
    return b"late"


async def _call(call, pattern: str) -> None:
    try:
        if pattern == "ok":
            await call(b"x", timeout=5)
        elif pattern == "client-task-cancelled":
            await asyncio.wait_for(call(b"x", timeout=5), 0.02)
        else:
            await call(b"x", timeout=0.02)
    except (aio.AioRpcError, asyncio.TimeoutError):
        pass


async def _settled() -> int:
    """glibc's allocated bytes once every handler has ended and every cut batch completed in core:
    after a full collection, sampled every 0.5 s until it stops falling (at most 5 s)."""
    last = None
    for _ in range(10):
        await asyncio.sleep(0.5)
        gc.collect()
        now = allocated()
        if last is not None and now >= last:
            return now
        last = now
    return last


async def measure(ch, pattern: str, method: str, calls: int, concurrency: int = 50) -> tuple[float, float]:
    """Bytes still allocated per call after the first `calls` calls, and after `calls` more: a leak
    costs the same per call in both halves; a high-water mark is paid in the first only."""
    call = ch.unary_unary(f"/t.S/{method}")
    for _ in range(200):  # warm: arenas, caches, free lists at their working size
        await _call(call, pattern)
    marks = [await _settled()]
    for _half in range(2):
        for start in range(0, calls, concurrency):
            await asyncio.gather(*(_call(call, pattern) for _ in range(min(concurrency, calls - start))))
        marks.append(await _settled())
    return (marks[1] - marks[0]) / calls, (marks[2] - marks[1]) / calls


async def main(calls: int) -> None:
    handlers = {name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in
                (("Answer", answer), ("Slow", slow), ("Stubborn", stubborn))}  # fmt: skip
    server = aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.S", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    patterns = (("ok", "Answer"), ("deadline", "Slow"), ("client-task-cancelled", "Slow"),
                ("handler-returns-after-cancel", "Stubborn"))  # fmt: skip
    async with aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        for pattern, method in patterns:
            first, second = await measure(ch, pattern, method, calls)
            print(
                f"{pattern:30s} glibc allocated after a full collection, per call: {first:+8.1f} bytes over the "
                f"first {calls} calls, {second:+8.1f} over the next {calls}"
            )
    await server.stop(0)
    print(f"grpcio {grpc.__version__}, Python {sys.version.split()[0]}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=3000, help="calls per pattern (default 3000)")
    asyncio.run(main(p.parse_args().calls))
