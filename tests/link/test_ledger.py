"""What a toxic touched, as the link records it (harness.link.ledger) and serves it (GET /proxies/{name}/toxics/
{toxic}/connections), with real grpc-python calls: the connection open at the toxic's start and one opened after
it, the streams on each before and since (organic and drill apart), each close timed after the toxic's start."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

from grpc import aio

from harness.link.admin import serve_admin
from harness.link.links import LinkSet
from tests.link.echo import BIG, echo_server, unary
from tests.link.test_relay import DRILL, ORGANIC, toxic

APART = [("grpc.use_local_subchannel_pool", 1)]  # each channel its own connection


def _get(url: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _old_closed(answer: tuple[int, object]) -> bool:
    """The connections open at the toxic's start have closed (or the answer is no record: the test's asserts say)."""
    status, body = answer
    return status != 200 or all(r["closed_s"] is not None for r in body["connections"] if r["open_at_start"])


def test_the_connections_a_toxic_touched_with_their_streams_and_close_times():
    async def main():
        async with echo_server() as port:
            links = LinkSet()
            link = await links.add("t", "127.0.0.1:0", f"127.0.0.1:{port}")
            admin = await serve_admin(links, "127.0.0.1", 0)
            url = f"http://127.0.0.1:{admin.sockets[0].getsockname()[1]}/proxies/t/toxics/latency_downstream"
            address = f"127.0.0.1:{link.port}"
            try:
                old = aio.insecure_channel(address, options=[*BIG, *APART])
                for _ in range(2):
                    await unary(old)(b"x", metadata=ORGANIC, timeout=10)  # two streams before the toxic
                t0 = time.monotonic()  # before the toxic is set (the link's clock, this loop's): closed_s <= closed_by
                link.add_toxic(toxic("latency", latency=50))
                await unary(old)(b"x", metadata=DRILL, timeout=10)
                await unary(old)(b"x", metadata=ORGANIC, timeout=10)
                async with aio.insecure_channel(address, options=[*BIG, *APART]) as new:
                    for _ in range(3):
                        await unary(new)(b"x", metadata=DRILL, timeout=10)
                    await old.close()
                    # the link sees the old connection close as its next read ends (milliseconds): polled, 10 s for a
                    # busy box's stalls (a fixed 0.3 s is not, on a stalled box)
                    until = time.monotonic() + 10
                    while True:
                        during = await asyncio.to_thread(_get, url + "/connections")
                        closed_by = time.monotonic() - t0  # after the answer: the close it shows came before
                        if _old_closed(during):
                            break
                        assert time.monotonic() < until, f"the link saw no close of the old connection: {during}"
                        await asyncio.sleep(0.05)
                link.remove_toxic("latency_downstream")
                after = await asyncio.to_thread(_get, url + "/connections")
            finally:
                admin.close()
                await links.close()
            return during, closed_by, after

    (status, during), closed_by, after = asyncio.run(main())
    assert status == 200 and during["toxic"] == "latency_downstream" and during["left_off"] == 0
    old, new = sorted(during["connections"], key=lambda r: r["connection"])
    assert old["open_at_start"] is True and 0 <= old["began_s"] < new["began_s"]  # set on it at once
    assert old["streams_before"] == {"organic": 2, "drill": 0} and old["streams"] == {"organic": 3, "drill": 1}
    assert 0 < old["closed_s"] <= closed_by  # timed on the link's clock, after the toxic was set
    assert new["open_at_start"] is False and 0 < new["began_s"] < old["closed_s"]
    assert new["streams_before"] == {"organic": 0, "drill": 0} and new["streams"] == {"organic": 0, "drill": 3}
    assert new["closed_s"] is None  # open when asked
    assert after[0] == 404  # the record goes with the toxic
