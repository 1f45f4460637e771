"""Run by test_native_wait.py in a Locust-like (gevent-patched) process.

    python tests/loadtests/_native_wait_probe.py HOST:PORT

Starts one drill call with `delay:300` through `Completions.start` (a natively polled
channel: the call's condition is a native lock) and waits for it with a blocking
`future.result()`, while another greenlet ticks every 10 ms. Prints one JSON object:
the call's status, whether the channel was polled natively, whether the call's
condition sits on a native lock, and how many ticks ran during the wait.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import locust  # noqa: E402,F401,I001  (first: patches like a Locust process, gevent everywhere)
import grpc.experimental.gevent as grpc_gevent  # noqa: E402

grpc_gevent.init_gevent()

import gevent  # noqa: E402

from harness.demo.proto import drill_pb2, drill_pb2_grpc  # noqa: E402
from harness.interceptors import CallTags, Tagging  # noqa: E402
from loadtests.grpc_gevent import Completions, _native_rlock  # noqa: E402


def main() -> None:
    done = Completions("native")
    stub = drill_pb2_grpc.DemoStub(done.channel(sys.argv[1], "drill"))
    tags = CallTags(Tagging(tenant="tenant-drill", directive="delay:300"), "drill.v1.Demo/Call", frozenset())
    future = done.start(stub.Call, drill_pb2.CallRequest(), 5.0, tags.metadata("probe-1", 5.0))
    # grpc's per-call state (`_RPCState`) keeps its condition; the lock under it is what `start` chose
    lock = getattr(getattr(getattr(future, "_state", None), "condition", None), "_lock", None)
    native_lock = type(lock) is type(_native_rlock())
    ticks: list[float] = []

    def tick() -> None:
        for _ in range(500):  # bounded: 5 s at most
            ticks.append(time.monotonic())
            gevent.sleep(0.01)

    ticker = gevent.spawn(tick)
    gevent.sleep(0)  # let the ticker start
    before = len(ticks)
    future.result()  # blocks this greenlet until the call ends (a 300-ms delay)
    during = len(ticks) - before
    ticker.kill()
    print(json.dumps({
        "code": future.code().name, "native": done.native, "native_lock": native_lock, "ticks_during_wait": during,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
