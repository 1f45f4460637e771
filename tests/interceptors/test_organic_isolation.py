"""Issue 14: organic traffic never feels a drill. One test (or pair, aio and sync) per point,
each against real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time

import grpc
import pytest
from grpc import aio
from prometheus_client import REGISTRY
from prometheus_client.openmetrics.exposition import generate_latest

from harness.core import audit, token
from harness.core import headers as h
from harness.core.settings import FaultSettings, SettingsError
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import DrillClientInterceptor, FaultServerInterceptor, SyncFaultServerInterceptor, Tagging
from harness.interceptors._client_core import outgoing_metadata
from tests.conftest import sample, sample_sum
from tests.interceptors.servers import aio_server, aio_stub, sync_server, sync_stub

M = "drill.v1.Demo/Call"
Req = drill_pb2.CallRequest
Reply = drill_pb2.CallReply


def on(service: str, **kw) -> FaultSettings:
    return FaultSettings(enabled=True, seed=11, service=service, instance_id=f"{service}-0", **kw)


def drill(directive: str | None = None, **kw) -> Tagging:
    return Tagging(tenant="tenant-drill", directive=directive, **kw)


async def _code(coro) -> grpc.StatusCode:
    try:
        await coro
        return grpc.StatusCode.OK
    except aio.AioRpcError as err:
        return err.code()


def _sync_code(fn, *args, **kw) -> grpc.StatusCode:
    try:
        fn(*args, **kw)
        return grpc.StatusCode.OK
    except grpc.RpcError as err:
        return err.code()


# --- servicers ---------------------------------------------------------------------------------
class Downstream(drill_pb2_grpc.DemoServicer):
    """B: records the metadata of every call it gets."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    async def Call(self, request, context):  # noqa: N802
        self.seen.append(h.metadata_dict(context.invocation_metadata()))
        return Reply(payload="b")


class RefreshingAio(drill_pb2_grpc.DemoServicer):
    """A (aio): lazily starts a background refresher that calls B; `forward` calls B inline."""

    def __init__(self, b_port: int) -> None:
        self.b_port = b_port
        self.refresher: asyncio.Task | None = None
        self.codes: list[grpc.StatusCode] = []

    async def _refresh(self) -> None:
        async with aio_stub(self.b_port) as b:
            for _ in range(8):
                self.codes.append(await _code(b.Call(Req(), timeout=2)))
                await asyncio.sleep(0.01)

    async def Call(self, request, context):  # noqa: N802
        if request.payload == "forward":
            async with aio_stub(self.b_port) as b:
                try:
                    await b.Call(Req(), timeout=5)
                except aio.AioRpcError as err:
                    return Reply(payload=err.code().name)
            return Reply(payload="OK")
        if self.refresher is None:
            self.refresher = asyncio.ensure_future(self._refresh())
        return Reply(payload="a")


class RefreshingSync(drill_pb2_grpc.DemoServicer):
    """A (sync): starts a refresher thread with a copy of its context, or calls B inline."""

    def __init__(self, b_port: int) -> None:
        self.b_port = b_port
        self.thread: threading.Thread | None = None
        self.codes: list[grpc.StatusCode] = []

    def _refresh(self) -> None:
        with sync_stub(self.b_port) as b:
            for _ in range(8):
                self.codes.append(_sync_code(b.Call, Req(), timeout=2))
                time.sleep(0.01)

    def Call(self, request, context):  # noqa: N802
        if request.payload == "forward":
            with sync_stub(self.b_port) as b:
                return Reply(payload=_sync_code(b.Call, Req(), timeout=5).name)
        if self.thread is None:
            ctx = contextvars.copy_context()  # what a careful library does for its worker
            self.thread = threading.Thread(target=ctx.run, args=(self._refresh,), daemon=True)
            self.thread.start()
        return Reply(payload="a")


