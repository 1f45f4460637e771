"""What the fleet's non-Python hops do besides carrying baggage: the Go hop's leaf capacity, its retries from a
grpc-go service config (gRFC A6 retryPolicy and retryThrottling), deadlines and status relayed by both hops.
Real processes on 127.0.0.1; the upstream is a plain grpc server that counts what reached it."""

from __future__ import annotations

import json
import threading
import time
from concurrent import futures

import grpc
import pytest

from harness.core import headers as h
from tests.fleet import hops

M = "/drill.v1.Demo/Call"


class Upstream(grpc.GenericRpcHandler):
    """Every unary method: fails with `code` (and the injected-fault trailer) or sleeps `sleep_s` then answers;
    records each attempt's metadata and the time the caller had left."""

    def __init__(self, code: grpc.StatusCode | None = None, sleep_s: float = 0.0) -> None:
        self.code, self.sleep_s = code, sleep_s
        self.attempts: list[dict[str, str]] = []
        self.remaining: list[float | None] = []
        self.lock = threading.Lock()

    def service(self, details):
        def handle(request, context):
            with self.lock:
                self.attempts.append(dict(context.invocation_metadata()))
                self.remaining.append(context.time_remaining())
            if self.code is not None:
                context.set_trailing_metadata(((h.FAULT_MARKER, "abort"),))
                context.abort(self.code, "from upstream")
            time.sleep(self.sleep_s)
            context.set_trailing_metadata(((h.FAULT_MARKER, "delay"),))  # as an injected delay answers
            return b"answer"

        return grpc.unary_unary_rpc_method_handler(handle)


class serving:
    def __init__(self, handler: Upstream) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), handlers=[handler])
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def __enter__(self) -> int:
        self.server.start()
        return self.port

    def __exit__(self, *exc) -> None:
        self.server.stop(0)


def call(port: int, timeout: float = 5.0, metadata=()):
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        return ch.unary_unary(M)(b"req", timeout=timeout, metadata=metadata)


def code_of(port: int, **kw) -> grpc.StatusCode:
    try:
        call(port, **kw)
        return grpc.StatusCode.OK
    except grpc.RpcError as err:
        return err.code()


def test_the_go_leaf_works_at_most_concurrency_queues_at_most_queue_and_refuses_the_rest(built, tmp_path):
    # 2 at once + 1 waiting = 3 admitted of 6 sent together; each takes 400 ms, so the 6 arrive while the first
    # 2 work (sent within a few ms of each other on 127.0.0.1, 400 ms is two orders of magnitude above that)
    with hops.gohop(tmp_path, "leaf", "-work-ms", "400", "-concurrency", "2", "-queue", "1") as port:
        with futures.ThreadPoolExecutor(6) as pool:
            codes = list(pool.map(lambda _: code_of(port), range(6)))
    assert sorted(c.name for c in codes) == ["OK"] * 3 + ["RESOURCE_EXHAUSTED"] * 3
    lines = hops.log_lines(tmp_path, "leaf")
    assert sorted(line["code"] for line in lines) == ["OK"] * 3 + ["RESOURCE_EXHAUSTED"] * 3
    # the queued one waited for a slot: it arrived at most `spread` after the first call started, the slot freed
    # 400 ms after that start, so it waited at least 400 - spread and took at least 800 - spread (its time runs from
    # its arrival). The six calls leave a thread pool together: spread is milliseconds on a quiet box and tens of
    # them beside CPU hogs (795.7 ms was seen in a full suite), never half a work time: above 600 ms, and a leaf
    # that did not queue (a third slot) would answer it in 400
    assert max(line["ms"] for line in lines if line["code"] == "OK") > 600


def _config(tmp_path, throttled: bool) -> str:
    policy = {"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.05s", "backoffMultiplier": 2,
              "retryableStatusCodes": ["UNAVAILABLE"]}  # fmt: skip
    config = {"methodConfig": [{"name": [{"service": "drill.v1.Demo"}], "retryPolicy": policy}]}
    if throttled:
        config["retryThrottling"] = {"maxTokens": 10, "tokenRatio": 0.1}
    path = tmp_path / f"config-{throttled}.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize(
    "throttled,attempts",
    [
        (False, [4, 4, 4]),  # retryPolicy alone: every call takes its 4 attempts
        # gRFC A6: 10 tokens, each failed attempt takes one, retries stop once tokens <= 5: call 1 fails 4 times
        # (10 -> 6), call 2's first failure leaves 5 (no retry), call 3 likewise
        (True, [4, 1, 1]),
    ],
)
def test_the_go_hop_retries_as_its_service_config_says(built, tmp_path, throttled, attempts):
    upstream = Upstream(grpc.StatusCode.UNAVAILABLE)
    with serving(upstream) as up, hops.gohop(tmp_path, "edge", "-upstream", f"127.0.0.1:{up}", "-service-config",
                                             _config(tmp_path, throttled)) as port:  # fmt: skip
        seen = []
        for _ in attempts:
            before = len(upstream.attempts)
            assert code_of(port) is grpc.StatusCode.UNAVAILABLE
            seen.append(len(upstream.attempts) - before)
    assert seen == attempts
    retries = [a.get(h.PREVIOUS_RPC_ATTEMPTS) for a in upstream.attempts[: attempts[0]]]
    assert retries == [None, "1", "2", "3"][: attempts[0]]  # gRFC A6's header on each retry


@pytest.mark.parametrize("kind", ["gohop", "nodehop"])
def test_both_hops_keep_the_callers_deadline_and_relay_code_details_and_trailers_of_errors_and_answers(
    built, tmp_path, kind
):
    middle, flag = (hops.gohop, "-upstream") if kind == "gohop" else (hops.nodehop, "--upstream")
    slow = Upstream(sleep_s=3.0)
    with serving(slow) as up, middle(tmp_path, kind, flag, f"127.0.0.1:{up}") as port:
        start = time.monotonic()
        assert code_of(port, timeout=0.5) is grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - start < 2.5  # not the upstream's 3 s
    (left,) = slow.remaining
    # the upstream got the caller's deadline, less the time spent, within gRPC core's rounding: it reads a
    # grpc-timeout in whole milliseconds rounded up (the Go hop sends microseconds: "499870u" reads as 500 ms) on a
    # millisecond clock, so up to 2 ms above (a CI run read 0.5001 against a bound of 0.5)
    assert left is not None and left <= 0.5 + 0.002
    failing = Upstream(grpc.StatusCode.UNAVAILABLE)
    with serving(failing) as up, middle(tmp_path, f"{kind}-2", flag, f"127.0.0.1:{up}") as port:
        with pytest.raises(grpc.RpcError) as info:
            call(port)
    err = info.value
    assert (err.code(), err.details()) == (grpc.StatusCode.UNAVAILABLE, "from upstream")
    assert h.has_fault_marker(err.trailing_metadata())
    with serving(Upstream()) as up, middle(tmp_path, f"{kind}-3", flag, f"127.0.0.1:{up}") as port:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            answer, outcome = ch.unary_unary(M).with_call(b"req", timeout=5)
    # an OK call's trailers (an injected delay's marker): the Go hop relays them; the Node hop passes them to
    # grpc-js, but @opentelemetry/instrumentation-grpc 0.208's unary wrapper calls back with (err, value) only
    assert answer == b"answer" and h.has_fault_marker(outcome.trailing_metadata()) == (kind == "gohop")
