"""Call faults on a link with grpc-js (Node's HTTP/2, nghttp2) as the caller: its HPACK encoder, not grpc-core's, must
honour the table size of 0 the link asks for, from its very first call on a connection.

The client process is tests/link/clients/node/client.js (one call per line on stdin, one JSON line per call that
ended), in front of a link that carries call faults, in front of the echo server (tests/link/echo.py).
"""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from harness.core.environ import environ_now
from harness.core.safety import EmergencyStop
from harness.core.settings import FaultSettings
from harness.fleet import build
from harness.link.calls import LinkCalls
from harness.link.links import LinkSet
from tests.link.echo import echo_server
from tests.link.test_languages import CLIENTS, Client


@pytest.fixture(scope="module")
def node():
    return build.nodehop()[0], str(build.NODE_SOURCE / "node_modules")


def through_node(node, body):
    node_cmd, modules = node

    async def main():
        async with echo_server() as port:
            calls = LinkCalls(FaultSettings(enabled=True, service="lc-node"), stop=EmergencyStop())
            links = LinkSet(calls=calls)
            link = await links.add("t", "127.0.0.1:0", f"127.0.0.1:{port}")
            proc = await asyncio.create_subprocess_exec(
                node_cmd, str(CLIENTS / "node" / "client.js"), f"127.0.0.1:{link.port}", "{}",
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env={**environ_now(), "NODE_PATH": modules},
            )  # fmt: skip
            client = Client(proc, json.dumps)
            try:
                return await body(link, client)
            finally:
                await client.end()
                await links.close()

    return asyncio.run(main())


def drill(directive: str, rid: str) -> dict:
    return {"x-tenant-id": "tenant-drill", "x-fault": directive, "x-request-id": rid}


def test_grpc_js_gets_each_fault_from_its_first_call_on_one_connection(node):
    async def body(link, client):
        out = {"first": await client.call("first", metadata=drill("abort:NOT_FOUND", "first"))}
        out["organic"] = await client.call("organic", payload="o", metadata={"x-request-id": "organic"})
        out["drop"] = await client.call("drop", metadata=drill("drop:200", "drop"))
        out["delay"] = await client.call("delay", payload="d", metadata=drill("delay:200", "delay"))
        out["served"] = await client.call("served", metadata=drill("abort:DATA_LOSS@served", "served"))
        out["after"] = await client.call("after", payload="a", metadata={"x-request-id": "after"})
        return out, link.accepted

    out, connections = through_node(node, body)
    assert (out["first"]["code"], out["first"]["details"]) == ("NOT_FOUND", "injected fault: NOT_FOUND")
    assert (out["organic"]["code"], out["organic"]["reply"]) == ("OK", "o")
    assert (out["drop"]["code"], out["drop"]["details"]) == ("UNAVAILABLE", "injected drop")
    assert out["drop"]["ms"] >= 199  # the client's own clock, ms; asyncio may fire the link's timer ~1 ms early
    assert (out["delay"]["code"], out["delay"]["reply"]) == ("OK", "d") and out["delay"]["ms"] >= 199
    # without --descriptor-set each method is judged a bidi stream: the answer passes, its status is replaced
    assert out["served"]["code"] == "DATA_LOSS"
    assert (out["after"]["code"], out["after"]["reply"], connections) == ("OK", "a", 1)