# --- 1. scope isolation ------------------------------------------------------------------------
def test_1_aio_background_task_started_by_a_drill_call_stays_organic():
    async def main():
        async with aio_server(on("iso-b1"), servicer=Downstream()) as (b_port, b):
            a_servicer = RefreshingAio(b_port)
            async with aio_server(on("iso-a1"), servicer=a_servicer) as (a_port, _):
                async with aio_stub(a_port, drill("abort:INTERNAL", target="iso-b1")) as a:
                    assert (await a.Call(Req())).payload == "a"
                    await asyncio.wait_for(a_servicer.refresher, 10)
                    inline = (await a.Call(Req(payload="forward"))).payload
                return a_servicer.codes, inline, b.seen

    codes, inline, seen = asyncio.run(main())
    assert codes == [grpc.StatusCode.OK] * 8  # before: 8 × INTERNAL
    assert inline == "INTERNAL"  # the call's own downstream call still carries the drill
    assert len(seen) == 8 and not any(h.FAULT in md or h.TENANT in md for md in seen)
    assert sample("drill_server_calls_total", service="iso-b1", grpc_method=M, grpc_status="OK",
                  traffic="organic", fault_mode="none") == 8  # fmt: skip


def test_1_sync_thread_with_a_copied_context_stays_organic():
    async def b_side(ready: threading.Event, stop: threading.Event, out: dict):
        async with aio_server(on("iso-b2"), servicer=Downstream()) as (b_port, b):
            out["port"], out["b"] = b_port, b
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.02)

    ready, stop, out = threading.Event(), threading.Event(), {}
    t = threading.Thread(target=lambda: asyncio.run(b_side(ready, stop, out)), daemon=True)
    t.start()
    try:
        assert ready.wait(10)
        a_servicer = RefreshingSync(out["port"])
        with sync_server(on("iso-a2"), servicer=a_servicer) as (a_port, _):
            with sync_stub(a_port, drill("abort:INTERNAL", target="iso-b2")) as a:
                assert a.Call(Req()).payload == "a"
                a_servicer.thread.join(10)
                inline = a.Call(Req(payload="forward")).payload
    finally:
        stop.set()
        t.join(10)
    assert a_servicer.codes == [grpc.StatusCode.OK] * 8  # before: 8 × INTERNAL
    assert inline == "INTERNAL"


# --- 2. sync handlers on grpc.aio servers ------------------------------------------------------
class SyncOnAio(drill_pb2_grpc.DemoServicer):
    """Plain functions and a plain generator, served by a grpc.aio server. `meet`: a barrier a call with payload
    "meet" waits at (a broken one, from calls run one after another, fails the call)."""

    def __init__(self, meet: threading.Barrier | None = None) -> None:
        self.meet = meet

    def Call(self, request, context):  # noqa: N802
        time.sleep(request.work_ms / 1000.0)
        if self.meet is not None and request.payload == "meet":
            self.meet.wait()
        if request.payload == "raise":
            raise RuntimeError("handler failed")
        if request.payload == "abort":
            context.abort(grpc.StatusCode.NOT_FOUND, "handler abort")
        return Reply(payload=threading.current_thread().name)

    def Stream(self, request, context):  # noqa: N802
        for i in range(request.count or 3):
            yield Reply(payload=str(i))


def test_2_aio_server_keeps_sync_handlers_on_the_executor_and_plain_generators_work():
    async def main():
        # three handlers side by side: each waits at a barrier of three (10 s), which only a concurrent run passes
        # (before: one after another, the first's barrier breaks and its call fails)
        async with aio_server(on("sync-on-aio"), servicer=SyncOnAio(threading.Barrier(3, timeout=10))) as (port, _):
            async with aio_stub(port) as stub:
                replies = await asyncio.gather(*(stub.Call(Req(payload="meet"), timeout=30) for _ in range(3)),
                                               return_exceptions=True)  # fmt: skip
                items = [r.payload async for r in stub.Stream(Req(count=3))]
            async with aio_stub(port, drill("delay:100")) as stub:
                t0 = time.perf_counter()
                delayed_items = [r.payload async for r in stub.Stream(Req(count=2))]
                delayed = time.perf_counter() - t0
            async with aio_stub(port, drill("abort:UNAVAILABLE")) as stub:
                aborted = await _code(stub.Call(Req()))
            return replies, items, delayed_items, delayed, aborted

    replies, items, delayed_items, delayed, aborted = asyncio.run(main())
    assert all(isinstance(r, Reply) for r in replies), replies  # all three met at the barrier: side by side
    assert all(r.payload != "MainThread" for r in replies)  # not on the event loop's thread
    assert items == ["0", "1", "2"]  # before: UNKNOWN "object generator can't be used in 'await'"
    assert delayed_items == ["0", "1"] and delayed >= 0.1
    assert aborted is grpc.StatusCode.UNAVAILABLE


