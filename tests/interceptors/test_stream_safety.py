"""Streams get the gates and safety valves unary calls get: switch, tenant, target, attempt scope, a method
that cannot have the option, DRILL_FAULT_MAX_ACTIVE (a held stream holds its slot until it ends), the
one-way emergency stop (it releases held streams at once, by signal or trip, or within a second by the stop
file), and the client interceptors tag and count every kind. Real servers of both flavours, a service that
is not the demo (tests/interceptors/kinds.py)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import grpc
import pytest
from grpc import aio

from harness.core import headers as h
from harness.core.faults import Kind, is_hit_attempt
from harness.core.safety import EmergencyStop
from harness.core.settings import FaultSettings
from harness.interceptors import DrillClientInterceptor, SyncDrillClientInterceptor, Tagging
from tests.conftest import sample
from tests.interceptors import kinds as K
from tests.interceptors.test_stream_faults import wait_for

FLAVOURS = ("aio", "aio-sync", "sync")
HOLD_MS = 20_000  # what the held faults ask for: a call that ends sooner was released


class Gate:
    """A request stream the test lets through message by message: `open(k)` lets k more be sent."""

    def __init__(self, total: int) -> None:
        self.total = total
        self._allowed = threading.Semaphore(0)

    def open(self, k: int = 1) -> None:
        for _ in range(k):
            self._allowed.release()

    def __iter__(self):
        for i in range(self.total):
            assert self._allowed.acquire(timeout=60)
            yield K.message(i)


def in_thread(fn, *args, **kw):
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("r", fn(*args, **kw)), daemon=True)
    t.start()
    return t, out


def gated_chat(port: int, md: tuple, gate: Gate, timeout: float = 60.0) -> K.Seen:
    """A bidi call whose requests go out as `gate` allows."""
    seen = K.Seen()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        c = ch.stream_stream(f"/{K.SERVICE}/Chat")(iter(gate), metadata=md, timeout=timeout)
        seen.start = time.monotonic()
        try:
            for item in c:
                seen.messages.append(item)
            trailing = c.trailing_metadata()
        except grpc.RpcError as err:
            seen.code, seen.details, trailing = err.code().name, err.details() or "", err.trailing_metadata()
        seen.end = time.monotonic()
    seen.marker = next((v for k, v in trailing or () if k == h.FAULT_MARKER), None)
    return seen


def one(port: int, kind: Kind, md: tuple, **kw) -> K.Seen:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        return K.call(ch, kind, md, **kw)


# --- DRILL_FAULT_MAX_ACTIVE ----------------------------------------------------------------------
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_held_stream_holds_its_fault_slot_until_it_ends(flavour):
    svc = f"slot-{flavour}"
    with K.server(flavour, K.settings(svc, max_active=1)) as (port, _):
        gate = Gate(3)
        gate.open(1)
        holder = in_thread(gated_chat, port, K.drill_md("abort:UNAVAILABLE@read=3", "holder"), gate)
        assert wait_for(lambda: sample("drill_fault_active_calls", service=svc) == 1)
        during = {kind: one(port, kind, K.drill_md("abort:UNAVAILABLE", f"during-{kind.value}"), n=2)
                  for kind in K.KINDS}  # fmt: skip
        gate.open(2)  # the holder's 3rd message goes out; asking for the 4th trips its fault
        holder[0].join(30)
        # the client sees the holder's status before the server's handler has returned and given its slot
        # back (a thread on the sync flavours): wait for the release, then the next drill call takes the slot
        freed = wait_for(lambda: sample("drill_fault_active_calls", service=svc) == 0)
        after = one(port, Kind.CLIENT_STREAMING, K.drill_md("abort:UNAVAILABLE", "after"))
    assert all((s.code, s.marker) == ("OK", None) for s in during.values())  # passed untouched: no slot
    assert (holder[1]["r"].code, holder[1]["r"].marker, holder[1]["r"].count) == ("UNAVAILABLE", "abort", 3)
    assert (after.code, after.marker) == ("UNAVAILABLE", "abort") and freed
    assert sum(sample("drill_fault_skipped_total", service=svc, grpc_method=K.method(k), reason="max_active")
               for k in K.KINDS) == 4  # fmt: skip


# --- the emergency stop ----------------------------------------------------------------------------
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_emergency_stop_releases_held_streams_at_once_and_stays_off(flavour, caplog):
    caplog.set_level(logging.WARNING, logger="drill.audit")
    svc = f"estop-{flavour}"
    stop = EmergencyStop()
    with K.server(flavour, K.settings(svc), stop=stop) as (port, _):
        held = {
            "stall-after": in_thread(one, port, Kind.SERVER_STREAMING, K.drill_md(f"delay:{HOLD_MS}@after=1", "s1"),
                                     n=3),
            "drop-after": in_thread(one, port, Kind.BIDI_STREAMING, K.drill_md(f"drop:{HOLD_MS}@after=1", "s2"), n=3),
            "stall-read": in_thread(one, port, Kind.CLIENT_STREAMING, K.drill_md(f"delay:{HOLD_MS}@read=1", "s3"),
                                    n=3),
            "delay-start": in_thread(one, port, Kind.BIDI_STREAMING, K.drill_md(f"delay:{HOLD_MS}", "s4"), n=3),
        }  # fmt: skip
        gate = Gate(3)
        gate.open(1)  # the 2nd message is held back: this fault has not acted yet when the stop trips
        pending = in_thread(gated_chat, port, K.drill_md("abort:UNAVAILABLE@read=2", "s5"), gate)
        assert wait_for(lambda: sample("drill_fault_active_calls", service=svc) == 5)
        assert wait_for(lambda: len(stop._releasers) == 4)  # the four waits are in progress
        t0 = time.monotonic()
        stop.trip("test")
        for t, _ in held.values():
            t.join(HOLD_MS / 1000)
        released_after = time.monotonic() - t0
        gate.open(2)
        pending[0].join(30)
        after = one(port, Kind.BIDI_STREAMING, K.drill_md("abort:UNAVAILABLE", "after"))
        stop.trip("again")  # one way
    got = {name: (out["r"].code, out["r"].marker, out["r"].count) for name, (_, out) in held.items()}
    assert got == {
        "stall-after": ("OK", "delay", 3),  # the stream goes on
        "drop-after": ("UNAVAILABLE", "drop", 1),  # the drop closes now
        "stall-read": ("OK", "delay", 1),
        "delay-start": ("OK", "delay", 3),
    }
    assert released_after < HOLD_MS / 1000  # none could end before its 20 s unless released
    assert (pending[1]["r"].code, pending[1]["r"].marker, pending[1]["r"].count) == ("OK", None, 3)
    assert (after.code, after.marker) == ("OK", None)
    assert sample("drill_fault_active_calls", service=svc) == 0 and sample("drill_fault_switch", service=svc) == 0
    lines = [r.getMessage() for r in caplog.records if '"event":"emergency_stop"' in r.getMessage()]
    assert len(lines) == 1 and '"released":4' in lines[0]


@pytest.mark.parametrize("flavour", ["aio", "sync"])
def test_the_stop_file_releases_a_held_stream_without_new_calls(flavour, tmp_path):
    """The file is looked at once a second: a held stream ends about a second after it appears (asserted only
    as before its own 20 s: a loaded machine may run the watcher late)."""
    stop_file = tmp_path / "STOP"
    svc = f"stopfile-stream-{flavour}"
    with K.server(flavour, K.settings(svc, stop_file=str(stop_file)), stop=EmergencyStop()) as (port, _):
        held = in_thread(one, port, Kind.BIDI_STREAMING, K.drill_md(f"drop:{HOLD_MS}@after=2", "f1"), n=4)
        assert wait_for(lambda: sample("drill_fault_active_calls", service=svc) == 1)
        t0 = time.monotonic()
        stop_file.write_text("")
        held[0].join(HOLD_MS / 1000)
        elapsed = time.monotonic() - t0
    assert (held[1]["r"].code, held[1]["r"].count) == ("UNAVAILABLE", 2) and elapsed < HOLD_MS / 1000


# --- the gates ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("flavour", ["aio", "sync"])
def test_switch_off_target_elsewhere_and_a_wrong_kind_pass_streams_untouched(flavour, caplog):
    caplog.set_level(logging.WARNING, logger="drill.audit")
    svc = f"gates-{flavour}"
    off = FaultSettings(enabled=False, service=f"{svc}-off")
    with K.server(flavour, off) as (port, _):
        switched_off = {k: one(port, k, K.drill_md("abort:UNAVAILABLE", f"off-{k.value}")) for k in K.KINDS}
    with K.server(flavour, K.settings(svc)) as (port, _):
        elsewhere = {k: one(port, k, K.drill_md("abort:UNAVAILABLE", f"t-{k.value}", x_fault_target="other"))
                     for k in K.KINDS}  # fmt: skip
        wrong = {
            Kind.UNARY: one(port, Kind.UNARY, K.drill_md("abort:UNAVAILABLE@after=1", "w1")),
            Kind.CLIENT_STREAMING: one(port, Kind.CLIENT_STREAMING, K.drill_md("abort:UNAVAILABLE@after=1", "w2")),
            Kind.SERVER_STREAMING: one(port, Kind.SERVER_STREAMING, K.drill_md("abort:UNAVAILABLE@read=1", "w3")),
        }
    for seen in (*switched_off.values(), *elsewhere.values(), *wrong.values()):
        assert (seen.code, seen.marker) == ("OK", None)
    assert all(sample("drill_fault_skipped_total", service=svc, grpc_method=K.method(k), reason="target") == 1
               for k in K.KINDS)  # fmt: skip
    assert all(sample("drill_fault_rejected_total", service=svc, grpc_method=K.method(k), reason="wrong_kind") == 1
               for k in wrong)  # fmt: skip
    refused = [r.getMessage() for r in caplog.records if '"reason":"wrong_kind"' in r.getMessage()]
    assert any('"detail":"after=1 on a unary method"' in x for x in refused)


@pytest.mark.parametrize("flavour", ["aio", "sync"])
def test_attempt_scope_decides_each_attempt_of_a_stream_as_the_java_rule_says(flavour):
    raw = "abort:UNAVAILABLE@read=1"
    with K.server(flavour, K.settings(f"att-stream-{flavour}")) as (port, _):
        got, want = [], []
        for i in range(8):
            rid = f"att-{i * 7919}"
            for n in range(3):
                md = K.drill_md(raw, rid, x_fault_ratio="50", x_fault_scope="attempt",
                                x_drill_previous_rpc_attempts=str(n))  # fmt: skip
                got.append(one(port, Kind.BIDI_STREAMING, md, n=3).code == "UNAVAILABLE")
                want.append(is_hit_attempt(K.SEED, rid, raw, 50, n, "attempt"))
    assert got == want and 0 < sum(got) < len(got)


# --- the client interceptors ------------------------------------------------------------------------
async def _aio_calls(port: int, ic: DrillClientInterceptor) -> dict[Kind, str]:
    """One call of each kind through the aio client interceptor; the status of each."""
    out = {}
    async with aio.insecure_channel(f"127.0.0.1:{port}", interceptors=ic.with_streams()) as ch:

        async def requests():
            for i in range(3):
                yield K.message(i)

        for kind in K.KINDS:
            path = f"/{K.SERVICE}/{K.NAMES[kind]}"
            try:
                if kind is Kind.UNARY:
                    await ch.unary_unary(path)(b"x", timeout=10)
                elif kind is Kind.SERVER_STREAMING:
                    [m async for m in ch.unary_stream(path)(b"3", timeout=10)]
                elif kind is Kind.CLIENT_STREAMING:
                    await ch.stream_unary(path)(requests(), timeout=10)
                else:
                    [m async for m in ch.stream_stream(path)(requests(), timeout=10)]
                out[kind] = "OK"
            except aio.AioRpcError as err:
                out[kind] = err.code().name
        await asyncio.sleep(0.05)  # a stream is recorded by a done callback of its own
    return out


def _sync_calls(port: int, ic: SyncDrillClientInterceptor) -> dict[Kind, str]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as raw:
        ch = grpc.intercept_channel(raw, ic)
        return {kind: K.call(ch, kind, (), n=3, timeout=10).code for kind in K.KINDS}


def _client_calls(service: str, kind: Kind, injected: str) -> float:
    drill = injected == "true"
    return sample("drill_client_calls_total", service=service, grpc_method=K.method(kind), grpc_status="OK",
                  fault_mode="delay" if drill else "none", traffic="drill" if drill else "organic", config="none",
                  injected=injected)  # fmt: skip


@pytest.mark.parametrize("client", ["aio", "sync"])
def test_the_client_interceptors_tag_and_count_every_kind(client):
    """A delay (the call succeeds, with the trailer) rather than an abort: grpc.aio's client may report
    INTERNAL for a call the server ended while it was still writing requests (grpc/grpc#36066)."""
    svc, cli = f"client-kinds-{client}", f"client-kinds-{client}-caller"
    with K.server("aio", K.settings(svc)) as (port, log):
        results = {}
        for name, tagging in (("drill", Tagging(tenant="tenant-drill", directive="delay:20")), ("organic", Tagging())):
            if client == "aio":
                results[name] = asyncio.run(_aio_calls(port, DrillClientInterceptor(tagging, service=cli)))
            else:
                results[name] = _sync_calls(port, SyncDrillClientInterceptor(tagging, service=cli))
        assert wait_for(lambda: all(_client_calls(cli, k, inj) == 1 for k in K.KINDS for inj in ("true", "false")))
    assert results == {"drill": dict.fromkeys(K.KINDS, "OK"), "organic": dict.fromkeys(K.KINDS, "OK")}
    assert all(sample("drill_fault_hits_total", service=svc, grpc_method=K.method(k), mode="delay") == 1
               for k in K.KINDS)  # fmt: skip
    # every call reached the handler with a request id the interceptor made (one per call)
    rids = [rid for rid, event, _ in log.events if event == "start"]
    assert len(rids) == 8 and len(set(rids)) == 8 and all(len(r) == 36 for r in rids)
