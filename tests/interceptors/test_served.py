"""`@served` on real servers of every flavour (tests/interceptors/kinds.py): the service does its work and answers,
then the caller gets the fault instead of the answer.

The service's own record proves the work: each handler notes `start` and `end` (and each message it read), so a
served call appears in it to its end, and a plain `abort` does not appear at all. Timing is a lower bound on the
monotonic clock the test shares with its servers (one process): a drop of D acts after the handler noted its `end`
(it returns, then the wait begins), and the caller sees the status after the server sends it, so the caller's end
is at least D after the handler's.
"""

from __future__ import annotations

import asyncio
import json
import threading

import grpc
import pytest

from harness.core.faults import Kind, is_hit
from harness.core.safety import EmergencyStop
from tests.conftest import drill_process, sample, sample_sum
from tests.interceptors import kinds as K
from tests.interceptors.test_stream_faults import wait_for

FLAVOURS = ("aio", "aio-rw", "aio-sync", "sync")
D = 0.3
N = 4


@pytest.fixture(scope="module")
def servers():
    """One server per flavour for the whole module; yields {flavour: (port, log, service)}."""
    with K.servers("served", FLAVOURS) as out:
        yield out


def _call(servers, flavour, kind, directive, rid, **kw):
    port, log, service = servers[flavour]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        return K.call(ch, kind, K.drill_md(directive, rid), **kw), log, service


def _answered(kind: Kind) -> int:
    """How many messages the caller gets before the fault: a response stream's all, a single response none."""
    return N if kind.response_streaming else 0