# --- 3. origin deadline: drill traffic only, clamped, not forwarded for organic calls -----------
class Forwarding(drill_pb2_grpc.DemoServicer):
    def __init__(self, b_port: int) -> None:
        self.b_port = b_port

    async def Call(self, request, context):  # noqa: N802
        async with aio_stub(self.b_port) as b:
            await b.Call(Req(), timeout=5)
        return Reply(payload="a")


def test_3_aio_organic_origin_deadline_is_ignored_and_not_forwarded_drill_one_is_clamped():
    bogus = ((h.ORIGIN_DEADLINE, "-1e300"),)

    async def main():
        async with aio_server(on("od-b"), servicer=Downstream()) as (b_port, b):
            async with aio_server(on("od-a"), servicer=Forwarding(b_port)) as (a_port, _):
                async with aio_stub(a_port) as a:
                    await a.Call(Req(), metadata=bogus, timeout=5)
                organic_seen = list(b.seen)
                async with aio_stub(a_port, drill()) as a:
                    await a.Call(Req(), metadata=bogus, timeout=5)
                return organic_seen

    organic_seen = asyncio.run(main())
    assert h.ORIGIN_DEADLINE not in organic_seen[0]  # before: forwarded
    organic_gap = sample("drill_deadline_gap_seconds_sum", service="od-a", grpc_method=M, fault_mode="none")
    assert organic_gap <= 600 + 5  # before: 1e300; drill traffic's is clamped to 600 s in the past


def test_3_sync_organic_origin_deadline_is_ignored():
    with sync_server(on("od-sync")) as (port, _), sync_stub(port) as stub:
        stub.Call(Req(), metadata=((h.ORIGIN_DEADLINE, "-1e300"),), timeout=5)
    assert sample("drill_deadline_gap_seconds_sum", service="od-sync", grpc_method=M, fault_mode="none") < 5


# --- 4. the token binds target, instances, method and a capped lifetime -------------------------
SECRET = "s3cret"


def _signed_md(rid: str, *, send_instances: str | None = None, **sign_kw) -> tuple[tuple[str, str], ...]:
    fields = dict(request_id=rid, tenant="tenant-drill", directive="abort:INTERNAL")
    fields.update(sign_kw)
    tok = token.sign(SECRET, **fields)
    md = [(h.REQUEST_ID, rid), (h.TENANT, "tenant-drill"), (h.FAULT, "abort:INTERNAL"), (h.DRILL_TOKEN, tok)]
    if fields.get("target"):
        md.append((h.FAULT_TARGET, fields["target"]))
    if fields.get("method"):
        md.append((h.FAULT_METHOD, fields["method"]))
    if send_instances is not None:
        md.append((h.FAULT_INSTANCES, send_instances))
    return tuple(md)


# The server's replica (instance id "tok4-0", seed 11) is outside a 10 % share: a 10 % token must not hit it.
def _token_cases() -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    return [
        ("widened_instances", _signed_md("r1", target="tok4", instances=10, method=M, send_instances="100")),
        ("dropped_instances", _signed_md("r2", target="tok4", instances=10, method=M)),
        ("no_target", _signed_md("r3", method=M)),
        ("other_method", _signed_md("r4", target="tok4", method="drill.v1.Demo/Write")),
        ("lifetime_1e9_s", _signed_md("r5", target="tok4", method=M, ttl_s=1e9)),
        # signed by the client as "fail the first two attempts", sent without the limit: every retry would fail
        ("dropped_attempts", _client_md(drill("abort:INTERNAL", target="tok4", secret=SECRET, attempts=2),
                                        strip=h.FAULT_ATTEMPTS)),
        # signed per request, sent per attempt
        ("switched_scope", _client_md(drill("abort:INTERNAL", target="tok4", secret=SECRET),
                                      add=((h.FAULT_SCOPE, "attempt"),))),
    ]  # fmt: skip


def _client_md(tagging: Tagging, strip: str = "", add: tuple[tuple[str, str], ...] = ()) -> tuple[tuple[str, str], ...]:
    """What the real client sends (token included), with one header stripped or added on the way."""
    md, _, _ = outgoing_metadata((), tagging, None, method=M)
    return tuple((k, v) for k, v in md if k != strip) + add


