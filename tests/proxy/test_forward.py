"""`drill proxy` in front of a real Go service (grpc-go): every call kind forwarded exactly, and the drill's faults
on the way, as the interceptors inject them in process.

Each test names the mistake a generic forwarder easily makes and that it would catch. The proxy runs in this
test's event loop (`start_proxy`, what `drill proxy` runs); the service is its own Go process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import time
import urllib.request

import grpc
import pytest
from grpc import aio

from harness import protos
from harness.core import headers as h
from harness.core.faults import is_hit
from harness.core.settings import FaultSettings
from harness.proxy.cli import method_kinds, start_proxy
from tests.conftest import drill_process, sample
from tests.proxy.probe import SERVICE, build, descriptor_set, drill_proxy, go_service, message_class

BIG = {"grpc.max_receive_message_length": -1, "grpc.max_send_message_length": -1}.items()


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("goprobe")
    binary = build(tmp)
    ds = descriptor_set(tmp / "probe.pb")
    return binary, ds, message_class(ds), tmp


@pytest.fixture(scope="module")
def service(probe):
    binary, _, _, tmp = probe
    with go_service(binary, tmp) as address:
        yield address


def behind_proxy(service, probe, body, *, table="descriptors", **settings):
    """Run `body(address)` with a proxy in front of the probe at `address`; its result."""
    _, ds, _, _ = probe
    method_kinds = protos.from_descriptor_set(str(ds), option="--descriptor-set").kinds() if table == "descriptors" \
        else {}  # fmt: skip

    async def main():
        conf = FaultSettings.from_env(service="probe", **settings)
        server, port, upstream = await start_proxy(service, settings=conf, method_kinds=method_kinds)
        try:
            return await body(f"127.0.0.1:{port}")
        finally:
            await server.stop(0)
            await upstream.close()

    return asyncio.run(main())


def through(service, probe, body, **options):
    """Run `body(channel, Msg)` on a channel to a proxy in front of the probe; its result."""
    msg = probe[2]

    async def on_channel(address: str):
        async with aio.insecure_channel(address, options=list(BIG)) as channel:
            return await body(channel, msg)

    return behind_proxy(service, probe, on_channel, **options)


async def seen(channel, msg, call_id: str) -> list[str]:
    reply = await channel.unary_unary(SERVICE + "Seen")(msg(id=call_id).SerializeToString(), timeout=5)
    return json.loads(msg.FromString(reply).body or b"null") or []


def test_unary_bytes_metadata_headers_and_trailers_pass_exactly(service, probe):
    """Messages past 4 MiB (a generic proxy's default cap), metadata up, the service's headers and trailers back."""

    async def body(channel, msg):
        request = msg(id="u1", body=bytes(range(256)) * (6 * 4096), count=7)  # 6 MiB
        metadata = (("x-app", "v1"), ("x-bin-bin", b"\x00\xff"))
        call = channel.unary_unary(SERVICE + "Echo")(request.SerializeToString(), timeout=10, metadata=metadata)
        reply = msg.FromString(await call)
        return request, reply, await call.initial_metadata(), await call.trailing_metadata()

    request, reply, head, trailers = through(service, probe, body)
    assert reply == request
    saw = json.loads(dict(head)["x-probe-saw"])
    assert saw["x-app"] == ["v1"] and "x-bin-bin" in saw
    assert dict(trailers)["x-probe-trailer"] == "ok-u1"


def test_a_failure_before_the_first_message_keeps_its_headers_status_details_and_trailers(service, probe):
    """The headers a service sent before failing (lost by a proxy that sends headers with the first message),
    and its status, message, trailer and `grpc-status-details-bin`, exactly as the service sent them."""
    _, _, msg, _ = probe

    async def direct():
        async with aio.insecure_channel(service) as channel:
            return await fail(channel, msg)

    async def fail(channel, msg):
        with pytest.raises(aio.AioRpcError) as err:
            await channel.unary_unary(SERVICE + "Echo")(msg(id="f1", mode="fail").SerializeToString(), timeout=5)
        e = err.value
        return e.code(), e.details(), dict(e.initial_metadata()), dict(e.trailing_metadata())

    want = asyncio.run(direct())
    got = through(service, probe, fail)
    assert want[0] is grpc.StatusCode.FAILED_PRECONDITION and want[1] == "probe failed f1"
    assert got[:2] == want[:2]
    assert "x-probe-saw" in got[2]
    assert got[3]["x-probe-trailer"] == "t-f1"
    assert got[3]["grpc-status-details-bin"] == want[3]["grpc-status-details-bin"]


def test_the_callers_deadline_reaches_the_service_as_the_time_it_has_left(service, probe):
    """A forwarder that drops the deadline leaves the service without one (-1)."""

    async def body(channel, msg):
        reply = await channel.unary_unary(SERVICE + "Echo")(msg(id="d1", mode="deadline").SerializeToString(),
                                                            timeout=2.0)  # fmt: skip
        return msg.FromString(reply).count

    left_us = through(service, probe, body)
    # present, and no more than the caller gave but for gRPC's own rounding: the deadline travels as a relative
    # timeout (time in transit is the service's to lose), which C-core encodes between 1 s and 10 s in 10-ms
    # units rounded up (timeout_encoding.cc), once by the caller and once by the proxy: at most 2 s + 2 x 10 ms
    assert 0 < left_us <= 2_000_000 + 2 * 10_000


def test_a_cancelled_client_stream_reaches_the_service_as_a_cancel_never_as_its_end(service, probe):
    """grpc.aio ends a cancelled call's request stream as a half-close would: a forwarder that half-closes the
    upstream there lets the service see the end of a stream its caller abandoned (Go: Recv returns io.EOF)."""

    async def body(channel, msg):
        out = []
        for i in range(10):
            call_id = f"c{i}"
            call = channel.stream_unary(SERVICE + "Count")(timeout=10)
            for _ in range(2):
                await call.write(msg(id=call_id).SerializeToString())
            while len(await seen(channel, msg, call_id)) < 2:  # both messages are at the service
                await asyncio.sleep(0.01)
            call.cancel()
            for _ in range(500):
                saw = await seen(channel, msg, call_id)
                if len(saw) > 2:
                    break
                await asyncio.sleep(0.01)
            out.append(saw)
        finished = channel.stream_unary(SERVICE + "Count")(timeout=10)
        await finished.write(msg(id="done").SerializeToString())
        await finished.done_writing()
        count = msg.FromString(await finished).count
        return out, count, await seen(channel, msg, "done")

    cancelled, count, finished = through(service, probe, body)
    assert all(saw == ["message", "message", "Canceled"] for saw in cancelled), cancelled
    assert (count, finished) == (1, ["message", "end"])  # a half-close is still a half-close


def test_a_half_closed_bidi_stream_keeps_receiving_until_the_service_ends_it(service, probe):
    async def body(channel, msg):
        call = channel.stream_stream(SERVICE + "Chat")(timeout=10)
        await call.write(msg(id="b1", count=1).SerializeToString())
        await call.done_writing()
        return [(m.mode, m.count) for m in [msg.FromString(r) async for r in call]], await call.code()

    replies, code = through(service, probe, body)
    assert replies == [("", 1), ("after-end", 1)] and code is grpc.StatusCode.OK


def test_server_streams_and_unknown_kinds_pass_as_streams(service, probe):
    """Without the service's descriptors every method is forwarded as a bidi stream, which every kind is on
    the wire: a unary call and a server stream still get their answers."""

    async def body(channel, msg):
        stream = channel.unary_stream(SERVICE + "Repeat")(msg(id="s1", count=5, body=b"z").SerializeToString(),
                                                          timeout=10)  # fmt: skip
        counts = [msg.FromString(r).count async for r in stream]
        echo = channel.unary_unary(SERVICE + "Echo")
        echo = msg.FromString(await echo(msg(id="s2").SerializeToString(), timeout=5))
        return counts, echo.id

    assert through(service, probe, body) == ([1, 2, 3, 4, 5], "s2")
    assert through(service, probe, body, table=None) == ([1, 2, 3, 4, 5], "s2")


def test_a_service_that_is_down_is_unavailable_at_once_and_served_again_when_back(probe):
    """No restart of the proxy: its channel retries the upstream's address at most every second."""
    binary, ds, msg, tmp = probe

    async def main():
        with go_service(binary, tmp) as address:
            port = int(address.rsplit(":", 1)[1])
        server, proxy_port, upstream = await start_proxy(address, settings=FaultSettings.from_env(service="probe"))
        channel = aio.insecure_channel(f"127.0.0.1:{proxy_port}")
        echo = channel.unary_unary(SERVICE + "Echo")
        try:
            with pytest.raises(aio.AioRpcError) as down:
                await echo(msg(id="x").SerializeToString(), timeout=30)  # fails long before its deadline
            with go_service(binary, tmp, port=port):
                for _ in range(300):  # ≤ 30 s: the proxy retries every ≤ 1 s
                    try:
                        reply = msg.FromString(await echo(msg(id="back").SerializeToString(), timeout=5))
                        break
                    except aio.AioRpcError as err:
                        assert err.code() is grpc.StatusCode.UNAVAILABLE, err
                        await asyncio.sleep(0.1)
            return down.value.code(), reply.id
        finally:
            await channel.close()
            await server.stop(0)
            await upstream.close()

    assert asyncio.run(main()) == (grpc.StatusCode.UNAVAILABLE, "back")


def test_drill_calls_are_faulted_by_the_same_pipeline_and_organic_ones_pass(service, probe):
    """The hit formula picks the calls `drill hits` predicts; a hit never reaches the service; the marker says
    which hop injected; an organic call with the same directive passes untouched."""
    ids = [f"p-{n}" for n in range(40)]
    directive = "abort:UNAVAILABLE"

    async def body(channel, msg):
        echo = channel.unary_unary(SERVICE + "Echo")
        out = {}
        for rid in ids:
            md = ((h.TENANT, "tenant-drill"), (h.FAULT, directive), (h.FAULT_RATIO, "50"),
                  (h.FAULT_TARGET, "probe"), (h.REQUEST_ID, rid))  # fmt: skip
            call = echo(msg(id=rid).SerializeToString(), metadata=md, timeout=5)
            try:
                await call
                out[rid] = ("OK", await seen(channel, msg, rid))
            except aio.AioRpcError as e:
                out[rid] = (e.code().name, dict(e.trailing_metadata() or ()).get(h.FAULT_MARKER))
        organic = echo(msg(id="o1").SerializeToString(), timeout=5,
                       metadata=((h.FAULT, directive), (h.FAULT_RATIO, "100"), (h.FAULT_TARGET, "probe")))  # fmt: skip
        return out, msg.FromString(await organic).id

    out, organic = through(service, probe, body, enabled=True, seed=7)
    hits = {rid for rid in ids if is_hit(7, rid, directive, 50)}
    assert 0 < len(hits) < len(ids)
    assert {rid for rid, (code, _) in out.items() if code == "UNAVAILABLE"} == hits
    assert all(out[rid][1] for rid in hits)  # the marker: this hop injected it
    assert organic == "o1"


def test_a_mid_stream_fault_lands_after_n_messages_and_the_wrong_kind_is_refused(service, probe):
    """`@after=2` on the server stream ends it after two messages; on the unary Echo the pipeline refuses it
    (it knows Echo's kind from the descriptor set) and the call passes."""
    md = ((h.TENANT, "tenant-drill"), (h.FAULT, "abort:ABORTED@after=2"), (h.FAULT_RATIO, "100"),
          (h.FAULT_TARGET, "probe"), (h.REQUEST_ID, "m1"))  # fmt: skip

    async def body(channel, msg):
        stream = channel.unary_stream(SERVICE + "Repeat")(msg(id="m1", count=5).SerializeToString(), metadata=md,
                                                          timeout=10)  # fmt: skip
        got = []
        with pytest.raises(aio.AioRpcError) as err:
            async for r in stream:
                got.append(msg.FromString(r).count)
        rejected = {"service": "probe", "grpc_method": "probe.v1.Probe/Echo", "reason": "wrong_kind"}
        before = sample("drill_fault_rejected_total", **rejected)
        echo = msg.FromString(await channel.unary_unary(SERVICE + "Echo")(msg(id="m2").SerializeToString(),
                                                                           metadata=md, timeout=5))  # fmt: skip
        after = sample("drill_fault_rejected_total", **rejected)
        return got, err.value.code(), echo.id, after - before

    got, code, echo, rejected = through(service, probe, body, enabled=True)
    assert (got, code) == ([1, 2], grpc.StatusCode.ABORTED)
    assert (echo, rejected) == ("m2", 1)


@pytest.mark.parametrize("plane", ["aio", "link"])
def test_a_bad_upstream_is_one_line_exit_2(plane):
    proc = drill_process("proxy", "--upstream", "no-port-here", "--plane", plane, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("drill: proxy: ") and "--upstream" in proc.stderr


@pytest.mark.parametrize("plane", ["aio", "link"])
def test_a_port_in_use_is_one_line_that_says_proxy(plane):
    """`drill proxy` shares `drill serve`'s check of its port; the line names the command that was run."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = drill_process("proxy", "--upstream", "127.0.0.1:1", "--port", str(port), "--metrics-port", "0",
                             "--plane", plane, timeout=60)  # fmt: skip
    assert (proc.returncode, proc.stderr) == (1, f"drill: proxy: cannot listen on 127.0.0.1:{port}: Address "
                                                 "already in use\n")  # fmt: skip


@pytest.mark.parametrize("plane", ["aio", "link"])
def test_the_proxys_warnings_name_its_own_options(tmp_path, monkeypatch, plane):
    """Faults on under the default name and an upstream with no reflection: each warning tells a user of
    `drill proxy` what to pass (`--service`, `--proto`), not a library's environment variable."""
    monkeypatch.delenv("DRILL_SERVICE", raising=False)
    with socket.socket() as gone:  # a port nothing listens on: the upstream's reflection cannot be asked
        gone.bind(("127.0.0.1", 0))
        upstream = f"127.0.0.1:{gone.getsockname()[1]}"
    with drill_proxy(tmp_path, "--upstream", upstream, "--port", "0", "--metrics-port", "0", "--enable-faults",
                     "--plane", plane):
        pass
    log = (tmp_path / "proxy.log").read_text()
    warnings = [line for line in log.splitlines() if " WARNING " in line]
    assert any("calls itself 'drill'" in w and "pass --service NAME" in w for w in warnings), log
    assert any(f"{upstream} offers no server reflection (UNAVAILABLE)" in w and "give --proto FILE.proto" in w
               for w in warnings), log  # fmt: skip
    assert "DRILL_SERVICE" not in log and "--descriptor-set was given" not in log, log


@pytest.mark.parametrize("plane", ["aio", "link"])
def test_drill_proxy_as_a_process_serves_metrics_under_its_service_and_stops_injecting_on_sigusr1(service, probe,
                                                                                                 tmp_path,
                                                                                                 plane):  # fmt: skip
    """What a user starts: `drill proxy` with a ready file; a tagged call is injected and counted under
    `service="probe"`; after `kill -USR1` (`drill stop`) the same call reaches the service."""
    _, ds, msg, _ = probe
    args = ("--upstream", service, "--port", "0", "--metrics-port", "-1", "--service", "probe", "--enable-faults",
            "--descriptor-set", str(ds), "--plane", plane)  # fmt: skip
    with drill_proxy(tmp_path, *args) as (proc, info):
        md = ((h.TENANT, "tenant-drill"), (h.FAULT, "abort:UNAVAILABLE"), (h.FAULT_RATIO, "100"),
              (h.FAULT_TARGET, "probe"), (h.REQUEST_ID, "sig-1"))  # fmt: skip

        async def call() -> str:
            async with aio.insecure_channel(f"127.0.0.1:{info['port']}") as channel:
                try:
                    await channel.unary_unary(SERVICE + "Echo")(msg(id="sig").SerializeToString(), metadata=md,
                                                                timeout=10)  # fmt: skip
                    return "OK"
                except aio.AioRpcError as e:
                    return e.code().name

        assert asyncio.run(call()) == "UNAVAILABLE"
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{info['metrics_port']}/metrics", timeout=10).read().decode()
        assert 'drill_fault_hits_total{grpc_method="probe.v1.Probe/Echo",mode="abort",service="probe"} 1.0' in metrics
        proc.send_signal(signal.SIGUSR1)
        for _ in range(100):  # the signal is handled between the loop's steps: at most a few
            if asyncio.run(call()) == "OK":
                break
            time.sleep(0.05)
        assert asyncio.run(call()) == "OK"


def test_a_slow_reader_slows_the_service_through_the_proxy(service, probe):
    """The caller reads one 1-MiB message of 128 and stops: the Go service writes until the flow control
    windows between it and the caller are full, then waits. A forwarder that reads ahead into a queue lets it
    write all 128. (Each connection's window grows with the bandwidth-delay product it measures, 9-20 MiB on
    loopback here, so a bound in bytes would be the gRPC library's, not the proxy's: the test asks that the
    service was held back, through the proxy as it is for a direct reader.)"""
    _, _, msg, _ = probe

    async def stalled(address: str, call_id: str) -> int:
        async with aio.insecure_channel(address, options=list(BIG)) as channel:
            request = msg(id=call_id, count=128, body=b"x" * (1 << 20)).SerializeToString()
            stream = channel.unary_stream(SERVICE + "Repeat")(request, timeout=60)
            await stream.read()
            wrote, still = 0, 0
            for _ in range(200):  # until the service's count stands for 0.5 s, at most 20 s
                now = (await seen(channel, msg, call_id)).count("wrote")
                still = still + 1 if now == wrote else 0
                wrote = now
                if still == 5:
                    break
                await asyncio.sleep(0.1)
            stream.cancel()
            return wrote

    direct = asyncio.run(stalled(service, "flow-direct"))
    proxied = behind_proxy(service, probe, lambda address: stalled(address, "flow-proxied"))
    assert 0 < direct < 128 and 0 < proxied < 128, (direct, proxied)


def _sources(**given) -> argparse.Namespace:
    """`drill proxy`'s options for each method's kind: none given but `given`."""
    return argparse.Namespace(**{"descriptor_set": None, "proto": None, "proto_path": [],
                                 "upstream": "127.0.0.1:1", **given})  # fmt: skip


def test_method_kinds_come_from_a_proto_a_descriptor_set_or_reflection_alike(probe, tmp_path):
    """The three sources give the same table; the demo service's reflection gives its four kinds (not
    reflection's or health's own)."""
    _, ds, _, _ = probe
    from tests.proxy.probe import PROTO

    table = method_kinds(_sources(descriptor_set=str(ds)))
    assert method_kinds(_sources(proto=str(PROTO))) == table
    assert table["/probe.v1.Probe/Count"].value == "client_streaming"
    assert table["/probe.v1.Probe/Chat"].value == "bidi_streaming"

    async def reflected():
        from harness.demo.serve import start_server

        server, port, _ = await start_server(settings=FaultSettings.from_env(service="demo"), metrics=False)
        try:
            return await asyncio.get_running_loop().run_in_executor(
                None, method_kinds, _sources(upstream=f"127.0.0.1:{port}"))  # fmt: skip
        finally:
            await server.stop(0)

    demo = asyncio.run(reflected())
    assert {m: k.value for m, k in demo.items()} == {
        "/drill.v1.Demo/Call": "unary", "/drill.v1.Demo/Write": "unary",
        "/drill.v1.Demo/Stream": "server_streaming", "/drill.v1.Demo/Exchange": "bidi_streaming",
    }  # fmt: skip
    # a missing --proto is bad input even where the port is taken: local inputs are checked before the port
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        bad = drill_process("proxy", "--upstream", "127.0.0.1:1", "--port", str(busy.getsockname()[1]),
                            "--proto", str(tmp_path / "none.proto"), timeout=60)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.startswith("drill: proxy: --proto: no file"), bad.stderr


def test_with_a_drill_secret_only_signed_directives_inject_and_a_named_authority_still_goes_upstream(service,
                                                                                                    probe):  # fmt: skip
    """Once a secret is set, a tagged call without a valid token passes untouched (a header alone triggers
    nothing); a signed one is faulted. A caller naming another host (`:authority`) still reaches the upstream:
    the proxy forwards only to `--upstream`."""
    from harness.interceptors import DrillClientInterceptor, Tagging

    spoof = ((h.TENANT, "tenant-drill"), (h.FAULT, "abort:INTERNAL"), (h.FAULT_TARGET, "probe"))

    async def body(address: str):
        msg = probe[2]
        options = [("grpc.default_authority", "elsewhere.example:443")]
        async with aio.insecure_channel(address, options=options) as channel:
            reply = await channel.unary_unary(SERVICE + "Echo")(msg(id="s1").SerializeToString(), metadata=spoof,
                                                                timeout=5)  # fmt: skip
            spoofed = msg.FromString(reply).id
        signed = Tagging(tenant="tenant-drill", directive="abort:INTERNAL", target="probe", secret="drill-secret")
        icpt = DrillClientInterceptor(signed, service="t", config="none", target=address)
        async with aio.insecure_channel(address, interceptors=icpt.with_streams()) as channel:
            with pytest.raises(aio.AioRpcError) as info:
                await channel.unary_unary(SERVICE + "Echo")(msg(id="s2").SerializeToString(), timeout=5)
        return spoofed, info.value.code()

    spoofed, code = behind_proxy(service, probe, body, enabled=True, seed=1, secret="drill-secret")
    assert spoofed == "s1"  # the Go service's echo: forwarded to the upstream, not faulted
    assert code is grpc.StatusCode.INTERNAL
    assert sample("drill_fault_skipped_total", service="probe", grpc_method="probe.v1.Probe/Echo", reason="token") >= 1


def test_a_request_streams_end_waits_for_a_late_cancel_and_half_closes_only_a_real_end():
    """The mechanism under the cancel test above, made deterministic: grpc.aio ends a cancelled call's request
    iterator as a half-close would and reports the cancel later (here 5 ms, a busy machine's delay; beside two
    CPU hogs a forwarder that yielded one loop turn let the Go service see an end of stream in 4 of 6 runs). A
    cancel within CANCEL_GRACE_S cancels, never half-closes; a real end half-closes once the grace is over."""
    from harness.proxy.forward import CANCEL_GRACE_S, _end_of_requests

    class Upstream:
        half_closed = False

        async def done_writing(self):
            self.half_closed = True

    class Context:  # what _end_of_requests reads of a grpc.aio ServicerContext
        def __init__(self, cancel_after_s):
            self._done = self._cancelled = False
            self._callbacks = []
            if cancel_after_s is not None:
                asyncio.get_running_loop().call_later(cancel_after_s, self._cancel)

        def _cancel(self):
            self._done = self._cancelled = True
            for cb in self._callbacks:
                cb(self)

        def add_done_callback(self, cb):
            self._callbacks.append(cb)

        def done(self):
            return self._done

        def cancelled(self):
            return self._cancelled

    async def end(cancel_after_s):
        upstream, t0 = Upstream(), time.monotonic()
        try:
            await _end_of_requests(upstream, Context(cancel_after_s))
            outcome = "half-closed"
        except asyncio.CancelledError:
            outcome = "cancelled"
        return outcome, upstream.half_closed, time.monotonic() - t0

    assert 0.005 < CANCEL_GRACE_S
    outcome, half_closed, _ = asyncio.run(end(0.005))
    assert (outcome, half_closed) == ("cancelled", False)
    outcome, half_closed, waited = asyncio.run(end(None))
    # asyncio runs a timer once the loop's clock is within its resolution of the deadline: that early, no more
    early = time.get_clock_info("monotonic").resolution
    assert (outcome, half_closed) == ("half-closed", True) and waited >= CANCEL_GRACE_S - early