@pytest.mark.parametrize("kind", K.KINDS, ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_abort_at_served_lets_the_service_do_its_work_and_a_plain_abort_does_not(servers, flavour, kind):
    tag = f"{flavour}-{kind.value}"
    m = K.method(kind)
    _, _, service = servers[flavour]
    faulted = dict(service=service, grpc_method=m, grpc_status="UNAVAILABLE", traffic="drill", fault_mode="abort")
    before = sample("drill_server_calls_total", **faulted)

    plain, log, _ = _call(servers, flavour, kind, "abort:UNAVAILABLE", f"plain-{tag}", n=N)
    served, _, _ = _call(servers, flavour, kind, "abort:UNAVAILABLE@served", f"served-{tag}", n=N)

    assert (plain.code, plain.marker, plain.count) == ("UNAVAILABLE", "abort", 0)
    assert log.times(f"plain-{tag}", "start") == []  # rejected at once: the service never saw it
    assert (served.code, served.details, served.marker) == ("UNAVAILABLE", "injected fault: UNAVAILABLE", "abort")
    assert served.count == _answered(kind)  # a stream's messages went out; a single response never does
    assert len(log.times(f"served-{tag}", "end")) == 1  # the service did all its work
    if kind.request_streaming:
        assert len(log.times(f"served-{tag}", "read")) == N
    assert wait_for(lambda: sample("drill_server_calls_total", **faulted) == before + 2)


@pytest.mark.parametrize("kind", K.KINDS, ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_drop_at_served_goes_silent_after_the_answer_then_closes_unavailable(servers, flavour, kind):
    rid = f"drop-{flavour}-{kind.value}"
    seen, log, _ = _call(servers, flavour, kind, f"drop:{int(D * 1000)}@served", rid, n=N)
    assert (seen.code, seen.details, seen.marker, seen.count) == ("UNAVAILABLE", "injected drop", "drop",
                                                                  _answered(kind))  # fmt: skip
    (end,) = log.times(rid, "end")
    assert seen.end - end >= D  # see the module docstring


@pytest.mark.parametrize("flavour", ["aio", "aio-sync", "sync"])
def test_a_drop_at_served_longer_than_the_callers_deadline_is_the_deadline_after_the_work(servers, flavour):
    rid = f"dropdl-{flavour}"
    seen, log, _ = _call(servers, flavour, Kind.UNARY, "drop:5000@served", rid, timeout=0.5)
    assert (seen.code, seen.marker) == ("DEADLINE_EXCEEDED", None)  # the caller left: it saw no trailers
    assert len(log.times(rid, "end")) == 1


@pytest.mark.parametrize("kind", [Kind.UNARY, Kind.SERVER_STREAMING], ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_delay_at_served_holds_the_answer_after_the_work(servers, flavour, kind):
    """A single response is late (what `delay` does); a response stream's status is late, after its last message."""
    rid = f"delay-{flavour}-{kind.value}"
    seen, log, _ = _call(servers, flavour, kind, f"delay:{int(D * 1000)}@served", rid, n=N)
    assert (seen.code, seen.marker, seen.count) == ("OK", "delay", N if kind.response_streaming else 1)
    (end,) = log.times(rid, "end")
    assert seen.end - end >= D  # the wait began once the handler was done: the messages were sent, not held


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_served_hits_are_the_ids_drill_hits_predicts_and_each_is_audited_with_its_point(servers, flavour, caplog):
    caplog.set_level("INFO", logger="drill.audit")
    raw = "abort:UNAVAILABLE@served"
    ids = [f"h{flavour}-{i * 2654435761 % 1000003}" for i in range(24)]  # spread: neighbours hash to neighbours
    port, log, _ = servers[flavour]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        seen = {rid: K.call(ch, Kind.UNARY, K.drill_md(raw, rid, x_fault_ratio="50")) for rid in ids}
    faulted = {rid for rid, s in seen.items() if (s.code, s.marker) == ("UNAVAILABLE", "abort")}
    assert {rid for rid, s in seen.items() if s.code == "OK" and s.marker is None} == set(ids) - faulted
    assert all(len(log.times(rid, "end")) == 1 for rid in ids)  # every call did its work, hit or not
    audited = {}
    for r in caplog.records:
        line = json.loads(r.getMessage()) if '"event":"fault_hit"' in r.getMessage() else {}
        if line.get("request_id") in seen:
            audited[line["request_id"]] = line
    assert set(audited) == faulted
    assert {(a["mode"], a["argument"], a["options"]) for a in audited.values()} == {("abort", "UNAVAILABLE", "served")}
    hits = drill_process("hits", "--seed", str(K.SEED), "--directive", raw, "--ratio", "50", stdin="\n".join(ids))
    assert hits.returncode == 0, hits.stderr
    predicted = {line.split("\t")[0] for line in hits.stdout.splitlines() if line.endswith("\thit")}
    assert predicted == faulted == {rid for rid in ids if is_hit(K.SEED, rid, raw, 50)}
    assert 0 < len(faulted) < len(ids)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_served_with_a_point_in_the_stream_is_refused_and_the_call_passes(servers, flavour):
    """`@served` is the end of the answer; `@after`/`@read` are points inside it: one fault acts at one point."""
    _, _, service = servers[flavour]
    m = K.method(Kind.BIDI_STREAMING)
    labels = dict(service=service, grpc_method=m, reason="conflicting_options")
    before = sample("drill_fault_rejected_total", **labels)
    rid = f"conflict-{flavour}"
    seen, log, _ = _call(servers, flavour, Kind.BIDI_STREAMING, "abort:UNAVAILABLE@served@after=2", rid, n=N)
    assert (seen.code, seen.marker, seen.count) == ("OK", None, N)
    assert len(log.times(rid, "end")) == 1
    assert sample("drill_fault_rejected_total", **labels) == before + 1


# --- a handler that fails, that trips the stop, that holds: servers of the test's own ----------------------------
class _Own:
    """A unary method `own.v1.Own/Do` that sends its response headers first (`x-own-head`), then does what the test
    picks per call by its request: `fail` (the service
    answers FAILED_PRECONDITION, with a trailer), `raise` (it raises), `trip` (it trips the stop meanwhile), `hold`
    (it waits for `release`, at most 10 s), `gone` (it answers once the call has ended, at most 10 s); anything else:
    it answers the request."""

    def __init__(self, stop: EmergencyStop) -> None:
        self.stop = stop
        self.release = threading.Event()
        self.holding = threading.Event()
        self.done: list[bytes] = []

    def sync(self, request, context):
        context.send_initial_metadata((("x-own-head", request.decode()),))  # every answer has headers of its own
        if request == b"hold":
            self.holding.set()
            self.release.wait(10)
        if request == b"gone":  # answers once its caller has left
            ended = threading.Event()
            context.add_callback(ended.set)
            ended.wait(10)
        self.done.append(request)
        if request == b"trip":
            self.stop.trip("test")
        if request == b"fail":
            context.set_trailing_metadata((("x-own", "failed"),))
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "own failure")
        if request == b"raise":
            raise RuntimeError("own")
        return b"ok:" + request

    async def aio(self, request, context):
        await context.send_initial_metadata((("x-own-head", request.decode()),))
        if request == b"hold":
            self.holding.set()
            await asyncio.to_thread(self.release.wait, 10)
        if request == b"gone":
            ended = asyncio.Event()
            context.add_done_callback(lambda _: ended.set())
            await asyncio.wait_for(ended.wait(), 10)
        self.done.append(request)
        if request == b"trip":
            self.stop.trip("test")
        if request == b"fail":
            context.set_trailing_metadata((("x-own", "failed"),))
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "own failure")
        if request == b"raise":
            raise RuntimeError("own")
        return b"ok:" + request

    def feed_sync(self, request, context):
        """Server-streaming `Feed`: two messages, then the service fails on its own."""
        yield b"one"
        yield b"two"
        self.done.append(b"feed")
        context.set_trailing_metadata((("x-own", "fed"),))
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "own failure")

    async def feed_aio(self, request, context):
        yield b"one"
        yield b"two"
        self.done.append(b"feed")
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "own failure", (("x-own", "fed"),))

    async def passing_aio(self, request, context):
        """`Pass`: the service fails passing its trailers to abort itself (grpc.aio's third argument)."""
        self.done.append(b"pass")
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "own failure", (("x-own", "passed"),))

    def handler(self, flavour: str) -> grpc.GenericRpcHandler:
        on_loop = flavour == "aio"
        methods = {
            "Do": grpc.unary_unary_rpc_method_handler(self.aio if on_loop else self.sync),
            "Feed": grpc.unary_stream_rpc_method_handler(self.feed_aio if on_loop else self.feed_sync),
        }
        if on_loop:
            methods["Pass"] = grpc.unary_unary_rpc_method_handler(self.passing_aio)
        return grpc.method_handlers_generic_handler("own.v1.Own", methods)