def test_4_aio_token_binds_target_instances_method_scope_attempts_and_lifetime():
    from harness.core.faults import instance_selected

    assert not instance_selected(11, "tok4-0", 10)
    s = on("tok4", secret=SECRET)
    cases = _token_cases()

    async def main():
        async with aio_server(s) as (port, servicer):
            async with aio_stub(port) as stub:
                codes = {name: await _code(stub.Call(Req(), metadata=md)) for name, md in cases}
                spoofed = await _code(stub.Call(Req(), metadata=((h.TENANT, "tenant-drill"),)))
            good = drill("abort:INTERNAL", target="tok4", secret=SECRET)
            async with aio_stub(port, good) as stub:
                signed = await _code(stub.Call(Req()))
            # scope and attempts as the client signed them: injected
            limited = drill("abort:INTERNAL", target="tok4", secret=SECRET, scope="attempt", attempts=1)
            async with aio_stub(port, limited) as stub:
                signed_limited = await _code(stub.Call(Req()))
            return codes, spoofed, signed, signed_limited

    codes, spoofed, signed, signed_limited = asyncio.run(main())
    assert codes == {name: grpc.StatusCode.OK for name, _ in cases}  # before: all INTERNAL
    assert spoofed is grpc.StatusCode.OK and signed is grpc.StatusCode.INTERNAL
    assert signed_limited is grpc.StatusCode.INTERNAL
    calls = dict(service="tok4", grpc_method=M, grpc_status="OK", fault_mode="none")
    # Only `other_method` carries a valid token (for Write): authenticated drill traffic, not injected here.
    assert sample("drill_server_calls_total", traffic="drill", **calls) == 1
    assert sample("drill_server_calls_total", traffic="organic", **calls) == len(cases)  # before: 0


def test_4_sync_spoofed_tenant_is_organic_and_an_untargeted_token_injects_nowhere():
    with sync_server(on("tok4s", secret=SECRET)) as (port, _), sync_stub(port) as stub:
        untargeted = _sync_code(stub.Call, Req(), metadata=_signed_md("s1", method=M))
        stub.Call(Req(), metadata=((h.TENANT, "tenant-drill"),))
    assert untargeted is grpc.StatusCode.OK
    assert sample("drill_server_calls_total", service="tok4s", grpc_method=M, grpc_status="OK",
                  traffic="drill", fault_mode="none") == 0  # fmt: skip


# --- 5. a delay holds handler errors and aborts too --------------------------------------------
class FailingAio(drill_pb2_grpc.DemoServicer):
    async def Call(self, request, context):  # noqa: N802
        if request.payload == "abort":
            await context.abort(grpc.StatusCode.NOT_FOUND, "handler abort")
        raise RuntimeError("handler failed")


class FailingSync(drill_pb2_grpc.DemoServicer):
    def Call(self, request, context):  # noqa: N802
        if request.payload == "abort":
            context.abort(grpc.StatusCode.NOT_FOUND, "handler abort")
        raise RuntimeError("handler failed")


@pytest.mark.parametrize("servicer", [FailingAio, SyncOnAio], ids=["async-handler", "sync-handler"])
def test_5_aio_delay_holds_errors_and_aborts(servicer):
    async def main():
        async with aio_server(on(f"late-{servicer.__name__}"), servicer=servicer()) as (port, _):
            async with aio_stub(port, drill("delay:300")) as stub:
                out = {}
                for payload in ("raise", "abort"):
                    t0 = time.perf_counter()
                    out[payload] = (await _code(stub.Call(Req(payload=payload))), time.perf_counter() - t0)
                return out

    out = asyncio.run(main())
    assert out["raise"][0] is grpc.StatusCode.UNKNOWN and out["raise"][1] >= 0.3  # before: ~5 ms
    assert out["abort"][0] is grpc.StatusCode.NOT_FOUND and out["abort"][1] >= 0.3


