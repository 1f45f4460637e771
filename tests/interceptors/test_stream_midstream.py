"""Faults inside a stream (`@after=N`, `@read=N`) and after the response headers (`@headers=sent`), on real
servers of both flavours (tests/interceptors/kinds.py: a service that is not the demo).

Timing is checked as lower bounds on the monotonic clock the test shares with its servers (one process):
a stall of D after response N keeps the handler from producing message N+1 until D after it produced
message N (it produced N before N was sent; the stall starts after N was sent; the handler is asked for
N+1 after the stall), so their stamps differ by at least D; a stall of D on read N+1 keeps message N+1
from the handler until D after it read message N (it asks for N+1 after handling N; the stall comes
first). A drop of D after message N closes the call at least D after the handler produced message N.
"""

from __future__ import annotations

import json
import threading

import grpc
import pytest

from harness.core.faults import Kind, is_hit
from harness.interceptors._fault_steps import Tripwire
from tests.conftest import sample
from tests.interceptors import kinds as K
from tests.interceptors.test_stream_faults import wait_for

FLAVOURS = ("aio", "aio-rw", "aio-sync", "sync")
RESPONSE_STREAMS = (Kind.SERVER_STREAMING, Kind.BIDI_STREAMING)
REQUEST_STREAMS = (Kind.CLIENT_STREAMING, Kind.BIDI_STREAMING)
D = 0.3


@pytest.fixture(scope="module")
def servers():
    """One server per flavour for the whole module; yields {flavour: (port, log, service)}."""
    with K.servers("mid", FLAVOURS) as out:
        yield out


def _call(servers, flavour, kind, directive, rid, **kw):
    port, log, service = servers[flavour]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        return K.call(ch, kind, K.drill_md(directive, rid), **kw), log, service


# --- abort after N ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("kind", RESPONSE_STREAMS, ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_abort_after_n_is_seen_by_the_caller_after_exactly_n_messages(servers, flavour, kind, n):
    rid = f"after{n}-{flavour}-{kind.value}"
    seen, log, _ = _call(servers, flavour, kind, f"abort:UNAVAILABLE@after={n}", rid, n=8)
    assert (seen.code, seen.marker, seen.count) == ("UNAVAILABLE", "abort", n)
    assert [int(x.split(b":")[0]) for x in seen.messages] == list(range(n))
    assert len(log.times(rid, "start")) == 1 and log.times(rid, "end") == []  # the handler ran; the fault ended it