def _do(port: int, request: bytes, directive: str, rid: str, timeout: float = 10, options=()) -> tuple:
    """(status, details or the answer, trailers, headers) of one call."""
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as ch:
        try:
            reply, call = ch.unary_unary("/own.v1.Own/Do").with_call(request, metadata=K.drill_md(directive, rid),
                                                                     timeout=timeout)  # fmt: skip
            return "OK", reply.decode(), dict(call.trailing_metadata() or ()), dict(call.initial_metadata() or ())
        except grpc.RpcError as err:
            return (err.code().name, err.details(), dict(err.trailing_metadata() or ()),
                    dict(err.initial_metadata() or ()))  # fmt: skip


@pytest.mark.parametrize("flavour", ["aio", "aio-sync", "sync"])
def test_the_services_own_failure_is_an_answer_the_fault_replaces(flavour):
    """A service that failed on its own (an abort of its own, an exception) did its work too: the caller gets the
    injected status, with the marker, and the trailers the service set."""
    own = _Own(EmergencyStop())
    with K.server(flavour, K.settings(f"own-fail-{flavour}"), handler=own.handler(flavour)) as (port, _):
        failed = _do(port, b"fail", "abort:UNAVAILABLE@served", "f1")
        raised = _do(port, b"raise", "drop:100@served", "f2")
        alone = _do(port, b"fail", "", "f3")  # the same failure with no fault: the service's own
    assert failed[:2] == ("UNAVAILABLE", "injected fault: UNAVAILABLE")
    assert failed[2]["x-drill-fault"] == "abort" and failed[2].get("x-own") == "failed"
    assert raised[:2] == ("UNAVAILABLE", "injected drop") and raised[2]["x-drill-fault"] == "drop"
    assert alone[:2] == ("FAILED_PRECONDITION", "own failure") and "x-drill-fault" not in alone[2]
    assert own.done == [b"fail", b"raise", b"fail"]


