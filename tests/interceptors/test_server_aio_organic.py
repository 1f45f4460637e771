"""The aio flavour's closure for organic calls, held to the general path it stands in for.

Most calls a server serves are organic; on a grpc.aio server they are served by one
closure (`FaultServerInterceptor._organic_server`) that writes out what
`ServerCore.start_organic` and `record_organic` record, instead of the plan path
(`begin`/`end`), for speed. These tests drive the same calls both ways and compare
what each records and what the handler sees, and check the closure leaves the
served task to reference counting (its scope's entry names the task).
"""

from __future__ import annotations

import asyncio
import gc
import weakref

import grpc
import pytest
from grpc import aio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harness.core import metrics as m
from harness.core import scope
from harness.core.settings import FaultSettings
from harness.core.tracing import HarnessTracer
from harness.interceptors import FaultServerInterceptor
from harness.interceptors._server_pipeline import ServerInterceptorBase


class _Context:
    """The parts of grpc.aio's servicer context the pipeline touches."""

    def __init__(self, remaining: float | None, code=None) -> None:
        self._remaining, self._code = remaining, code

    def time_remaining(self):
        return self._remaining

    def code(self):
        return self._code

    def trailing_metadata(self):
        return ()

    def set_trailing_metadata(self, md) -> None:
        pass


class _Details:
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = (("x-request-id", "req-1"), ("user-agent", "probe"))


#: (case, time remaining at entry, what the handler does, status the call ends with)
CASES = (
    ("ok", 2.0, "return", "OK"),
    ("no-deadline", None, "return", "OK"),
    ("status-set", 2.0, "set-code", "NOT_FOUND"),
    ("raises", 2.0, "raise", "UNKNOWN"),
    ("cancelled", 2.0, "cancel", "CANCELLED"),
    ("deadline-passed", 0.001, "sleep", "OK"),  # ends after its deadline: a gap
)


def _series(service: str, method: str) -> dict[tuple, float]:
    """Every count the call changed, keyed without the service and method (they differ between the paths)."""
    out: dict[tuple, float] = {}
    samples = {}  # the five metrics read once each (a reader's collect flushes their batches), not the registry
    for metric in (m.SERVER_CALLS, m.SERVER_LATENCY, m.GRPC_SERVER_CALL_STARTED, m.GRPC_SERVER_CALL_DURATION,
                   m.DEADLINE_GAP):  # fmt: skip
        for family in metric.collect():
            for sample in family.samples:
                samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def get(name: str, labels: dict[str, str]) -> float | None:
        return samples.get((name, frozenset(labels.items())))

    for status in ("OK", "NOT_FOUND", "UNKNOWN", "CANCELLED"):
        labels = {"service": service, "grpc_method": method, "grpc_status": status}
        out[("calls", status)] = get("drill_server_calls_total", {**labels, "traffic": "organic", "fault_mode": "none"})
        out[("duration", status)] = get(
            "grpc_server_call_duration_seconds_count", {"grpc_method": method, "grpc_status": status}
        )
    out[("latency",)] = get(
        "drill_server_latency_seconds_count",
        {"service": service, "grpc_method": method, "fault_mode": "none", "traffic": "organic"},
    )
    out[("gap",)] = get(
        "drill_deadline_gap_seconds_count", {"service": service, "grpc_method": method, "fault_mode": "none"}
    )
    out[("started",)] = get("grpc_server_call_started_total", {"grpc_method": method})
    return out


class _Method:
    """One method's handler, the same object call after call (as grpc's generic handlers give it); each call
    does what `action` says and leaves what its handler saw in `seen`."""

    def __init__(self) -> None:
        self.action, self.seen = "return", {}
        self.handler = grpc.unary_unary_rpc_method_handler(self.behavior)

    async def behavior(self, request, context):
        sc = scope.current()
        self.seen["scope"] = (sc.service, sc.method, sc.request_id, sc.traffic, sc.deadline_monotonic is not None)
        if self.action == "set-code":
            context._code = grpc.StatusCode.NOT_FOUND
        elif self.action == "raise":
            raise ValueError("handler failed")
        elif self.action == "cancel":
            raise asyncio.CancelledError
        elif self.action == "sleep":
            await asyncio.sleep(0.01)
        return request


