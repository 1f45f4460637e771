"""A hop on the link plane records every call as the aio plane does, also one whose header block was sent before the
link's SETTINGS (it used the HPACK dynamic table, so the link may not drop it): it reaches the service, is reset right
behind its block, and is counted as the fault it got; the calls after it are faulted and counted alike.
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


def test_a_call_on_a_block_that_used_the_table_is_faulted_and_read_as_the_aio_plane_reads_it():
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
    assert (first.get("grpc-status"), second.get("grpc-status"), organic.get("grpc-status")) == ("14", "14", "0")
    method = SERVICE[1:] + "Unary"
    calls = {(labels["traffic"], labels["fault_mode"], labels["grpc_status"]): sample_sum("drill_server_calls_total",
             service=service, grpc_method=method, **labels) for labels in (
                 {"traffic": "drill", "fault_mode": "none", "grpc_status": "OK"},
                 {"traffic": "drill", "fault_mode": "abort", "grpc_status": "UNAVAILABLE"},
                 {"traffic": "organic", "fault_mode": "none", "grpc_status": "OK"})}  # fmt: skip
    assert calls == {("drill", "none", "OK"): 0, ("drill", "abort", "UNAVAILABLE"): 2, ("organic", "none", "OK"): 1}
    assert sample_sum("drill_fault_hits_total", service=service) == 2  # both injected
    assert in_flight == 0  # every call it began, it ended
