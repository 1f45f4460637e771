"""A caller made for a hop that came back on the same address reaches it at once, whatever older channels hold.

gRPC's global subchannel pool shares one connection state per address across a process's channels: a new channel to
127.0.0.1:P inherits the failing subchannel an older, still open channel holds for the server that was on P before,
and fails UNAVAILABLE ("Connection refused") until that subchannel's reconnect backoff ends (a second or more). The
demo's callers (`CHANNEL_OPTIONS`) keep a pool of their own per channel, so a hop restarted on its port, or a new
server an ephemeral port was given again, is called fresh. (An in-process chain of the resilience benchmarks met
this in the full suite: both calls UNAVAILABLE where DEADLINE_EXCEEDED was due.)
"""

from __future__ import annotations

import asyncio
import dataclasses

from harness.demo.downstream import demo_caller
from harness.demo.proto import drill_pb2
from harness.demo.serve import start_server
from harness.resilience import config as rconfig


def test_a_new_caller_reaches_a_hop_restarted_on_its_port_while_an_old_caller_still_holds_the_dead_one():
    async def main() -> str:
        first, port, _ = await start_server(port=0, metrics=False)
        address = f"127.0.0.1:{port}"
        old = demo_caller([address], rconfig.load("naive"), service="restart-old")
        try:
            await old.call("Call", drill_pb2.CallRequest(payload="x"), timeout=5)
            await first.stop(None)
            try:  # the old caller's connection fails and stays failing (it backs off before trying again)
                await old.call("Call", drill_pb2.CallRequest(payload="x"), timeout=1)
            except Exception:  # noqa: BLE001 - what it fails with does not matter here
                pass
            again, _, _ = await start_server(port=port, metrics=False)
            # naive without its 1 s per-attempt timeout: a busy box's stall while connecting cannot end the call.
            # A long deadline hides nothing: the inherited failing subchannel fails each attempt UNAVAILABLE at once
            # (a call does not wait for a connection), and naive's three immediate retries are spent within
            # milliseconds, well inside that subchannel's reconnect backoff (a second or more)
            new = demo_caller([address], dataclasses.replace(rconfig.load("naive"), timeouts={}), service="restart-new")
            try:
                await new.call("Call", drill_pb2.CallRequest(payload="y"), timeout=10)
                return "OK"
            except Exception as exc:  # noqa: BLE001 - the failure is the finding: say it
                return repr(exc)[:300]
            finally:
                await new.close()
                await again.stop(None)
        finally:
            await old.close()

    assert asyncio.run(main()) == "OK"