async def _call(interceptor, method: _Method, path: str, full: str, remaining, action: str) -> dict:
    """One organic call through `path` ("closure" or "general"); what the handler saw, and after."""
    method.action, method.seen = action, {}
    details, context = _Details(full), _Context(remaining)

    async def continuation(_details):
        return method.handler

    if path == "closure":
        wrapped = await interceptor.intercept_service(continuation, details)
    else:  # the plan path: begin/end through begin_organic/end_organic
        known = interceptor.core.method(full)
        wrapped = ServerInterceptorBase._organic_unary(
            interceptor, method.handler, known, "req-1", details.invocation_metadata
        )

    async def served():  # in a task of its own, as grpc.aio serves a call
        try:
            await wrapped.unary_unary(b"x", context)
        except (ValueError, asyncio.CancelledError):
            pass
        return scope.current()  # in the serving task, once the call has ended

    method.seen["after"] = await asyncio.create_task(served())
    return method.seen


@pytest.mark.parametrize("case,remaining,action,status", CASES, ids=[c[0] for c in CASES])
def test_the_closure_records_and_shows_what_the_general_path_does(case, remaining, action, status):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    got = {}
    for path in ("closure", "general"):
        service, full = f"organic-{case}-{path}", f"/eq.{path.title()}{case.replace('-', '')}/Call"
        interceptor = FaultServerInterceptor(
            FaultSettings(enabled=True, seed=1, service=service), tracer=HarnessTracer(provider.get_tracer("t"))
        )
        exporter.clear()

        async def run(interceptor=interceptor, path=path, full=full, service=service):
            method = _Method()
            if path == "closure":  # the first call of a method takes `_wrapped`; later ones the cached entry
                await _call(interceptor, method, path, full, 2.0, "return")
                exporter.clear()
                before = _series(service, full.lstrip("/"))
                interceptor._wrapped = lambda *args: pytest.fail("an organic call of a known method took _wrapped")
                seen = await _call(interceptor, method, path, full, remaining, action)
            else:
                before = {k: None for k in _series(service, full.lstrip("/"))}
                seen = await _call(interceptor, method, path, full, remaining, action)
            return before, seen

        before, seen = asyncio.run(run())
        after = _series(service, full.lstrip("/"))
        changed = {k: (after[k] or 0) - (before[k] or 0) for k in after if (after[k] or 0) != (before[k] or 0)}
        spans = [
            (dict(s.attributes), s.kind.name, s.status.status_code.name) for s in exporter.get_finished_spans()
        ]
        got[path] = (changed, seen["scope"][2:], seen["after"], spans)
    assert got["closure"] == got["general"]
    changed, (request_id, traffic, has_deadline), after, spans = got["closure"]
    assert changed[("calls", status)] == 1 and changed[("started",)] == 1 and changed[("latency",)] == 1
    assert (("gap",) in changed) == (case == "deadline-passed")
    assert (request_id, traffic, has_deadline, after) == ("req-1", "organic", remaining is not None, None)
    assert [attrs["rpc.grpc.status_code"] for attrs, _, _ in spans] == [status]


def test_an_organic_call_leaves_its_task_to_reference_counting():
    """The scope's entry names the task that serves the call, and the task's context holds the entry: unless
    the entry is taken out when the call ends, every served task (its coroutine, its call) waits for the cyclic
    collector. With the collector off, each task must be gone as soon as its call has ended."""
    tasks: list[weakref.ref] = []

    async def behavior(request, context):
        tasks.append(weakref.ref(asyncio.current_task()))
        return request

    async def main() -> int:
        server = aio.server(interceptors=[FaultServerInterceptor(FaultSettings(enabled=True, seed=1, service="refs"))])
        handler = grpc.unary_unary_rpc_method_handler(behavior)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("refs.S", {"Call": handler}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.unary_unary("/refs.S/Call")
                await call(b"x")  # the first call of the method takes `_wrapped`
                gc.collect()
                gc.disable()
                try:
                    for _ in range(5):
                        await call(b"x")
                    for _ in range(100):  # the server's task ends just after the reply is sent
                        if all(ref() is None for ref in tasks[1:]):
                            break
                        await asyncio.sleep(0.01)
                    return sum(ref() is not None for ref in tasks[1:])
                finally:
                    gc.enable()
        finally:
            await server.stop(None)

    assert asyncio.run(main()) == 0
    assert len(tasks) == 6
