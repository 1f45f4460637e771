"""A trial's links (harness.drills.stack.links) against real grpc-python channels and servers on 127.0.0.1.

What the blackhole plan rests on, each measured through the relay: a `timeout` toxic (timeout 0) makes a
replica silent without closing the connection; keepalive as usually written (time + timeout) does not notice
it within seconds on grpc-python 1.8x, keepalive with the ping timeout does within time + ping timeout;
gRPC's round robin over both replicas (`balancer.kind: grpc_round_robin`) then sends every call to the one
that answers; the trial counts the calls the toxic touched, organic and drill apart; the one-way stop
removes the toxic and it is not set again.
"""

from __future__ import annotations

import asyncio
import functools
import time
import urllib.request

import grpc
from grpc import aio
from prometheus_client.parser import text_string_to_metric_families

from harness.drills.plan.links import Expect, LinkFault, StackLink
from harness.drills.stack.links import POLL_S, TrialLinks
from harness.drills.trials.metrics_server import runner_metrics_url
from harness.resilience import load
from tests.link.echo import echo_server, unary
from tests.ports import free_port

#: keepalive time 1 s: a PING at most 1 s after the connection's last read; the ping timeout (1 s) closes it
#: 1 s later: 2 s. The relay is looked at every POLL_S; the rest is lateness of grpc's timer thread and of our
#: loop, which a loaded CI box stalls for 1-2 s at any point (one stall delays both at once): 3 s of slack.
#: Still far from keepalive as usually written, which closes the silent connection only at grpc's default
#: ping timeout (60 s) and is seen not to within 3 × (1 + 1) s = 6 s (the test below).
DETECT_BOUND_S = 1.0 + 1.0 + POLL_S + 3.0
#: The blackhole plan's fault (harness/plans/blackhole.yaml), its `expect` given DETECT_BOUND_S: the plan's own
#: 2.5 s leaves 0.5 s of slack, meant for a quiet box, which a CI stall exceeds on a correct product
BLACKHOLE = LinkFault(link="b", toxic="timeout", attributes={"timeout": 0},
                      expect=Expect(detect_within_s=DETECT_BOUND_S))  # fmt: skip
#: How long a test waits for a condition that should hold within milliseconds (or DETECT_BOUND_S) before it fails
WAIT_S = 10.0


def run(test):
    """An async test run to its end on a fresh event loop (as tests/link's other live tests do)."""

    @functools.wraps(test)
    def sync() -> None:
        asyncio.run(test())

    return sync


async def _links(upstream_port: int, fault: LinkFault = BLACKHOLE) -> TrialLinks:
    spec = StackLink(name="b", hop="ledger", replica=1, upstream=f"127.0.0.1:{upstream_port}", port=free_port())
    links = TrialLinks((spec,), fault, seed=7, tenant="tenant-drill", log=lambda _: None)
    await links.start_stack()
    return links


async def _until(condition, what: str, within_s: float = WAIT_S) -> None:
    """Poll `condition` every POLL_S until it holds; fail saying `what` did not happen within `within_s`."""
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {within_s:g} s"
        await asyncio.sleep(POLL_S)


def _streams(link) -> int:
    """Streams (calls) opened so far on the link's open connections."""
    return sum(c.h2.organic_count + c.h2.drill_count for c in link.connections)


def _into_silence(links: TrialLinks) -> int:
    """Streams callers opened on the connections the toxic silenced, since it began on each (the link's own
    record of what the toxic touched, harness.link.ledger: closed connections included)."""
    record = links.link.touched(links.fault.toxic_json()["name"])
    return sum(c["streams"][kind] - c["streams_before"][kind] for c in record["connections"]
               for kind in ("organic", "drill"))  # fmt: skip


async def _flow(channel: aio.Channel, until: asyncio.Event, every_s: float = 0.1) -> None:
    """A call every `every_s` (the drill's steady load), each bounded by its deadline; failures ignored."""
    call = unary(channel)
    while not until.is_set():
        try:
            await call(b"x", timeout=2.0)
        except grpc.RpcError:
            pass
        await asyncio.sleep(every_s)


async def _detected(config: str, watch_s: float) -> dict:
    """A channel with `config`'s options through the link, calls flowing; the blackhole set for `watch_s`."""
    async with echo_server() as port:
        links = await _links(port)
        options = load(config).channel_options()
        channel = aio.insecure_channel(f"127.0.0.1:{links.links['b'].port}", options=options)
        await unary(channel)(b"x", timeout=10.0)  # connected through the link
        stop = asyncio.Event()
        flow = asyncio.ensure_future(_flow(channel, stop))
        try:
            links.fault_on()
            deadline = time.monotonic() + watch_s
            while time.monotonic() < deadline and not links.closed_s:
                await asyncio.sleep(POLL_S)
            links.fault_off()
            return links.summary()
        finally:
            stop.set()
            await asyncio.wait_for(flow, 5.0)
            await channel.close()
            await links.close()