@pytest.mark.parametrize("flavour", ["aio", "aio-sync", "sync"])
def test_a_stream_whose_service_fails_after_its_messages_gets_the_fault_with_its_trailers(flavour):
    own = _Own(EmergencyStop())
    with K.server(flavour, K.settings(f"own-feed-{flavour}"), handler=own.handler(flavour)) as (port, _):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            call = ch.unary_stream("/own.v1.Own/Feed")(b"", metadata=K.drill_md("abort:UNAVAILABLE@served", "feed"),
                                                       timeout=10)  # fmt: skip
            got = []
            with pytest.raises(grpc.RpcError) as err:
                for item in call:
                    got.append(item)
    trailers = dict(err.value.trailing_metadata() or ())
    assert (got, err.value.code(), err.value.details()) == ([b"one", b"two"], grpc.StatusCode.UNAVAILABLE,
                                                             "injected fault: UNAVAILABLE")  # fmt: skip
    assert (trailers["x-drill-fault"], trailers.get("x-own")) == ("abort", "fed")
    assert own.done == [b"feed"]


def test_trailers_a_service_passes_to_its_own_abort_go_out_with_the_fault():
    own = _Own(EmergencyStop())
    with K.server("aio", K.settings("own-pass"), handler=own.handler("aio")) as (port, _):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            with pytest.raises(grpc.RpcError) as err:
                ch.unary_unary("/own.v1.Own/Pass")(b"", metadata=K.drill_md("abort:INTERNAL@served", "p"), timeout=10)
    trailers = dict(err.value.trailing_metadata() or ())
    assert err.value.code() is grpc.StatusCode.INTERNAL
    assert (trailers["x-drill-fault"], trailers.get("x-own")) == ("abort", "passed")
    assert own.done == [b"pass"]


@pytest.mark.parametrize("flavour", ["aio", "aio-sync", "sync"])
def test_a_stop_tripped_while_the_service_works_lets_its_answer_pass_unmarked(flavour):
    stop = EmergencyStop()
    own = _Own(stop)
    service = f"own-stop-{flavour}"
    with K.server(flavour, K.settings(service), stop=stop, handler=own.handler(flavour)) as (port, _):
        got = _do(port, b"trip", "abort:UNAVAILABLE@served", "s1")
    assert got[:2] == ("OK", "ok:trip") and "x-drill-fault" not in got[2]
    assert got[3].get("x-own-head") == "trip"  # the headers it held went out with the answer
    none = dict(service=service, grpc_method="own.v1.Own/Do", grpc_status="OK", traffic="drill", fault_mode="none")
    assert wait_for(lambda: sample("drill_server_calls_total", **none) == 1)
    # it was a hit when the call began (counted and audited there, as `drill hits` predicts), and never acted
    assert sample("drill_fault_hits_total", service=service, grpc_method="own.v1.Own/Do", mode="abort") == 1


@pytest.mark.parametrize("flavour", ["aio", "sync"])
def test_a_served_fault_holds_its_active_slot_while_the_service_works(flavour):
    """DRILL_FAULT_MAX_ACTIVE=1: while a served call's handler works, a second hit finds no slot and passes
    untouched; the first then gets its fault."""
    own = _Own(EmergencyStop())
    service = f"own-slot-{flavour}"
    with K.server(flavour, K.settings(service, max_active=1), handler=own.handler(flavour)) as (port, _):
        box: dict = {}
        first = threading.Thread(target=lambda: box.update(first=_do(port, b"hold", "abort:INTERNAL@served", "a1")))
        first.start()
        try:
            assert own.holding.wait(10)
            second = _do(port, b"next", "abort:INTERNAL@served", "a2")
        finally:
            own.release.set()
            first.join(15)
    assert second[:2] == ("OK", "ok:next") and "x-drill-fault" not in second[2]
    assert box["first"][:2] == ("INTERNAL", "injected fault: INTERNAL")
    skipped = dict(service=service, grpc_method="own.v1.Own/Do", reason="max_active")
    assert sample("drill_fault_skipped_total", **skipped) == 1