def test_5_sync_delay_holds_errors_and_aborts():
    with sync_server(on("late-sync"), servicer=FailingSync()) as (port, _), sync_stub(port, drill("delay:300")) as s:
        out = {}
        for payload in ("raise", "abort"):
            t0 = time.perf_counter()
            out[payload] = (_sync_code(s.Call, Req(payload=payload)), time.perf_counter() - t0)
    assert out["raise"][0] is grpc.StatusCode.UNKNOWN and out["raise"][1] >= 0.3
    assert out["abort"][0] is grpc.StatusCode.NOT_FOUND and out["abort"][1] >= 0.3


# --- 6. only the target enforces its limits -------------------------------------------------------
class ForwardingSync(drill_pb2_grpc.DemoServicer):
    def __init__(self, b_port: int) -> None:
        self.b_port = b_port

    def Call(self, request, context):  # noqa: N802
        with sync_stub(self.b_port) as b:
            b.Call(Req(), timeout=5)
        return Reply(payload="a")


@pytest.mark.parametrize("flavour", ["aio", "sync"])
def test_6_intermediate_hop_forwards_a_delay_above_its_own_max(flavour):
    a_name, b_name = f"lim-a-{flavour}", f"lim-b-{flavour}"

    async def main():
        async with aio_server(on(b_name), servicer=Downstream()) as (b_port, _):
            tagging = drill("delay:300", target=b_name)
            if flavour == "aio":
                async with aio_server(on(a_name, max_delay_ms=100), servicer=Forwarding(b_port)) as (a_port, _):
                    async with aio_stub(a_port, tagging) as a:
                        t0 = time.perf_counter()
                        await a.Call(Req())
                        return time.perf_counter() - t0
            loop = asyncio.get_running_loop()

            def sync_side() -> float:
                with sync_server(on(a_name, max_delay_ms=100), servicer=ForwardingSync(b_port)) as (a_port, _):
                    with sync_stub(a_port, tagging) as a:
                        t0 = time.perf_counter()
                        a.Call(Req())
                        return time.perf_counter() - t0

            return await loop.run_in_executor(None, sync_side)

    elapsed = asyncio.run(main())
    assert sample_sum("drill_fault_rejected_total", service=a_name) == 0  # before: over_max at A
    assert sample("drill_fault_hits_total", service=b_name, grpc_method=M, mode="delay") == 1  # before: 0
    assert elapsed >= 0.3


def test_6_the_target_still_enforces_its_own_max():
    async def main():
        async with aio_server(on("lim-target", max_delay_ms=100)) as (port, _):
            async with aio_stub(port, drill("delay:300", target="lim-target")) as stub:
                await stub.Call(Req())

    asyncio.run(main())
    assert sample("drill_fault_rejected_total", service="lim-target", grpc_method=M, reason="over_max") == 1


# --- 7. audit: every refusal once, rate-limited noise, key fields survive truncation ------------
def _audit(caplog, event: str) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if r.name == "drill.audit"]
    return [x for x in lines if f'"event":"{event}"' in x]


def test_7_refused_tokens_are_audited_and_unauthenticated_noise_is_rate_limited(caplog):
    caplog.set_level(logging.INFO, logger="drill.audit")

    async def main():
        async with aio_server(on("aud7", secret=SECRET)) as (port, _):
            async with aio_stub(port) as stub:
                await stub.Call(Req(), metadata=_signed_md("bad-token-1", target="aud7", method=M, ttl_s=1e9))
            async with aio_stub(port, drill("delay:bogus")) as stub:  # no token, malformed directive
                for _ in range(50):
                    await stub.Call(Req())

    asyncio.run(main())
    refused = _audit(caplog, "token_refused")
    assert any('"request_id":"bad-token-1"' in line and '"detail":"lifetime"' in line for line in refused)
    assert 2 <= len(refused) <= 6  # the lifetime refusal + at most 5 of the 50 noisy ones per window
    assert not _audit(caplog, "fault_rejected")  # before: 50 WARNING lines (parsed before the token check)


def test_7_an_over_long_audit_line_keeps_its_key_fields():
    fields = {f"extra_{i}": "é" * 120 for i in range(10)}
    line = audit.audit_line("fault_rejected", request_id="rid-7", tenant="tenant-drill", reason="over_max", **fields)
    assert len(line) <= audit.MAX_LINE and '"truncated":true' in line
    assert '"request_id":"rid-7"' in line and '"tenant":"tenant-drill"' in line and '"reason":"over_max"' in line


