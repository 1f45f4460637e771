"""SIGTERM on `drill proxy`, on either data plane: the calls in flight get the grace (STOP_GRACE_S, 1 s), no more.

A proxy stopped for a rollout must not fail the calls it carries: the aio plane's server stops with that grace
(grpc.aio `stop(grace)`), and the link plane drains the same way (`LinkSet.drain`: no new connection, a GOAWAY
telling each client to open no new stream on its connection, then up to the grace for the streams in flight). A call
longer than the grace is ended when it passes, so a stop is never held by a call.

The service is the Go probe (tests/proxy/goprobe): `mode=sleep` answers after `count` ms and notes `sleeping` when
it begins and `gone` if its caller leaves first, so each test starts the stop only once the service has the call.
"""

from __future__ import annotations

import asyncio
import signal

import pytest
from grpc import aio

from harness.demo.lifecycle import STOP_GRACE_S
from tests.proxy.probe import SERVICE, drill_proxy
from tests.proxy.test_forward import probe, seen, service  # noqa: F401 - fixtures

#: A call that fits in the grace with room to spare: the stop begins once the service has it, so at most this much
#: of the grace is spent waiting for its answer, whatever the box's delays before it; the rest (0.7 s) is for the
#: answer's way back through the proxy
FITS_MS = 300
#: A call far longer than the grace (a proxy that waited for it would be stopped by the test's own timeout)
LONG_MS = 8000


async def _stop_during_call(service_address: str, probe, tmp_path, plane: str, ms: int, call_id: str):  # noqa: F811
    """(the caller's status, the process's exit code, what the service noted of the call once the proxy exited)."""
    _, ds, msg, _ = probe
    args = ("--upstream", service_address, "--port", "0", "--metrics-port", "0", "--descriptor-set", str(ds),
            "--plane", plane)  # fmt: skip
    with drill_proxy(tmp_path, *args) as (proc, info):
        async with aio.insecure_channel(f"127.0.0.1:{info['port']}") as through, \
                aio.insecure_channel(service_address) as direct:  # fmt: skip
            call = asyncio.ensure_future(through.unary_unary(SERVICE + "Echo")(
                msg(id=call_id, mode="sleep", count=ms).SerializeToString(), timeout=30))  # fmt: skip
            for _ in range(500):  # the service has the call (at most 10 s)
                if "sleeping" in await seen(direct, msg, call_id):
                    break
                await asyncio.sleep(0.02)
            else:
                pytest.fail(f"the call never reached the service: {await seen(direct, msg, call_id)}")
            proc.send_signal(signal.SIGTERM)
            try:
                await call
                status = "OK"
            except aio.AioRpcError as err:
                status = err.code().name
            code = await asyncio.to_thread(proc.wait, 30)
            return status, code, await seen(direct, msg, call_id)


@pytest.mark.parametrize("plane", ["aio", "link"])
def test_a_call_in_flight_at_sigterm_is_answered_within_the_grace(service, probe, tmp_path, plane):  # noqa: F811
    status, code, noted = asyncio.run(_stop_during_call(service, probe, tmp_path, plane, FITS_MS, f"fits-{plane}"))
    assert FITS_MS / 1000 < STOP_GRACE_S
    assert (status, code) == ("OK", 0)
    assert noted == ["sleeping", "answered"]


@pytest.mark.parametrize("plane", ["aio", "link"])
def test_a_call_longer_than_the_grace_is_ended_and_the_proxy_exits(service, probe, tmp_path, plane):  # noqa: F811
    status, code, noted = asyncio.run(_stop_during_call(service, probe, tmp_path, plane, LONG_MS, f"long-{plane}"))
    assert status != "OK" and code == 0
    # the proxy exited while the service still had the call: it never waited for it (the service then hears that
    # its caller left, since the proxy's connection to it closed)
    assert "answered" not in noted
