"""The demo's bidi method `Exchange` through the local topology: a drill whose fault is at the last hop.

`traffic.method: Exchange` makes every call of the runner's load one bidi stream of 3 messages at the gateway;
the gateway relays each message down the chain as one unary `Call` under the stream's drill scope (its request
id and drill keys), so the ledger sees a hit stream's id as it sees a unary drill call's. A hit at the ledger
fails the gateway's downstream call, and the stream ends with that status after its first message. The ids
the ledger audited are the ids the hit function predicts among those the plan tags, and none came back with
the marker (the hop that injects sets it; the gateway in front of it does not relay it).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from grpc import aio
from prometheus_client import REGISTRY

from harness.core.faults import is_hit
from harness.core.settings import FaultSettings
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.demo.serve import start_server
from harness.demo.service import Capacity, plain_downstream
from harness.drills.load.schedule import ids_digest, request_id
from harness.drills.stack.edge import DEMO_EXCHANGE_MESSAGES
from tests.conftest import drill_process

pytestmark = pytest.mark.slow

#: room for a starved machine (as tests/drills/trials/test_live_run.py): no call of this plan is shed or times out
ROOMY = {"work_ms": 1, "concurrency": 64, "queue": 512}
DIRECTIVE = "abort:UNAVAILABLE"
PLAN = {
    "name": "exchange",
    "seed": 11,
    "topology": {"hops": [{"name": "gateway", **ROOMY}, {"name": "ledger", **ROOMY}]},
    "traffic": {"organic_users": 1, "organic_rate": 10, "drill_users": 1, "drill_rate": 10, "timeout_s": 5.0,
                "method": "Exchange"},
    "fault": {"directive": DIRECTIVE, "ratio": 60, "target": "ledger"},
    "phases": {"warmup": 1, "fault": 2, "recovery": 1},
    "slo": {"max_error_rate": 0.05, "hold_s": 1, "traffic": "all"},
}


def test_an_exchange_drill_hits_the_ledger_as_predicted(tmp_path):
    plan = tmp_path / "exchange.yaml"
    plan.write_text(json.dumps(PLAN))
    proc = drill_process("run", str(plan), "--out", str(tmp_path / "out"), "--no-live")
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((tmp_path / "out" / "results.json").read_text())
    (t,) = r["configs"]["plain"]["trials"]
    # the drill user (2nd of 2, offset 1/2 of its period) sends exchange-11-drill0-N-MIX at N/10 + 1/20 s after the
    # load's first second; those in the fault window [1 s, 3 s) carry the directive
    tagged = [request_id("exchange", 11, "plain", 1, "drill0", n) for n in range(40) if 1 <= n / 10 + 1 / 20 < 3]
    hit = {i for i in tagged if is_hit(11, i, DIRECTIVE, 60)}
    assert 0 < len(hit) < len(tagged)
    h = t["hits"]
    assert (h["expected"], h["expected_digest"]) == (len(hit), ids_digest(hit)), h
    assert (h["observed"], h["observed_digest"]) == (len(hit), ids_digest(hit)), h  # the ledger's audit lines
    assert h["marked"] == 0 and h["as_planned"] is True, h
    # one call per stream at the edge; every organic stream sent its messages and got a reply to each
    n = DEMO_EXCHANGE_MESSAGES
    assert t["requests_by_traffic"] == {"organic": 40, "drill": 40}, t["requests_by_traffic"]
    assert t["messages"]["by_traffic"]["organic"] == {"sent": 40 * n, "received": 40 * n}, t["messages"]
    # a hit stream got no reply (its first message's Call failed at the ledger); every other drill stream got n
    assert t["messages"]["by_traffic"]["drill"]["received"] == (40 - len(hit)) * n, t["messages"]



def messages(*payloads: str):
    return iter([drill_pb2.CallRequest(payload=p) for p in payloads])


async def ends(stream) -> str:
    """The status a stream ends with, its replies read."""
    try:
        async for _ in stream:
            pass
    except aio.AioRpcError as err:
        return err.code().name
    return "OK"


def test_exchange_relays_each_message_down_the_chain_as_one_call():
    """Real servers on 127.0.0.1, a gateway in front of a ledger: each message comes back from the ledger, in
    order, and its reply's path names both hops."""

    async def scenario() -> list:
        ledger, lport, _ = await start_server(settings=FaultSettings.from_env({}, service="ledger"), metrics=False)
        to_ledger = aio.insecure_channel(f"127.0.0.1:{lport}")
        gateway, gport, _ = await start_server(settings=FaultSettings.from_env({}, service="gateway"), metrics=False,
                                               downstream=plain_downstream(to_ledger))  # fmt: skip
        try:
            async with aio.insecure_channel(f"127.0.0.1:{gport}") as channel:
                stream = drill_pb2_grpc.DemoStub(channel).Exchange(messages("m0", "m1", "m2"), timeout=10)
                return [r async for r in stream]
        finally:
            await to_ledger.close()
            await gateway.stop(None)
            await ledger.stop(None)

    replies = asyncio.run(scenario())
    assert [(r.payload, list(r.path)) for r in replies] == [(f"m{i}", ["gateway", "ledger"]) for i in range(3)]


def test_admission_takes_a_slot_for_each_message_of_an_exchange():
    """One slot, no queue, 5 s of work: of two streams whose message arrives together, one holds the slot and
    the other is shed with the shed code, as a unary call would be (the admission interceptor lets streams pass;
    the servicer asks it for each message). Both messages arrive well within the 5 s one of them holds it."""
    service = "gateway-admits"

    async def scenario() -> list[str]:
        gateway, port, _ = await start_server(
            settings=FaultSettings.from_env({}, service=service), metrics=False, admission=True,
            capacity=Capacity(concurrency=1, queue=0, work_ms=5000),
        )  # fmt: skip
        try:
            async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = drill_pb2_grpc.DemoStub(channel)
                streams = [stub.Exchange(messages(name), timeout=30) for name in ("a", "b")]
                tasks = [asyncio.ensure_future(ends(s)) for s in streams]
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                first = [t.result() for t in done]
                for s in streams:
                    s.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                return first
        finally:
            await gateway.stop(None)

    labels = {"service": service, "grpc_method": "drill.v1.Demo/Exchange"}
    before = REGISTRY.get_sample_value("drill_server_shed_total", labels) or 0.0
    assert asyncio.run(scenario()) == ["RESOURCE_EXHAUSTED"]
    assert REGISTRY.get_sample_value("drill_server_shed_total", labels) - before == 1