# --- 8. unregistered methods are labelled `other` ----------------------------------------------
class CatchAll(grpc.GenericRpcHandler):
    def service(self, handler_call_details):
        return grpc.unary_unary_rpc_method_handler(lambda request, context: request)


def _method_series(service: str) -> set[str]:
    return {
        s.labels["grpc_method"]
        for metric in REGISTRY.collect()
        for s in metric.samples
        if s.name == "drill_server_calls_total" and s.labels.get("service") == service
    }


def test_8_aio_catch_all_handler_keeps_method_labels_bounded():
    async def main():
        server = aio.server(interceptors=[FaultServerInterceptor(on("catch-aio"), metrics=True)])
        server.add_generic_rpc_handlers((CatchAll(),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                for i in range(300):
                    await ch.unary_unary(f"/rnd.Svc/M{i}")(b"x", timeout=5)
        finally:
            await server.stop(0)

    asyncio.run(main())
    labels = _method_series("catch-aio")
    assert len(labels) <= 101 and "other" in labels  # before: 300 series
    assert sample_sum("drill_server_calls_total", service="catch-aio") == 300


def test_8_sync_registered_methods_keep_their_names_others_are_other():
    from concurrent import futures

    s = on("catch-sync", methods=frozenset({"rnd.Svc/M0"}))
    server = grpc.server(futures.ThreadPoolExecutor(4), interceptors=[SyncFaultServerInterceptor(s, metrics=True)])
    server.add_generic_rpc_handlers((CatchAll(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            for i in range(30):
                ch.unary_unary(f"/rnd.Svc/M{i}")(b"x", timeout=5)
    finally:
        server.stop(0)
    assert _method_series("catch-sync") == {"rnd.Svc/M0", "other"}


# --- 9. minor points -------------------------------------------------------------------------------
def test_9_wildcard_allowlist_is_a_one_line_settings_error():
    with pytest.raises(SettingsError) as info:
        FaultSettings.from_env({"DRILL_FAULT_ENABLED": "1", "DRILL_FAULT_TENANTS": "*"})
    message = str(info.value)
    assert "\n" not in message and "DRILL_FAULT_TENANTS" in message and "'*'" in message


def test_9_empty_allowlist_warns_that_nothing_can_fire(caplog):
    caplog.set_level(logging.WARNING)

    async def main():
        async with aio_server(on("empty-allow", tenants=frozenset())) as (port, _):
            async with aio_stub(port, drill("abort:INTERNAL")) as stub:
                return await _code(stub.Call(Req()))

    assert asyncio.run(main()) is grpc.StatusCode.OK
    assert any("no fault can fire" in r.getMessage() and "empty-allow" in r.getMessage() for r in caplog.records)


def test_9_aio_client_latency_carries_trace_id_exemplars():
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("test")

    async def main():
        async with aio_server(on("exemplar-srv")) as (port, _):
            ic = DrillClientInterceptor(Tagging(), tracer=tracer, service="exemplar-client")
            async with aio.insecure_channel(f"127.0.0.1:{port}", interceptors=[ic]) as ch:
                await drill_pb2_grpc.DemoStub(ch).Call(Req())

    asyncio.run(main())
    body = generate_latest(REGISTRY).decode()
    lines = [x for x in body.splitlines() if x.startswith("drill_client_latency_seconds_bucket")
             and 'service="exemplar-client"' in x]  # fmt: skip
    assert any("# {trace_id=" in x for x in lines), lines  # before: no exemplar


def test_9_intermediate_hop_does_not_forward_an_oversize_token():
    async def main():
        async with aio_server(on("big-b"), servicer=Downstream()) as (b_port, b):
            async with aio_server(on("big-a"), servicer=Forwarding(b_port)) as (a_port, _):
                md = ((h.DRILL_TOKEN, "1" * 6000),)
                async with aio_stub(a_port, drill("abort:INTERNAL", target="big-b")) as a:
                    await a.Call(Req(), metadata=md)
            return b.seen

    (seen,) = asyncio.run(main())
    assert h.DRILL_TOKEN not in seen and h.FAULT not in seen  # before: both forwarded
    assert sample("drill_fault_rejected_total", service="big-a", grpc_method=M, reason="oversize") == 1
