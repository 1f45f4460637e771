"""Our hops forward the baggage with the drill keys, and only on the calls that are part of the drill (contracts
"Baggage"): a task the handler spawns stays organic, with baggage too. Real aio servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest
from grpc import aio

from harness.core import baggage
from harness.core import headers as h
from harness.core.faults import is_hit
from harness.core.settings import FaultSettings
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import Tagging
from tests.conftest import sample
from tests.interceptors.servers import aio_server, aio_stub, sync_server

M = "drill.v1.Demo/Call"
Req = drill_pb2.CallRequest


class Recording(drill_pb2_grpc.DemoServicer):
    """B: the raw metadata of every call (before any reading)."""

    def __init__(self) -> None:
        self.raw: list[dict[str, str]] = []

    async def Call(self, request, context):  # noqa: N802
        self.raw.append(dict(context.invocation_metadata()))
        return drill_pb2.CallReply(payload="b")


class Spawning(drill_pb2_grpc.DemoServicer):
    """A: calls B inline (part of the drill call) and from a task it spawns (not part of it), once the drill call
    was answered (grpc.aio lets a task's call made while the served call lasts carry it: harness.core.scope).
    The task sends on the baggage the call came with, as OpenTelemetry's context in a spawned task would."""

    def __init__(self, b_port: int) -> None:
        self.b_port = b_port
        self.task: asyncio.Task | None = None
        self.answered = asyncio.Event()
        self.incoming = ""

    async def _background(self) -> None:
        await self.answered.wait()
        async with aio_stub(self.b_port) as b:
            for _ in range(3):
                await b.Call(Req(payload="background"), metadata=((h.BAGGAGE, self.incoming),), timeout=5)

    async def Call(self, request, context):  # noqa: N802
        self.incoming = dict(context.invocation_metadata())[h.BAGGAGE]
        self.task = asyncio.ensure_future(self._background())
        async with aio_stub(self.b_port) as b:
            await b.Call(Req(payload="inline"), timeout=5)
        return drill_pb2.CallReply(payload="a")


def settings(service: str) -> FaultSettings:
    return FaultSettings(enabled=True, seed=3, service=service, instance_id=f"{service}-0")


def test_the_inline_call_carries_the_callers_baggage_with_the_drill_and_a_spawned_task_carries_no_drill():
    async def main():
        async with aio_server(settings("bag-b"), servicer=Recording()) as (b_port, b):
            a = Spawning(b_port)
            async with aio_server(settings("bag-a"), servicer=a) as (a_port, _):
                tagging = Tagging(tenant="tenant-drill", directive="delay:1", target="bag-b")
                async with aio_stub(a_port, tagging) as stub:
                    await stub.Call(Req(), metadata=((h.BAGGAGE, "userId=alice;p=1"),), timeout=5)
                    a.answered.set()
                    await asyncio.wait_for(a.task, 10)
        return b.raw

    raw = asyncio.run(main())
    assert len(raw) == 4
    (inline,) = [md for md in raw if h.TENANT in md]
    members = {m.key: m for m in baggage.parse(inline[h.BAGGAGE])}
    assert members["userId"].raw == "userId=alice;p=1"  # the caller's own entry, as it came
    assert members["drill.tenant"].value == "tenant-drill" and members["drill.fault-target"].value == "bag-b"
    assert members["drill.request-id"].value == inline[h.REQUEST_ID]
    background = [md for md in raw if h.TENANT not in md]
    assert len(background) == 3
    for md in background:  # organic: no drill key, and no drill entry in any baggage
        assert not set(md) & (set(h.DRILL_KEYS) - {h.REQUEST_ID})
        assert md[h.BAGGAGE] == "userId=alice;p=1"  # the drill entries it was handed are not sent


# --- a target of ours reads the drill from baggage alone (as after a hop that forwards only baggage) -------------
def _baggage_only(rid: str, **keys: str) -> tuple[tuple[str, str], ...]:
    entries = {h.BAGGAGE_NAMES[k]: v for k, v in {h.REQUEST_ID: rid, **keys}.items()}
    return ((h.BAGGAGE, baggage.with_entries("userId=alice", h.BAGGAGE_PREFIX, entries)),)


DRILL_KEYS = {h.TENANT: "tenant-drill", h.FAULT: "abort:UNAVAILABLE", h.FAULT_RATIO: "50"}


@pytest.mark.parametrize("flavour", ["aio", "sync"])
def test_a_drill_in_baggage_alone_is_hit_as_the_hit_formula_says(flavour):
    service = f"bag-only-{flavour}"
    ids = [f"bag-{flavour}-{i}" for i in range(30)]
    codes = {}
    if flavour == "aio":

        async def main():
            async with aio_server(settings(service)) as (port, _):
                async with aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                    stub = drill_pb2_grpc.DemoStub(ch)
                    for rid in ids:
                        try:
                            await stub.Call(Req(), metadata=_baggage_only(rid, **DRILL_KEYS), timeout=5)
                            codes[rid] = grpc.StatusCode.OK
                        except aio.AioRpcError as err:
                            codes[rid] = err.code()

        asyncio.run(main())
    else:
        with sync_server(settings(service)) as (port, _), grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = drill_pb2_grpc.DemoStub(ch)
            for rid in ids:
                try:
                    stub.Call(Req(), metadata=_baggage_only(rid, **DRILL_KEYS), timeout=5)
                    codes[rid] = grpc.StatusCode.OK
                except grpc.RpcError as err:
                    codes[rid] = err.code()
    hit = {rid for rid in ids if is_hit(3, rid, "abort:UNAVAILABLE", 50)}  # settings(): seed 3
    assert 0 < len(hit) < len(ids)
    assert {rid for rid, code in codes.items() if code is grpc.StatusCode.UNAVAILABLE} == hit
    assert {codes[rid] for rid in ids if rid not in hit} == {grpc.StatusCode.OK}
    assert sample("drill_fault_hits_total", service=service, grpc_method=M, mode="abort") == len(hit)


def test_a_malformed_drill_baggage_passes_untouched_counted_and_audited(caplog):
    caplog.set_level(logging.INFO, logger="drill.audit")

    async def main():
        async with aio_server(settings("bag-bad")) as (port, servicer):
            async with aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                md = ((h.REQUEST_ID, "bad-1"), (h.BAGGAGE, "drill.tenant=tenant-drill,drill.fault=abort:INTERNAL,,"))
                reply = await drill_pb2_grpc.DemoStub(ch).Call(Req(payload="p"), metadata=md, timeout=5)
            return reply, servicer.calls

    reply, calls = asyncio.run(main())
    assert (reply.payload, calls) == ("p", 1)  # the handler ran, nothing injected
    assert sample("drill_fault_rejected_total", service="bag-bad", grpc_method=M, reason="bad_baggage") == 1
    (line,) = [r.getMessage() for r in caplog.records if r.name == "drill.audit" and "bad_baggage" in r.getMessage()]
    assert '"request_id":"bad-1"' in line and "not key=value" in line