#: gRPC's own retry policy (gRFC A6): up to 4 attempts on UNAVAILABLE, quickly.
RETRY = (("grpc.enable_retries", 1), ("grpc.service_config", json.dumps({"methodConfig": [{
    "name": [{"service": "own.v1.Own"}], "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.01s",
    "maxBackoff": "0.05s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})))  # fmt: skip


@pytest.mark.parametrize("flavour", ["aio", "aio-sync", "sync"])
def test_a_retry_policy_retries_a_served_abort_and_each_retry_is_work_the_service_does_again(flavour):
    """A service that sends its headers before its answer: an `@served` fault holds them and drops them when it
    ends the call, so the caller gets a trailers-only UNAVAILABLE, which gRPC retries (4 attempts, 4 times the
    work); with `@headers=sent` they go out first, with the marker, and the call is not retried (gRFC A6); with a
    plain abort every attempt is refused before the service sees it."""
    own = _Own(EmergencyStop())
    with K.server(flavour, K.settings(f"own-retry-{flavour}"), handler=own.handler(flavour)) as (port, _):
        plain = _do(port, b"plain", "abort:UNAVAILABLE", "t1", options=RETRY)
        served = _do(port, b"served", "abort:UNAVAILABLE@served", "t2", options=RETRY)
        headers = _do(port, b"headers", "abort:UNAVAILABLE@served@headers=sent", "t3", options=RETRY)
    assert [c[0] for c in (plain, served, headers)] == ["UNAVAILABLE"] * 3
    assert (own.done.count(b"plain"), own.done.count(b"served"), own.done.count(b"headers")) == (0, 4, 1)
    assert "x-own-head" not in served[3] and served[2]["x-drill-fault"] == "abort"
    assert (headers[3]["x-own-head"], headers[3]["x-drill-fault"]) == ("headers", "abort")


@pytest.mark.parametrize("flavour", ["aio", "sync"])
def test_a_served_call_has_the_span_of_any_fault(flavour):
    """One SERVER span over the service's work and the fault: the hit, its mode, and the status the caller got."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from harness.core.tracing import HarnessTracer

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = HarnessTracer(provider.get_tracer("test"))
    with K.server(flavour, K.settings(f"served-span-{flavour}"), tracer=tracer) as (port, log):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            seen = K.call(ch, Kind.UNARY, K.drill_md("abort:UNAVAILABLE@served", "span-1"))
        assert wait_for(lambda: len(exporter.get_finished_spans()) == 1)
    (span,) = exporter.get_finished_spans()
    assert (seen.code, len(log.times("span-1", "end"))) == ("UNAVAILABLE", 1)
    attrs = dict(span.attributes)
    assert (attrs["drill.fault.mode"], attrs["drill.fault.hit"], attrs["drill.request_id"]) == ("abort", True, "span-1")
    assert attrs["rpc.grpc.status_code"] == "UNAVAILABLE"


@pytest.mark.parametrize("flavour", ["aio", "sync"])
def test_a_caller_that_leaves_while_the_service_works_is_not_faulted(flavour):
    """The fault acts once the service has answered; a caller gone by then (its deadline passed) gets nothing, and
    the call is recorded with fault_mode none, as a stream that ends before its point. (The handler answers once
    its call has ended: a sync handler runs on to its end; grpc.aio cancels its coroutine.)"""
    own = _Own(EmergencyStop())
    service = f"own-gone-{flavour}"
    labels = dict(service=service, grpc_method="own.v1.Own/Do", traffic="drill")
    with K.server(flavour, K.settings(service), handler=own.handler(flavour)) as (port, _):
        got = _do(port, b"gone", "abort:UNAVAILABLE@served", "gone", timeout=0.3)
        assert wait_for(lambda: sample_sum("drill_server_calls_total", **labels) == 1)
    assert (got[0], own.done) == ("DEADLINE_EXCEEDED", [b"gone"] if flavour == "sync" else [])
    assert sample_sum("drill_server_calls_total", fault_mode="none", **labels) == 1
    assert sample_sum("drill_server_calls_total", fault_mode="abort", **labels) == 0
