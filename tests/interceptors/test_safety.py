"""Issue 11 on real servers (aio and sync, 127.0.0.1): the marker, per-attempt faults, the cap, the stop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import threading
import time

import grpc
import pytest

from harness.core import headers as h
from harness.core.faults import is_hit_attempt
from harness.core.safety import EmergencyStop, StopHandlerConflict, install_stop_signal
from harness.core.settings import FaultSettings, SettingsError
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import Tagging
from tests.conftest import sample
from tests.interceptors.servers import (
    CountingAioServicer,
    CountingServicer,
    aio_server,
    aio_stub,
    sync_server,
    sync_stub,
)

M = "drill.v1.Demo/Call"
FLAVOURS = ("aio", "sync")
SEED = 11


def settings(service: str, **kw) -> FaultSettings:
    return FaultSettings(enabled=True, seed=SEED, service=service, instance_id=f"{service}-0", **kw)


class FailingAio(CountingAioServicer):
    """A real (not injected) failure: the handler aborts by itself."""

    async def Call(self, request, context):  # noqa: N802
        if request.payload == "fail":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "real outage")
        return await super().Call(request, context)


class FailingSync(CountingServicer):
    def Call(self, request, context):  # noqa: N802
        if request.payload == "fail":
            context.abort(grpc.StatusCode.UNAVAILABLE, "real outage")
        return super().Call(request, context)


@contextlib.contextmanager
def server(flavour: str, s: FaultSettings, stop: EmergencyStop | None = None, failing: bool = False):
    """A real server of either flavour on 127.0.0.1 (aio on its own loop thread); yields its port."""
    if flavour == "sync":
        with sync_server(s, stop=stop, servicer=FailingSync() if failing else None) as (port, _):
            yield port
        return
    loop = asyncio.new_event_loop()
    box: dict = {}
    started = threading.Event()

    async def main() -> None:
        async with aio_server(s, stop=stop, servicer=FailingAio() if failing else None) as (port, _):
            box["port"], box["halt"] = port, asyncio.Event()
            started.set()
            await box["halt"].wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield box["port"]
    finally:
        loop.call_soon_threadsafe(box["halt"].set)
        thread.join(10)
        loop.close()


def drill_md(directive: str | None, request_id: str = "rid-1", **extra: str) -> tuple:
    md = [(h.TENANT, "tenant-drill"), (h.REQUEST_ID, request_id)]
    if directive:
        md.append((h.FAULT, directive))
    md += [(k, v) for k, v in extra.items()]
    return tuple(md)


def call(port: int, md: tuple = (), payload: str = "p", timeout: float = 30.0, channel_options=()):
    """One plain call (no harness interceptor): (status name, marker value or None, seconds)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=list(channel_options)) as ch:
        stub = drill_pb2_grpc.DemoStub(ch)
        t0 = time.perf_counter()
        try:
            _, c = stub.Call.with_call(drill_pb2.CallRequest(payload=payload), metadata=md, timeout=timeout)
            code, trailing = "OK", c.trailing_metadata()
        except grpc.RpcError as err:
            code, trailing = err.code().name, err.trailing_metadata()
        elapsed = time.perf_counter() - t0
    marks = [v for k, v in (trailing or ()) if k == h.FAULT_MARKER]
    return code, (marks[0] if marks else None), elapsed


def in_thread(fn, *args, **kw):
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("r", fn(*args, **kw)), daemon=True)
    t.start()
    return t, out


