"""One closed-loop unary client per process, driven over stdin: the hand-off designs side by side.

    python benchmarks/_client_variants.py HOST:PORT VARIANT USERS

Reads `go SECONDS` lines; for each, USERS concurrent callers call `Demo/Call` for
SECONDS and the process prints `CALLS CPU_SECONDS` (its own CPU, all threads). The
parent keeps one process per variant and alternates them in rounds, so the
machine's noise falls on every variant alike. Variants:

* `threadpool`: Locust's recipe (`grpc.experimental.gevent`): blocking calls, one
  channel per user, each call parked on a gevent hub threadpool thread;
* `greenlet`: grpc's future API into a gevent waiter, the channel polled by grpc's
  own spin greenlet through the threadpool (`loadtests.grpc_gevent`, `greenlet` mode);
* `native`: the same, the channel polled by one native thread (`native` mode, the
  Locust user's default);
* `threads`: plain OS threads and blocking calls, no gevent (grpc's sync floor);
* `aio`: `grpc.aio` on asyncio, no gevent (grpc's cheapest Python client).
"""

from __future__ import annotations

import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

VARIANTS = ("threadpool", "greenlet", "native", "threads", "aio")


def _commands(stream=None):
    """The SECONDS of each `go SECONDS` line on stdin (or `stream`)."""
    for line in stream if stream is not None else sys.stdin:
        parts = line.split()
        if len(parts) == 2 and parts[0] == "go":
            yield float(parts[1])


def _reply(calls: int, cpu0: float) -> None:
    print(calls, time.process_time() - cpu0, flush=True)


def run_gevent(target: str, variant: str, users: int) -> None:
    from gevent import monkey

    monkey.patch_all()
    import grpc.experimental.gevent as grpc_gevent

    grpc_gevent.init_gevent()
    import gevent
    import grpc
    from gevent.fileobject import FileObject

    from harness.demo.proto import drill_pb2, drill_pb2_grpc
    from loadtests.grpc_gevent import Completions

    req = drill_pb2.CallRequest()
    if variant == "threadpool":
        gevent.get_hub().threadpool.maxsize = users + 8
        calls = [drill_pb2_grpc.DemoStub(grpc.insecure_channel(target)).Call for _ in range(users)]

        def one(call) -> None:
            call.with_call(req, timeout=2)

    else:
        done = Completions(variant)
        stub = drill_pb2_grpc.DemoStub(done.channel(target, "organic"))
        calls = [stub.Call] * users

        def one(call) -> None:
            future = call.future(req, timeout=2)
            done.wait(future)
            future.result()

    for call in calls:
        one(call)
    count = [0]

    def user(call, end: float) -> None:
        while time.monotonic() < end:
            one(call)
            count[0] += 1

    for seconds in _commands(FileObject(sys.stdin, "r")):
        count[0] = 0
        cpu0 = time.process_time()
        end = time.monotonic() + seconds
        gevent.joinall([gevent.spawn(user, call, end) for call in calls])
        _reply(count[0], cpu0)


def run_threads(target: str, users: int) -> None:
    import threading

    import grpc

    from harness.demo.proto import drill_pb2, drill_pb2_grpc

    req = drill_pb2.CallRequest()
    calls = [drill_pb2_grpc.DemoStub(grpc.insecure_channel(target)).Call for _ in range(users)]
    for call in calls:
        call(req, timeout=2)
    def user(i: int, end: float, counts: list[int]) -> None:
        while time.monotonic() < end:
            calls[i](req, timeout=2)
            counts[i] += 1

    for seconds in _commands():
        counts = [0] * users
        end = time.monotonic() + seconds
        cpu0 = time.process_time()
        threads = [threading.Thread(target=user, args=(i, end, counts)) for i in range(users)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        _reply(sum(counts), cpu0)


def run_aio(target: str, users: int) -> None:
    import asyncio

    from grpc import aio

    from harness.demo.proto import drill_pb2, drill_pb2_grpc

    async def main() -> None:
        async with aio.insecure_channel(target) as channel:
            stub = drill_pb2_grpc.DemoStub(channel)
            req = drill_pb2.CallRequest()
            await stub.Call(req, timeout=2)
            loop = asyncio.get_running_loop()
            while True:
                line = await loop.run_in_executor(None, sys.stdin.readline)
                if not line:
                    return
                end = time.monotonic() + float(line.split()[1])
                counts = [0] * users

                async def user(i: int, end: float = end, counts: list[int] = counts) -> None:
                    while time.monotonic() < end:
                        await stub.Call(req, timeout=2)
                        counts[i] += 1

                cpu0 = time.process_time()
                await asyncio.gather(*(user(i) for i in range(users)))
                _reply(sum(counts), cpu0)

    asyncio.run(main())


def main() -> None:
    target, variant, users = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if variant not in VARIANTS:
        raise SystemExit(f"unknown variant {variant!r}: {', '.join(VARIANTS)}")
    if variant == "threads":
        run_threads(target, users)
    elif variant == "aio":
        run_aio(target, users)
    else:
        run_gevent(target, variant, users)


if __name__ == "__main__":
    main()
