"""`drill link` knows the drill's streams by baggage too: client → Node hop (grpc-js with OpenTelemetry's
auto-instrumentation: it forwards `baggage`, never our x-* keys) → `drill link` with an `rst_stream` toxic → Go leaf.

The toxic resets only the streams that carry the drill tenant. Behind the hop the tenant is only in the baggage's
`drill.tenant`, read by the interceptors' rule (x-* keys first, else baggage); before, the link read `x-tenant-id`
alone, so behind any such hop every stream looked organic and the toxic reset none.
"""

from __future__ import annotations

import asyncio
import uuid

from grpc import aio

from harness.core import headers as h
from harness.demo.proto import drill_pb2
from harness.interceptors import Tagging
from harness.link.links import LinkSet
from harness.link.toxics import parse_toxic
from tests.conftest import sample
from tests.fleet import hops
from tests.interceptors.servers import aio_stub

CALLS = 10  # of each class, interleaved on the hop's one connection to the link


def test_rst_stream_behind_a_node_hop_resets_the_drill_streams_it_knows_by_baggage(built, tmp_path):
    name = f"bag-{uuid.uuid4().hex[:8]}"
    with hops.gohop(tmp_path, "leaf", "-work-ms", "1", "-concurrency", "8", "-queue", "64") as leaf:

        async def main() -> tuple[dict[str, list[str]], int]:
            links = LinkSet()
            link = await links.add(name, "127.0.0.1:0", f"127.0.0.1:{leaf}")
            link.add_toxic(parse_toxic({"type": "rst_stream", "stream": "downstream",
                                        "attributes": {"code": "INTERNAL_ERROR"}}))  # fmt: skip
            out: dict[str, list[str]] = {"drill": [], "organic": []}
            try:
                with hops.nodehop(tmp_path, "node", "--upstream", f"127.0.0.1:{link.port}") as node:
                    async with aio_stub(node, Tagging(tenant="tenant-drill")) as drill, aio_stub(node) as organic:
                        for _ in range(CALLS):
                            for kind, stub in (("drill", drill), ("organic", organic)):
                                md = ((h.REQUEST_ID, str(uuid.uuid4())),)
                                try:
                                    await stub.Call(drill_pb2.CallRequest(), metadata=md, timeout=10)
                                    out[kind].append("OK")
                                except aio.AioRpcError as err:
                                    out[kind].append(err.code().name)
                return out, link.accepted
            finally:
                await links.close()

        out, accepted = asyncio.run(main())
    assert accepted == 1  # the hop's one channel: drill and organic streams on the same connection
    assert out["organic"] == ["OK"] * CALLS
    assert "OK" not in out["drill"] and len(out["drill"]) == CALLS, out["drill"]
    assert sample("drill_link_streams_reset_total", link=name) == CALLS  # the link's own count: each drill stream