@pytest.mark.parametrize("kind", RESPONSE_STREAMS, ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_stream_that_ends_before_its_point_is_not_faulted(servers, flavour, kind):
    _, _, service = servers[flavour]
    m = K.method(kind)
    none = dict(service=service, grpc_method=m, grpc_status="OK", traffic="drill", fault_mode="none")
    before, hits = sample("drill_server_calls_total", **none), sample("drill_fault_hits_total", service=service,
                                                                      grpc_method=m, mode="abort")  # fmt: skip
    seen, _, _ = _call(servers, flavour, kind, "abort:UNAVAILABLE@after=5", f"short-{flavour}-{kind.value}", n=3)
    assert (seen.code, seen.marker, seen.count) == ("OK", None, 3)
    assert wait_for(lambda: sample("drill_server_calls_total", **none) == before + 1)
    # still a hit of the gate (what `drill hits` predicts), counted and audited when the call began
    assert sample("drill_fault_hits_total", service=service, grpc_method=m, mode="abort") == hits + 1


@pytest.mark.parametrize("flavour", ["aio", "sync"])
def test_the_same_ids_are_hit_mid_stream_in_two_runs_as_the_formula_says(flavour):
    raw = "abort:UNAVAILABLE@after=2"
    ids = [f"rep-{i * 2654435761 % 1000003}" for i in range(24)]  # spread (consecutive ids hash to neighbours)

    def run(tag: str) -> dict[str, tuple[str, int]]:
        with K.server(flavour, K.settings(f"rep-{flavour}-{tag}")) as (port, _):
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                md = {rid: K.drill_md(raw, rid, x_fault_ratio="50") for rid in ids}
                seen = {rid: K.call(ch, Kind.BIDI_STREAMING, md[rid], n=5) for rid in ids}
                return {rid: (s.code, s.count) for rid, s in seen.items()}

    first, second = run("a"), run("b")
    assert first == second
    predicted = {rid for rid in ids if is_hit(K.SEED, rid, raw, 50)}
    assert {rid for rid, got in first.items() if got == ("UNAVAILABLE", 2)} == predicted
    assert {rid for rid, got in first.items() if got == ("OK", 5)} == set(ids) - predicted
    assert 0 < len(predicted) < len(ids)


# --- the request direction ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", REQUEST_STREAMS, ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_abort_on_read_n_lets_the_handler_read_exactly_n_messages(servers, flavour, kind):
    rid = f"read-{flavour}-{kind.value}"
    seen, log, _ = _call(servers, flavour, kind, "abort:INTERNAL@read=3", rid, n=6)
    assert (seen.code, seen.marker) == ("INTERNAL", "abort")
    assert len(log.times(rid, "read")) == 3 and log.times(rid, "end") == []
    assert seen.count == (3 if kind is Kind.BIDI_STREAMING else 0)  # the chat echoed each message it read


@pytest.mark.parametrize("kind", REQUEST_STREAMS, ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_stall_on_read_n_holds_message_n_plus_one(servers, flavour, kind):
    rid = f"stallread-{flavour}-{kind.value}"
    seen, log, _ = _call(servers, flavour, kind, f"delay:{int(D * 1000)}@read=3", rid, n=5)
    reads = log.times(rid, "read")
    assert (seen.code, seen.marker, len(reads)) == ("OK", "delay", 5)
    assert reads[3] - reads[2] >= D  # see the module docstring


# --- a stall and a drop after N ---------------------------------------------------------------------
@pytest.mark.parametrize("kind", RESPONSE_STREAMS, ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_stall_after_n_sits_between_message_n_and_n_plus_one(servers, flavour, kind):
    seen, _, _ = _call(servers, flavour, kind, f"delay:{int(D * 1000)}@after=3", f"stall-{flavour}-{kind.value}", n=6)
    assert (seen.code, seen.marker, seen.count) == ("OK", "delay", 6)
    stamps = [K.stamp(x) for x in seen.messages]
    assert stamps[3] - stamps[2] >= D  # see the module docstring


@pytest.mark.parametrize("kind", RESPONSE_STREAMS, ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_drop_after_n_goes_silent_then_closes_unavailable(servers, flavour, kind):
    seen, _, _ = _call(servers, flavour, kind, f"drop:{int(D * 1000)}@after=2", f"drop-{flavour}-{kind.value}", n=6)
    assert (seen.code, seen.details, seen.marker, seen.count) == ("UNAVAILABLE", "injected drop", "drop", 2)
    assert seen.end - K.stamp(seen.messages[1]) >= D


@pytest.mark.parametrize("kind", RESPONSE_STREAMS, ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", ["aio", "aio-sync", "sync"])
def test_a_drop_mid_stream_holds_the_stream_until_the_callers_deadline(servers, flavour, kind):
    """The caller sees its N messages, then nothing until its own deadline; the server records the call as
    ended by its caller with its fault, its deadline gap, and frees the fault's slot. (Which of
    DEADLINE_EXCEEDED and CANCELLED the server records depends on whether the caller's reset or the server's
    own deadline timer comes first: the server's deadline is the caller's timeout from when the call arrived,
    so it falls later by the call's transit, and a reset that arrives more than `DEADLINE_SLACK_S` before it
    reads as a cancel.)

    The deadline, 3 s, must leave time for the 2 messages (a new channel's connection, the handler's start and 2
    messages: milliseconds) and for an aio server to begin the handler (one begun past the deadline is answered
    without it, and records no gap): 1 s left no room for a busy box's 1-2 s stalls; 3 s outlasts one of 2 s."""
    deadline_s = 3.0
    _, _, service = servers[flavour]
    m = K.method(kind)
    left = dict(service=service, grpc_method=m, traffic="drill", fault_mode="drop")

    def ended() -> float:
        codes = ("DEADLINE_EXCEEDED", "CANCELLED")
        return sum(sample("drill_server_calls_total", grpc_status=code, **left) for code in codes)

    before = ended()
    gaps = sample("drill_deadline_gap_seconds_count", service=service, grpc_method=m, fault_mode="drop")
    rid = f"held-{flavour}-{kind.value}"
    seen, _, _ = _call(servers, flavour, kind, "drop:20000@after=2", rid, n=6, timeout=deadline_s)
    assert (seen.code, seen.count) == ("DEADLINE_EXCEEDED", 2)
    assert seen.end - seen.start >= deadline_s
    assert wait_for(lambda: ended() == before + 1)
    assert sample("drill_deadline_gap_seconds_count", service=service, grpc_method=m, fault_mode="drop") == gaps + 1
    assert wait_for(lambda: sample("drill_fault_active_calls", service=service) == 0)


@pytest.mark.parametrize("kind", RESPONSE_STREAMS, ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", ["aio", "aio-sync", "sync"])
def test_a_caller_that_cancels_a_held_stream_is_counted_cancelled(servers, flavour, kind, monkeypatch):
    """The caller cancels once the server's fault has fired, right after it sent message 1 (the stream is held from
    then on), so the call's end is the caller's cancel with the fault acted: CANCELLED, fault_mode drop. A fixed 0.3 s
    after message 1 is not enough: a server stalled that long has not fired yet, and a cancel then ends an unfaulted
    call (fault_mode none). That the fault fired is nothing a caller or a metric sees before the call ends (the fault
    slot, `drill_fault_active_calls`, is taken when the handler begins, before message 1), so the test watches the
    server's tripwire fire, in this process: `Tripwire.sent` answering the steps to perform (it marks the call
    acted then), wrapped to note it for this call's request id."""
    port, _, service = servers[flavour]
    m = K.method(kind)
    labels = dict(service=service, grpc_method=m, grpc_status="CANCELLED", traffic="drill", fault_mode="drop")
    before = sample("drill_server_calls_total", **labels)
    path = f"/{K.SERVICE}/{K.NAMES[kind]}"
    rid = f"cancel-{flavour}-{kind.value}"
    fired = threading.Event()
    sent = Tripwire.sent

    def watched(trip):
        steps = sent(trip)
        if steps and trip._plan.decision.request_id == rid:
            fired.set()
        return steps

    monkeypatch.setattr(Tripwire, "sent", watched)
    md = K.drill_md("drop:20000@after=1", rid)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        if kind is Kind.SERVER_STREAMING:
            c = ch.unary_stream(path)(b"5", metadata=md, timeout=30)
        else:
            c = ch.stream_stream(path)(iter([K.message(i) for i in range(5)]), metadata=md, timeout=30)
        first = next(c)
        # the server fires as grpc asks for the next message once message 1 is out: milliseconds; 10 s for stalls
        assert fired.wait(10), "the server's fault did not fire within 10 s of message 1"
        c.cancel()
        with pytest.raises(grpc.RpcError) as info:
            next(c)
    assert K.stamp(first) > 0 and info.value.code() is grpc.StatusCode.CANCELLED
    assert wait_for(lambda: sample("drill_server_calls_total", **labels) == before + 1)
    assert wait_for(lambda: sample("drill_fault_active_calls", service=service) == 0)


# --- headers sent: gRFC A6 -------------------------------------------------------------------------
RETRY = json.dumps({"methodConfig": [{"name": [{"service": K.SERVICE}], "retryPolicy": {
    "maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.05s", "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"]}}]})  # fmt: skip


@pytest.mark.parametrize("kind", K.KINDS, ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", ["aio", "aio-sync", "sync"])
def test_after_headers_a_client_does_not_retry_before_them_it_does(servers, flavour, kind):
    """gRFC A6: a call is committed once response headers arrive. The fault hits only the first attempt
    (`x-fault-attempts: 1`); the client retries UNAVAILABLE up to 3 times. Before headers the retry succeeds;
    after them the client gives up at once.

    An abort right behind the headers is checked on unary calls only: grpc's client asks for a unary call's
    headers in the batch that sends the call, so it is waiting for them before the server can answer; it asks
    for a stream's headers in a batch of its own, and one started after both headers and status arrived reads
    the pair as a trailers-only response (a loaded client, now and then). A drop leaves 300 ms between them, far
    more than a scheduler period (tens of ms with two CPU hogs) that the client's thread may wait to run."""
    port, log, _ = servers[flavour]
    directives = ["abort:UNAVAILABLE", "drop:300", "drop:300@headers=sent"]
    if kind is Kind.UNARY:
        directives.append("abort:UNAVAILABLE@headers=sent")
    out = {}
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.service_config", RETRY)]) as ch:
        for directive in directives:
            rid = f"a6-{flavour}-{kind.value}-{directive}"
            seen = K.call(ch, kind, K.drill_md(directive, rid, x_fault_attempts="1"), n=3)
            out[directive] = (seen.code, len(log.times(rid, "start")))
    expected = {
        "abort:UNAVAILABLE": ("OK", 1),  # retried: the second attempt ran the handler
        "drop:300": ("OK", 1),
        "drop:300@headers=sent": ("UNAVAILABLE", 0),  # committed: no retry
        "abort:UNAVAILABLE@headers=sent": ("UNAVAILABLE", 0),
    }
    assert out == {d: expected[d] for d in directives}


@pytest.mark.parametrize("kind", K.KINDS, ids=lambda k: k.value)
@pytest.mark.parametrize("flavour", ["aio", "aio-sync", "sync"])
def test_headers_sent_go_out_before_the_status_in_a_frame_of_their_own(servers, flavour, kind):
    """What the server controls, on every kind: with `@headers=sent` the caller gets response headers (they carry
    the marker, so gRPC's transport cannot fold them into a trailers-only response) and then the status;
    without it, a trailers-only response (no headers at all)."""
    port, _, _ = servers[flavour]
    path = f"/{K.SERVICE}/{K.NAMES[kind]}"
    got = {}
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        for directive in ("abort:UNAVAILABLE", "abort:UNAVAILABLE@headers=sent"):
            md = K.drill_md(directive, f"frames-{flavour}-{kind.value}-{directive}")
            requests = iter([K.message(0)])
            try:
                if kind is Kind.UNARY:
                    ch.unary_unary(path).with_call(b"x", metadata=md, timeout=10)
                elif kind is Kind.CLIENT_STREAMING:
                    ch.stream_unary(path).with_call(requests, metadata=md, timeout=10)
                else:
                    call = (ch.unary_stream(path)(b"3", metadata=md, timeout=10) if kind is Kind.SERVER_STREAMING
                            else ch.stream_stream(path)(requests, metadata=md, timeout=10))  # fmt: skip
                    list(call)
            except grpc.RpcError as err:
                got[directive] = (err.code().name, tuple(err.initial_metadata() or ()))
    assert got == {
        "abort:UNAVAILABLE": ("UNAVAILABLE", ()),
        "abort:UNAVAILABLE@headers=sent": ("UNAVAILABLE", (("x-drill-fault", "abort"),)),
    }


@pytest.mark.parametrize("flavour", ["aio", "aio-sync", "sync"])
def test_a_read_fault_after_headers_is_final_before_them_it_is_retried(servers, flavour):
    """An upload's handler sends nothing before it answers: a fault while it reads is before headers
    (retried) unless the directive sends them (final). A drop, for the reason above."""
    port, log, _ = servers[flavour]
    out = {}
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.service_config", RETRY)]) as ch:
        for directive in ("drop:300@read=2", "drop:300@read=2@headers=sent"):
            rid = f"a6read-{flavour}-{directive}"
            seen = K.call(ch, Kind.CLIENT_STREAMING, K.drill_md(directive, rid, x_fault_attempts="1"), n=4)
            out[directive] = (seen.code, len(log.times(rid, "start")), len(log.times(rid, "end")))
    assert out == {
        "drop:300@read=2": ("OK", 2, 1),  # retried: the second attempt read to the end
        "drop:300@read=2@headers=sent": ("UNAVAILABLE", 1, 0),  # committed
    }


@pytest.mark.parametrize("flavour", ["aio", "sync"])
def test_headers_sent_by_a_fault_do_not_fail_a_handler_that_sends_its_own(flavour):
    """`delay@headers=sent` on a stream: the fault's headers go first; the handler's own send of initial
    metadata is skipped, not failed."""
    log = K.Log()

    def watch_sync(request, context):
        log.note(context, "start")
        context.send_initial_metadata((("x-handler", "1"),))
        yield K.message(0)

    async def watch_aio(request, context):
        log.note(context, "start")
        await context.send_initial_metadata((("x-handler", "1"),))
        yield K.message(0)

    handler = K.generic_handler({Kind.SERVER_STREAMING: watch_sync if flavour == "sync" else watch_aio})
    with K.server(flavour, K.settings(f"own-headers-{flavour}"), handler=handler) as (port, _):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            seen = K.call(ch, Kind.SERVER_STREAMING, K.drill_md("delay:50@headers=sent", "own-1"), n=1)
            plain = K.call(ch, Kind.SERVER_STREAMING, (), n=1)
    assert (seen.code, seen.count, seen.marker) == ("OK", 1, "delay")
    assert (plain.code, plain.count) == ("OK", 1)