@run
async def test_keepalive_with_the_ping_timeout_closes_a_silent_connection_within_time_plus_ping_timeout():
    # watched well past the bound: a late detection is reported with its time, not as none
    summary = await _detected("harness/configs/keepalive-detect.yaml", watch_s=DETECT_BOUND_S + WAIT_S)
    assert summary["connections_held_at_start"] == 1
    assert summary["detected_s"] is not None and summary["detected_s"] <= DETECT_BOUND_S, summary
    assert summary["expect"] == {"detect_within_s": DETECT_BOUND_S, "met": True}
    assert summary["mode"] == "user space"


@run
async def test_keepalive_as_usually_written_does_not_notice_within_three_times_time_plus_timeout():
    # grpc-python 1.8x: the keepalive PING's ACK is awaited for the transport's ping timeout (60 s by default),
    # not keepalive_timeout_ms (1 s): after 3 × (1 + 1) s the silent connection is still open. If a grpc
    # release makes keepalive_timeout_ms govern again, this fails and keepalive-usual.yaml's comment is wrong.
    summary = await _detected("harness/configs/keepalive-usual.yaml", watch_s=6.0)
    assert summary["detected_s"] is None and summary["closed_s"] == []
    assert summary["expect"]["met"] is False


@run
async def test_grpc_round_robin_sends_every_call_to_the_replica_that_answers_once_keepalive_closed_the_other():
    async with echo_server() as port_a, echo_server() as port_b:
        links = await _links(port_b)
        config = load("harness/configs/keepalive-balanced.yaml")
        (target,) = config.targets([f"127.0.0.1:{port_a}", f"127.0.0.1:{links.links['b'].port}"])
        assert target.startswith("ipv4:")
        channel = aio.insecure_channel(target, options=config.channel_options())
        call = unary(channel)
        link = links.links["b"]
        try:
            # both replicas READY: calls until round robin has sent one through the link too
            deadline = time.monotonic() + WAIT_S
            while not _streams(link):
                assert time.monotonic() < deadline, f"round robin sent no call to the link's replica in {WAIT_S:g} s"
                await call(b"x", timeout=10.0)
            assert len(link.connections) == 1
            links.fault_on()
            await _until(lambda: links.closed_s, "keepalive closing the silent connection", DETECT_BOUND_S + WAIT_S)
            assert _into_silence(links) == 0  # no call was sent between the fault's start and the close
            # every call now goes to the replica that answers: each is answered (a call sent into the silence
            # never is: it would fail at its deadline), and the link's record shows no stream opened on a silenced
            # connection — with the configuration's own round robin over two channels, every other call would go to
            # the silent replica's channel
            replies = await asyncio.gather(*(call(b"x", timeout=10.0) for _ in range(20)))
            assert replies == [b"x"] * 20
            assert _into_silence(links) == 0
        finally:
            links.fault_off()
            await channel.close()
            await links.close()


def _served(url: str, name: str, **labels: str) -> float:
    """A sample's value on the /metrics at `url` (0 when it is not there)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


@run
async def test_the_trial_counts_the_calls_the_toxic_touched_and_the_one_way_stop_removes_it_for_good():
    """The trial's record of what the toxic touched, the stop; and the runner's own /metrics (what the run's
    Prometheus scrapes, the overview's Links row reads) serves the series of the link the trial runs in it: one
    more connection faulted by the toxic, one more accepted."""
    url = runner_metrics_url()
    faulted = functools.partial(_served, url, "drill_link_connections_faulted_total", link="b", toxic="timeout")
    accepted = functools.partial(_served, url, "drill_link_connections_total", link="b")
    before = faulted(), accepted()  # the registry is the process's: other tests' links named b counted too
    async with echo_server() as port:
        links = await _links(port)
        channel = aio.insecure_channel(f"127.0.0.1:{links.links['b'].port}")
        call = unary(channel)
        try:
            await call(b"x", timeout=10.0)  # before the fault: not counted
            links.fault_on()
            assert links.links["b"].toxics
            drill = (("x-tenant-id", "tenant-drill"),)
            # silent: only the deadline ends these calls. 3 s, not less: a call whose deadline passes in a CI
            # stall (1-2 s) before grpc sends its HEADERS never reaches the link, which would then not count it
            calls = [call(b"x", timeout=3.0) for _ in range(3)] + [call(b"x", timeout=3.0, metadata=drill)
                                                                  for _ in range(2)]  # fmt: skip
            codes = [exc.code() for exc in await asyncio.gather(*calls, return_exceptions=True)]
            assert codes == [grpc.StatusCode.DEADLINE_EXCEEDED] * 5  # silent: every answer dropped
            said = links.stop("guard")
            assert "removed" in said and not links.links["b"].toxics
            links.fault_on()  # a later phase boundary: never set again after the stop
            assert not links.links["b"].toxics
            summary = links.summary()
            assert summary["calls_touched"] == {"organic": 3, "drill": 2}
            assert summary["connections_faulted"] == 1
            assert (faulted() - before[0], accepted() - before[1]) == (1, 1)
        finally:
            await channel.close()
            await links.close()
