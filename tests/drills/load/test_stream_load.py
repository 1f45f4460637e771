"""The runner's aio load calls streams as it calls unary methods: one request id, one tagging, one status and one
deadline per call; the messages sent at the edge's rate and counted apart.

Each test drives `AioLoad` in this process against the notes service (tests/loadtests/notes_service.py, not the
demo: its own proto, reflection on, the interceptors from `server_interceptors()`), whose handlers write one
line per finished call with the messages they got and sent, keyed by request id. What is asserted follows
from the schedule and the clock, not from how fast this machine is: a stream of 3 messages at 20/s cannot end
before 100 ms, one at 2/s cannot end before its 0.5 s deadline, and so on.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from prometheus_client import REGISTRY

from harness.core.snapshots import EdgeCounts, LoadExport
from harness.drills.load.aio import AioLoad
from harness.drills.load.schedule import request_id
from harness.drills.plan.sections import Fault, Phases, Traffic
from harness.drills.plan.stack import EdgeSpec
from harness.drills.stack.edge import resolve_edge
from tests.stacks.notes_server import notes_server

pytestmark = pytest.mark.slow

SEED = 5
MESSAGES = [{"text": "a"}, {"text": "b"}, {"text": "c"}]


@pytest.fixture(scope="module")
def notes(tmp_path_factory):
    with notes_server(tmp_path_factory.mktemp("notes"), SEED) as info:
        yield info


def edge(notes: dict, method: str, request=None, rate: float | None = None):
    spec = EdgeSpec(address=f"127.0.0.1:{notes['port']}", method=f"notes.v1.Notes/{method}",
                    request=MESSAGES if request is None else request, message_rate=rate)  # fmt: skip
    return resolve_edge(spec)


def drive(notes: dict, call, *, config: str, traffic: Traffic, fault: Fault | None = None, seconds: float = 1.0,
          stop_after=None) -> tuple[AioLoad, EdgeCounts]:  # fmt: skip
    """One trial of the load (all of it in the fault phase), to its end or until `stop_after(load)` says stop."""
    counts = EdgeCounts("loadgen")
    load = AioLoad(plan="p", seed=SEED, config_label=config, traffic=traffic, fault=fault or Fault(),
                   phases=Phases(warmup=0, fault=seconds, recovery=0), edge_call=call, counts=counts)  # fmt: skip

    async def run() -> None:
        await load.start([f"127.0.0.1:{notes['port']}"])
        if stop_after is None:
            await load.wait(timeout_s=seconds + 2.0)
        else:
            while not stop_after(load):
                await asyncio.sleep(0.01)
        await asyncio.wait_for(load.stop(), 10)  # the bound: a stop that hung would fail here

    asyncio.run(run())
    return load, counts


def calls(counts: EdgeCounts) -> dict[tuple[str, str, str], int]:
    """(traffic, status, injected) → calls filed, from the counts the runner reads."""
    (family, *_) = counts.families(int(time.time()) + 60)
    return {(s.labels["traffic"], s.labels["grpc_status"], s.labels["injected"]): int(s.value)
            for s in family.samples if s.value}  # fmt: skip


def records(notes: dict, prefix: str) -> list[dict]:
    with open(notes["record"]) as fh:
        lines = [json.loads(line) for line in fh]
    return [r for r in lines if (r["request_id"] or "").startswith(prefix)]


def messages_metric(config: str, direction: str) -> float:
    labels = {"service": "loadgen", "grpc_method": "notes.v1.Notes/Chat", "direction": direction,
              "traffic": "organic", "config": config}  # fmt: skip
    return REGISTRY.get_sample_value("drill_client_stream_messages_total", labels) or 0.0


def test_every_aborted_stream_keeps_the_status_and_marker_the_server_sent(notes):
    """grpc.aio reports INTERNAL for a stream whose write was in flight as the server ended it (grpc/grpc#36066);
    the load keeps the status the server sent. 100 bidi calls, each writing its 3 messages at once into an abort."""
    fault = Fault(directive="abort:UNAVAILABLE", ratio=100, target="notes")
    traffic = Traffic(organic_users=0, drill_users=1, drill_rate=100, timeout_s=5)
    load, counts = drive(notes, edge(notes, "Chat"), config="abort", traffic=traffic, fault=fault)
    assert calls(counts) == {("drill", "UNAVAILABLE", "true"): 100}
    assert sorted(load.observed_hits()) == sorted(load.expected_hits()) and len(load.expected_hits()) == 100


def test_a_stream_sends_its_messages_at_the_rate_reads_every_reply_and_counts_them_apart(notes):
    before = messages_metric("paced", "sent"), messages_metric("paced", "received")
    traffic = Traffic(organic_users=1, organic_rate=5, drill_users=0, timeout_s=5)
    load, counts = drive(notes, edge(notes, "Chat", rate=20), config="paced", traffic=traffic)
    assert calls(counts) == {("organic", "OK", "false"): 5}
    # the server got the 3 messages of each call under the call's one request id, and answered each
    got = records(notes, f"p-{SEED}-organic0-")
    assert sorted(r["request_id"] for r in got) == sorted(request_id("p", SEED, "paced", 1, "organic0", n)
                                                          for n in range(5))  # fmt: skip
    assert {(r["method"], r["received"], r["sent"]) for r in got} == {("Chat", 3, 3)}
    # message 3 leaves 2 / 20 s after the first: no call ends within 100 ms
    (_, latency, _) = counts.families(int(time.time()) + 60)
    fast = [s.value for s in latency.samples if s.name.endswith("_bucket") and s.labels["le"] == "0.1"]
    assert fast and sum(fast) == 0, fast
    assert load.message_counts() == {"sent": 15, "received": 15, "by_traffic": {
        "organic": {"sent": 15, "received": 15}, "drill": {"sent": 0, "received": 0}}}  # fmt: skip
    after = messages_metric("paced", "sent"), messages_metric("paced", "received")
    assert (after[0] - before[0], after[1] - before[1]) == (15, 15)
    # the runner's /metrics serves the counter beside the edge counts
    assert "drill_client_stream_messages" in {f.name for f in LoadExport(counts).collect()}


def test_a_streams_deadline_covers_the_whole_stream(notes):
    """3 messages at 2/s take 1 s; each is answered at once, but the call's 0.5 s deadline ends the stream."""
    traffic = Traffic(organic_users=1, organic_rate=4, drill_users=0, timeout_s=0.5)
    # stopped once the 4 calls ended, not after the load's own bounded wait (its last call's deadline plus
    # 0.5 s), which a busy box's stall outlasts: stop() then abandons a call uncounted (once: 1 of 4 filed)
    deadline = time.monotonic() + 30

    def ended(load) -> bool:
        return (load.sent == 4 and not load._calls) or time.monotonic() > deadline

    load, counts = drive(notes, edge(notes, "Chat", rate=2), config="deadline", traffic=traffic, stop_after=ended)
    assert calls(counts) == {("organic", "DEADLINE_EXCEEDED", "false"): 4}
    organic = load.message_counts()["by_traffic"]["organic"]
    assert organic["sent"] < 4 * 3 and organic["received"] < 4 * 3, organic


@pytest.mark.parametrize(
    "method, request_, rate",
    [("Chat", None, 20), ("Watch", {"text": "a", "count": 50}, None), ("Upload", None, 20)],
)  # fmt: skip
def test_a_stream_the_drill_user_cancels_is_counted_cancelled(notes, method, request_, rate):
    """`traffic.cancel_ms` cancels a drill call after 50 ms; each of these streams takes at least 100 ms (3
    messages at 20/s, or 50 replies 5 ms apart). A cancelled stream is a CANCELLED call, not a lost one."""
    traffic = Traffic(organic_users=0, drill_users=1, drill_rate=5, timeout_s=5, cancel_ms=50)
    _, counts = drive(notes, edge(notes, method, request_, rate), config=f"cancel-{method}", traffic=traffic)
    assert calls(counts) == {("drill", "CANCELLED", "false"): 5}


def test_stop_cancels_the_streams_in_flight(notes):
    """Streams of 3 messages at 1/s (2 s each), the load stopped once 3 have started: stop() ends every one
    (bounded, `drive`), and a call it ended is abandoned, not filed; the one started last cannot have ended."""
    traffic = Traffic(organic_users=1, organic_rate=10, drill_users=0, timeout_s=5)
    load, counts = drive(notes, edge(notes, "Chat", rate=1), config="stop", traffic=traffic, seconds=3.0,
                         stop_after=lambda load: load.sent >= 3)  # fmt: skip
    assert load.sent >= 3 and not load._calls
    assert sum(calls(counts).values()) < load.sent


def test_grpc_aios_internal_in_place_of_a_streams_own_deadline_is_read_as_the_deadline() -> None:
    """grpc/grpc#36066: a client stream whose deadline ends it while a write is in flight is reported INTERNAL
    "Internal error from Core" (seen once in the suite: 3 of 4 streams DEADLINE_EXCEEDED, 1 INTERNAL). At or past
    its deadline that INTERNAL is the deadline's end; before it, or with other details, an INTERNAL stays one."""
    from grpc import StatusCode, aio

    from harness.drills.load.aio import _lost_deadline

    core = aio.AioRpcError(StatusCode.INTERNAL, aio.Metadata(), aio.Metadata(), "Internal error from Core")
    real = aio.AioRpcError(StatusCode.INTERNAL, aio.Metadata(), aio.Metadata(), "ledger: invariant broken")
    late = aio.AioRpcError(StatusCode.UNAVAILABLE, aio.Metadata(), aio.Metadata(), "Internal error from Core")
    assert _lost_deadline(core, 0.5, 0.5) and _lost_deadline(core, 0.61, 0.5)
    assert not _lost_deadline(core, 0.49, 0.5)  # before the deadline: a real INTERNAL
    assert not _lost_deadline(real, 0.7, 0.5) and not _lost_deadline(late, 0.7, 0.5)
