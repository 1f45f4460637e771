"""A hop on the link plane records every call, also the one a fault could not act on: a block sent before the link's
SETTINGS (it used the HPACK dynamic table, so the link may not cut it) reaches the service untouched and is counted as
the drill call that passed, with no hit; the calls after it are faulted and counted as the aio plane counts them.
The client is tests/link/test_calls_hpack.py's (HTTP/2 by hand: its first request goes with its preface)."""

from __future__ import annotations

import asyncio

from harness.core.safety import EmergencyStop
from harness.core.settings import FaultSettings
from harness.link.calls import LinkCalls
from harness.link.links import LinkSet
from tests.conftest import sample_sum
from tests.link.echo import SERVICE, echo_server
from tests.link.test_calls_hpack import _client


def test_a_call_the_fault_could_not_reach_is_still_a_hops_reading_without_a_hit():
    service = "plane-early"

    async def main():
        async with echo_server() as port:
            calls = LinkCalls(FaultSettings(enabled=True, service=service), stop=EmergencyStop(), hop=True)
            links = LinkSet(calls=calls)
            link = await links.add("t", "127.0.0.1:0", f"127.0.0.1:{port}")
            try:
                return await asyncio.to_thread(_client, link.port), calls.in_flight
            finally:
                await links.close()

    (first, second, organic), in_flight = asyncio.run(main())
    assert (first.get("grpc-status"), second.get("grpc-status"), organic.get("grpc-status")) == ("0", "14", "0")
    method = SERVICE[1:] + "Unary"
    calls = {(labels["traffic"], labels["fault_mode"], labels["grpc_status"]): sample_sum("drill_server_calls_total",
             service=service, grpc_method=method, **labels) for labels in (
                 {"traffic": "drill", "fault_mode": "none", "grpc_status": "OK"},
                 {"traffic": "drill", "fault_mode": "abort", "grpc_status": "UNAVAILABLE"},
                 {"traffic": "organic", "fault_mode": "none", "grpc_status": "OK"})}  # fmt: skip
    assert calls == {("drill", "none", "OK"): 1, ("drill", "abort", "UNAVAILABLE"): 1, ("organic", "none", "OK"): 1}
    assert sample_sum("drill_fault_hits_total", service=service) == 1  # the one injected, not the one that passed
    assert in_flight == 0  # every call it began, it ended