def wait_for(predicate, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


# --- the marker ------------------------------------------------------------------------------
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_every_injected_call_carries_the_marker_and_no_other_call_does(flavour):
    with server(flavour, settings(f"mark-{flavour}"), failing=True) as port:
        assert call(port, drill_md("abort:UNAVAILABLE"))[:2] == ("UNAVAILABLE", "abort")
        assert call(port, drill_md("delay:30"))[:2] == ("OK", "delay")
        assert call(port, drill_md("drop:30"))[:2] == ("UNAVAILABLE", "drop")
        # a delayed call whose handler fails for real is still an injected call
        assert call(port, drill_md("delay:30"), payload="fail")[:2] == ("UNAVAILABLE", "delay")
        # nothing else: organic, a drill call the ratio misses, a refused directive, a real outage
        assert call(port)[:2] == ("OK", None)
        assert call(port, drill_md("abort:UNAVAILABLE", **{h.FAULT_RATIO: "0"}))[:2] == ("OK", None)
        assert call(port, drill_md("abort:NOPE"))[:2] == ("OK", None)
        assert call(port, payload="fail")[:2] == ("UNAVAILABLE", None)
        assert call(port, drill_md(None), payload="fail")[:2] == ("UNAVAILABLE", None)


@pytest.mark.parametrize("client", ["aio", "sync"])
def test_client_interceptors_split_injected_from_collateral_failures(client):
    svc = f"inj-{client}"
    drill = Tagging(tenant="tenant-drill", directive="abort:UNAVAILABLE")
    outcomes = []
    with server("sync", settings(f"inj-srv-{client}"), failing=True) as port:
        for tagging, payload in ((drill, "p"), (Tagging(), "fail"), (Tagging(), "p")):
            if client == "sync":
                with sync_stub(port, tagging, service=svc) as stub:
                    try:
                        stub.Call(drill_pb2.CallRequest(payload=payload))
                        outcomes.append("OK")
                    except grpc.RpcError as err:
                        outcomes.append(err.code().name)
            else:

                async def one(tagging=tagging, payload=payload):
                    async with aio_stub(port, tagging, service=svc) as stub:
                        try:
                            await stub.Call(drill_pb2.CallRequest(payload=payload))
                            return "OK"
                        except grpc.aio.AioRpcError as err:
                            return err.code().name

                outcomes.append(asyncio.run(one()))
    assert outcomes == ["UNAVAILABLE", "UNAVAILABLE", "OK"]
    base = dict(service=svc, grpc_method=M, config="none")
    assert wait_for(lambda: sample("drill_client_calls_total", grpc_status="OK", fault_mode="none",
                                   traffic="organic", injected="false", **base) == 1)  # fmt: skip
    assert sample("drill_client_calls_total", grpc_status="UNAVAILABLE", fault_mode="abort", traffic="drill",
                  injected="true", **base) == 1  # fmt: skip
    assert sample("drill_client_calls_total", grpc_status="UNAVAILABLE", fault_mode="none", traffic="organic",
                  injected="false", **base) == 1  # fmt: skip


# --- per-attempt faults -----------------------------------------------------------------------
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_attempt_scope_decides_each_attempt_as_the_java_rule_says(flavour):
    with server(flavour, settings(f"att-{flavour}")) as port:
        got, want = [], []
        for i in range(12):
            rid = f"req-{i}"
            for n in range(4):
                md = drill_md("abort:UNAVAILABLE", rid, **{h.FAULT_RATIO: "50", h.FAULT_SCOPE: "attempt",
                                                             h.DRILL_PREVIOUS_RPC_ATTEMPTS: str(n)})  # fmt: skip
                got.append(call(port, md)[0] == "UNAVAILABLE")
                want.append(is_hit_attempt(SEED, rid, "abort:UNAVAILABLE", 50, n, "attempt"))
        # request scope (the default): every retry of a hit id is hit again
        request_scope = [
            call(port, drill_md("abort:UNAVAILABLE", "req-3", **{h.FAULT_RATIO: "50",
                                                                  h.DRILL_PREVIOUS_RPC_ATTEMPTS: str(n)}))[0]
            for n in range(4)
        ]  # fmt: skip
    assert got == want and 0 < sum(got) < len(got)
    assert len(set(request_scope)) == 1


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_fault_attempts_fails_the_first_n_attempts_then_grpc_retries_succeed(flavour):
    """grpc's own retry policy sends `grpc-previous-rpc-attempts`; the third attempt succeeds."""
    svc = f"first-n-{flavour}"
    config = {
        "methodConfig": [{
            "name": [{"service": "drill.v1.Demo"}],
            "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.05s",
                            "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]},
        }]
    }  # fmt: skip
    options = [("grpc.service_config", json.dumps(config)), ("grpc.enable_retries", 1)]
    with server(flavour, settings(svc)) as port:
        code, mark, _ = call(port, drill_md("abort:UNAVAILABLE", "rid-n", **{h.FAULT_ATTEMPTS: "2"}),
                             channel_options=options)  # fmt: skip
        without_retries = call(port, drill_md("abort:UNAVAILABLE", "rid-n", **{h.FAULT_ATTEMPTS: "2"}))
        third = call(port, drill_md("abort:UNAVAILABLE", "rid-n", **{h.FAULT_ATTEMPTS: "2",
                                                                     h.DRILL_PREVIOUS_RPC_ATTEMPTS: "2"}))  # fmt: skip
    assert (code, mark) == ("OK", None)
    assert sample("drill_fault_hits_total", service=svc, grpc_method=M, mode="abort") == 3  # 2 + the plain call
    assert sample("drill_fault_skipped_total", service=svc, grpc_method=M, reason="attempts") == 2
    assert without_retries[:2] == ("UNAVAILABLE", "abort") and third[:2] == ("OK", None)


# --- DRILL_FAULT_MAX_ACTIVE ------------------------------------------------------------------
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_beyond_max_active_a_faulted_call_passes_untouched(flavour):
    """The two calls that took the slots hold them (a 20 s delay) until the stop releases them, so the other four
    meet a full cap however the box schedules the six; that they passed untouched is their missing marker, the
    skipped counter, and their answer while both slots were still held (no wall-clock bound)."""
    svc = f"cap-{flavour}"
    stop = EmergencyStop()
    with server(flavour, settings(svc, max_active=2), stop=stop) as port:
        runs = [in_thread(call, port, drill_md("delay:20000", f"cap-{i}")) for i in range(6)]
        four_done = wait_for(lambda: sum(not t.is_alive() for t, _ in runs) == 4, 10)
        alive_then = sum(t.is_alive() for t, _ in runs)
        held = sample("drill_fault_active_calls", service=svc)
        stop.trip("test")  # release the two held calls
        for t, _ in runs:
            t.join(10)
        assert not any(t.is_alive() for t, _ in runs), "a call outlived the stop by 10 s"
        results = [out["r"] for _, out in runs]
        after = sample("drill_fault_active_calls", service=svc)
    assert four_done, "the four calls beyond the cap did not all answer within 10 s"
    assert alive_then == 2 and held == 2  # the four answered while the two slots were held
    delayed = [r for r in results if r[1] == "delay"]
    passed = [r for r in results if r[1] is None]
    assert len(delayed) == 2 and all(r[0] == "OK" for r in delayed)
    assert len(passed) == 4 and all(r[0] == "OK" for r in passed)
    assert sample("drill_fault_skipped_total", service=svc, grpc_method=M, reason="max_active") == 4
    assert sample("drill_fault_hits_total", service=svc, grpc_method=M, mode="delay") == 2
    assert after == 0  # every slot released


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_active_calls_gauge_counts_faults_in_flight(flavour):
    """The three delays (20 s) outlast any stall before the third call arrives; the stop then releases them."""
    svc = f"gauge-{flavour}"
    stop = EmergencyStop()
    with server(flavour, settings(svc), stop=stop) as port:
        runs = [in_thread(call, port, drill_md("delay:20000", f"g-{i}")) for i in range(3)]
        seen = wait_for(lambda: sample("drill_fault_active_calls", service=svc) == 3, 10)
        stop.trip("test")
        for t, _ in runs:
            t.join(10)
        assert not any(t.is_alive() for t, _ in runs), "a call outlived the stop by 10 s"
    assert seen, "the gauge did not reach 3 within 10 s"
    assert [out["r"][:2] for _, out in runs] == [("OK", "delay")] * 3
    assert sample("drill_fault_active_calls", service=svc) == 0


def test_max_active_zero_means_no_injection():
    with server("aio", settings("cap-zero", max_active=0)) as port:
        assert call(port, drill_md("abort:UNAVAILABLE"))[:2] == ("OK", None)
    assert sample("drill_fault_skipped_total", service="cap-zero", grpc_method=M, reason="max_active") == 1


def test_max_active_and_stop_file_come_from_the_environment():
    s = FaultSettings.from_env({"DRILL_FAULT_MAX_ACTIVE": "7", "DRILL_FAULT_STOP_FILE": "/tmp/x"})
    assert (s.max_active, s.stop_file) == (7, "/tmp/x")
    assert FaultSettings.from_env({}).max_active == 100
    assert FaultSettings.from_env({"DRILL_FAULT_MAX_ACTIVE": "7"}, max_active=3).max_active == 3
    for bad in ("-1", "many"):
        with pytest.raises(SettingsError):
            FaultSettings.from_env({"DRILL_FAULT_MAX_ACTIVE": bad})


# --- the emergency stop -----------------------------------------------------------------------
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_emergency_stop_releases_delay_and_drop_at_once_and_stays_off(flavour, caplog):
    caplog.set_level(logging.WARNING, logger="drill.audit")
    svc = f"stop-{flavour}"
    stop = EmergencyStop()
    with server(flavour, settings(svc), stop=stop) as port:
        assert sample("drill_fault_switch", service=svc) == 1
        delayed = in_thread(call, port, drill_md("delay:20000", "d"))
        dropped = in_thread(call, port, drill_md("drop:20000", "x"))
        assert wait_for(lambda: sample("drill_fault_active_calls", service=svc) == 2)
        t0 = time.perf_counter()
        stop.trip("test")
        for t, _ in (delayed, dropped):
            t.join(10)
        released_after = time.perf_counter() - t0
        after = call(port, drill_md("abort:UNAVAILABLE", "after"))
        stop.trip("again")  # one way: tripping again changes nothing
    assert delayed[1]["r"][:2] == ("OK", "delay")  # the delayed call answers now
    assert dropped[1]["r"][:2] == ("UNAVAILABLE", "drop")  # the drop closes now
    assert released_after < 5.0  # far from the 20 s the faults asked for
    assert after[:2] == ("OK", None) and stop.tripped
    assert sample("drill_fault_switch", service=svc) == 0
    assert sample("drill_fault_skipped_total", service=svc, grpc_method=M, reason="switch") == 1
    lines = [r.getMessage() for r in caplog.records if '"event":"emergency_stop"' in r.getMessage()]
    assert len(lines) == 1 and '"reason":"test"' in lines[0] and '"released":2' in lines[0]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_stop_file_turns_injection_off_and_releases_waits_without_new_calls(flavour, tmp_path):
    stop_file = tmp_path / "STOP"
    stop = EmergencyStop()
    svc = f"stopfile-{flavour}"
    with server(flavour, settings(svc, stop_file=str(stop_file)), stop=stop) as port:
        assert call(port, drill_md("abort:UNAVAILABLE"))[:2] == ("UNAVAILABLE", "abort")
        delayed = in_thread(call, port, drill_md("delay:20000", "held"))
        assert wait_for(lambda: sample("drill_fault_active_calls", service=svc) == 1)
        stop_file.write_text("")
        delayed[0].join(10)  # no other call arrives: the watcher alone releases it
        assert delayed[1]["r"][:2] == ("OK", "delay") and delayed[1]["r"][2] < 10
        assert call(port, drill_md("abort:UNAVAILABLE"))[:2] == ("OK", None)
        stop_file.unlink()  # never on again
        time.sleep(1.1)
        assert call(port, drill_md("abort:UNAVAILABLE"))[:2] == ("OK", None)
    assert stop.tripped and stop.reason == f"file:{stop_file}"
    assert sample("drill_fault_switch", service=svc) == 0


def test_installing_the_signal_handler_never_replaces_a_foreign_one_silently():
    previous = signal.getsignal(signal.SIGUSR1)
    seen = []
    try:
        signal.signal(signal.SIGUSR1, lambda *_: seen.append("theirs"))
        stop = EmergencyStop()
        with pytest.raises(StopHandlerConflict):
            install_stop_signal(stop)
        install_stop_signal(stop, chain=True)
        install_stop_signal(stop, chain=True)  # twice is harmless
        signal.raise_signal(signal.SIGUSR1)
        assert wait_for(lambda: stop.reason == "signal:SIGUSR1", 5)
        assert seen == ["theirs"]
    finally:
        signal.signal(signal.SIGUSR1, previous)
