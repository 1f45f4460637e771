"""Every queue or map a call touches has a bound, and what it drops is counted.

Each test fills one bound and checks the drop counter against what was sent (behaviour,
not timing): the audit writer's queue under a disk that does not return, the refusal
rate limiter, the demo's admission queue for callers whose deadline passed while they
waited.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import types

import grpc
import pytest
from prometheus_client import REGISTRY

from harness.core import audit


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class _StuckDisk(logging.Handler):
    """A handler that takes the first line and then does not return until released (a slow disk)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        self.entered.set()
        self.release.wait(30)


@pytest.fixture
def stuck_disk():
    handler = _StuckDisk()
    log = logging.getLogger("drill.audit")
    old_level, old_propagate = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    audit.stop_writer()
    try:
        yield handler
    finally:
        handler.release.set()
        audit.stop_writer()
        log.removeHandler(handler)
        log.setLevel(old_level)
        log.propagate = old_propagate


def test_audit_writer_queue_is_bounded_and_counts_every_line_it_drops(stuck_disk):
    queue_lines = 5
    audit.start_writer(max_lines=queue_lines)
    dropped0 = _sample("drill_audit_dropped_total", event="fault_hit", reason="queue_full")
    audit.emit("fault_hit", request_id="r0")
    assert stuck_disk.entered.wait(10), "the writer thread never took the first line"
    sent = 40
    for i in range(1, sent):  # the writer is stuck in the disk: the queue only fills
        audit.emit("fault_hit", request_id=f"r{i}")
    dropped = _sample("drill_audit_dropped_total", event="fault_hit", reason="queue_full") - dropped0
    # one line is in the stuck write, `queue_lines` wait, every other one is dropped and counted
    assert dropped == sent - 1 - queue_lines
    assert _sample("drill_audit_queue_lines") == queue_lines
    stuck_disk.release.set()
    assert audit.flush(10)
    assert [line.split('"request_id":"')[1].split('"')[0] for line in stuck_disk.lines] == [
        f"r{i}" for i in range(queue_lines + 1)
    ]
    assert len(stuck_disk.lines) + dropped == sent  # hits = lines written + dropped
    assert _sample("drill_audit_queue_lines") == 0


def test_without_a_writer_lines_are_written_in_the_calling_thread(stuck_disk):
    stuck_disk.release.set()
    audit.emit("fault_hit", request_id="sync-1")
    assert stuck_disk.lines and '"sync-1"' in stuck_disk.lines[-1]  # no flush needed: written before emit returned


def test_refusals_held_back_by_the_rate_limiter_are_counted():
    limiter = audit.RefusalLimiter(per_interval=2, interval_s=10.0, max_keys=4)
    key = ("token_refused", "bad_signature", "demo.v1.Svc/M")
    before = _sample("drill_audit_dropped_total", event="token_refused", reason="rate_limited")
    admitted = [limiter.admit(key, now=100.0) for _ in range(7)]
    assert admitted[:2] == [0, 0] and admitted[2:] == [None] * 5
    assert _sample("drill_audit_dropped_total", event="token_refused", reason="rate_limited") - before == 5
    assert limiter.admit(key, now=111.0) == 5  # the next line out says how many were held back


def test_refusal_limiter_keys_are_bounded_new_keys_share_one_overflow_window():
    limiter = audit.RefusalLimiter(per_interval=2, interval_s=10.0, max_keys=2)
    for key in ("a", "b"):
        assert limiter.admit(("fault_rejected", "oversize", key), now=0.0) == 0
    # a third and a fourth method: no new state, both count against the shared overflow window
    third = [limiter.admit(("fault_rejected", "oversize", "c"), now=0.0) for _ in range(2)]
    assert third == [0, 0]
    assert limiter.admit(("fault_rejected", "oversize", "d"), now=0.0) is None
    assert limiter.admit(("fault_rejected", "oversize", "a"), now=0.0) == 0  # known keys keep their own


# --- the demo's bounded queue: a caller that left while queued gets no work ---------------------
class _Ctx:
    """The few ServicerContext calls the demo's queue makes, with a deadline the test moves."""

    def __init__(self, remaining: float | None) -> None:
        self.remaining = remaining
        self.aborted: list[grpc.StatusCode] = []

    def time_remaining(self) -> float | None:
        return self.remaining

    def invocation_metadata(self):
        return ()

    async def abort(self, code, details=""):
        self.aborted.append(code)
        raise _Aborted(code)


class _Aborted(Exception):
    pass


def _demo_request():
    from harness.demo.proto import drill_pb2

    return drill_pb2.CallRequest(payload="q")


@pytest.mark.parametrize("where", ["servicer", "admission"])
def test_a_call_whose_deadline_passed_in_the_queue_does_no_work_and_is_counted(where):
    """One slot: the first call holds it; the second waits, its caller's deadline passes; when the slot
    frees, the second is answered DEADLINE_EXCEEDED without its work (no downstream call)."""
    from harness.demo.service import AdmissionInterceptor, Capacity, DemoServicer

    service = f"bounds-{where}"
    worked: list[str] = []

    async def scenario() -> None:
        release = asyncio.Event()

        async def work(request, context):
            worked.append(request.payload)
            await release.wait()
            from harness.demo.proto import drill_pb2

            return drill_pb2.CallReply(payload=request.payload)

        if where == "servicer":
            servicer = DemoServicer(service, "i-0", Capacity(concurrency=1, queue=4), downstream=None)

            async def downstream(method, request, context):
                return await work(request, context)

            servicer.downstream = downstream

            call = servicer.Call
        else:
            admission = AdmissionInterceptor(service, Capacity(concurrency=1, queue=4))

            async def continuation(details):
                return grpc.unary_unary_rpc_method_handler(work)

            details = types.SimpleNamespace(method="/drill.v1.Demo/Call", invocation_metadata=())
            call = (await admission.intercept_service(continuation, details)).unary_unary

        first, second = _Ctx(5.0), _Ctx(5.0)
        r1, r2 = _demo_request(), _demo_request()
        r1.payload, r2.payload = "first", "second"
        t1 = asyncio.ensure_future(call(r1, first))
        await asyncio.sleep(0)
        t2 = asyncio.ensure_future(call(r2, second))
        await asyncio.sleep(0)
        second.remaining = -0.5  # its caller gave up while it waited for the slot
        release.set()
        await t1
        with pytest.raises(_Aborted):
            await t2
        assert second.aborted == [grpc.StatusCode.DEADLINE_EXCEEDED]

    method = "drill.v1.Demo/Call"
    before = _sample("drill_server_expired_total", service=service, grpc_method=method, where="queue")
    asyncio.run(scenario())
    assert worked == ["first"]
    assert _sample("drill_server_expired_total", service=service, grpc_method=method, where="queue") - before == 1
    if where == "admission":  # it never reaches the fault interceptor: counted here as a served call
        assert _sample("drill_server_calls_total", service=service, grpc_method=method,
                       grpc_status="DEADLINE_EXCEEDED", traffic="organic", fault_mode="none") == 1  # fmt: skip
