"""The link plane's in-flight limit holds for a connection's first header blocks too (harness.link.calls `_refuse`).

A block sent before the link's SETTINGS_HEADER_TABLE_SIZE=0 reached the client may use the HPACK dynamic table, so
it must reach the server's decoder. Past the limit such a stream is still refused: the caller gets
RESOURCE_EXHAUSTED at once, the block goes on with RST_STREAM CANCEL right behind it, and none of the request's
messages follows, so the service never handles the call (the Go probe's own record says so). Before, the block and
its call passed the limit: a burst of new connections could each carry one call past it.

The client is HTTP/2 written by hand (hpack's encoder indexes its fields: its first block uses the table), sending
its first request with its preface, before it reads anything.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import hpack
from grpc import aio

from harness import protos
from harness.core.settings import FaultSettings
from harness.link import h2
from harness.link.plane import start_plane
from tests.link.test_calls_ping import _frame, _read, _settings
from tests.proxy.probe import SERVICE
from tests.proxy.test_forward import probe, seen, service  # noqa: F401 - fixtures


def _request(enc: hpack.Encoder, stream: int, port: int, body: bytes) -> bytes:
    headers = [(":method", "POST"), (":scheme", "http"), (":path", SERVICE + "Echo"),
               (":authority", f"127.0.0.1:{port}"), ("content-type", "application/grpc"),
               ("te", "trailers")]  # fmt: skip
    message = b"\x00" + struct.pack(">I", len(body)) + body
    block = _frame(h2.HEADERS, h2.END_HEADERS, stream, enc.encode(headers))
    return block + _frame(h2.DATA, h2.END_STREAM, stream, message)


def _client(port: int, over: bytes, after: bytes, release) -> dict[int, dict]:
    """Stream 1 with the preface (the limit full); once it is answered, `release()` frees the limit and stream 3
    follows on the same connection: what each stream's header blocks said, decoded in order by one decoder."""
    enc, dec = hpack.Encoder(), hpack.Decoder()
    out: dict[int, dict] = {}
    buf = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(h2.PREFACE + _frame(h2.SETTINGS, 0, 0) + _request(enc, 1, port, over))
        while not out.get(3, {}).get("ended"):
            ftype, flags, stream, payload = _read(sock, buf)
            assert ftype != h2.GOAWAY, payload
            if ftype == h2.SETTINGS and not flags & h2.ACK:
                _settings(sock, enc, payload)
            elif ftype == h2.PING and not flags & h2.ACK:
                sock.sendall(_frame(h2.PING, h2.ACK, 0, payload))
            elif ftype == h2.HEADERS:
                assert flags & h2.END_HEADERS
                out.setdefault(stream, {}).update(dict(dec.decode(payload)), ended=bool(flags & h2.END_STREAM))
                if stream == 1 and flags & h2.END_STREAM:
                    release()
                    sock.sendall(_request(enc, 3, port, after))
    return out


def test_a_first_block_past_the_limit_is_refused_and_the_service_never_handles_its_call(service, probe):  # noqa: F811
    _, ds, msg, _ = probe
    kinds = protos.from_descriptor_set(str(ds), option="--descriptor-set").kinds()

    async def main():
        links, port = await start_plane(service, settings=FaultSettings(service="limit-first", max_in_flight=1),
                                        method_kinds=kinds, metrics=False)  # fmt: skip
        calls = links.calls
        loop = asyncio.get_running_loop()
        async with aio.insecure_channel(f"127.0.0.1:{port}") as channel, aio.insecure_channel(service) as direct:
            held = asyncio.ensure_future(channel.unary_unary(SERVICE + "Echo")(
                msg(id="lim-held", mode="hold").SerializeToString(), timeout=30))  # fmt: skip
            for _ in range(500):  # the link counts it in flight (at most 10 s)
                if calls.in_flight == 1:
                    break
                await asyncio.sleep(0.02)
            assert calls.in_flight == 1

            def release() -> None:  # on the client's thread: the held call cancelled, the limit free again
                asyncio.run_coroutine_threadsafe(_cancel(held), loop).result(10)
                deadline = time.monotonic() + 10
                while calls.in_flight:
                    assert time.monotonic() < deadline, "the held call never ended on the link"
                    time.sleep(0.01)

            try:
                out = await asyncio.to_thread(_client, port, msg(id="lim-over").SerializeToString(),
                                              msg(id="lim-after").SerializeToString(), release)  # fmt: skip
            finally:
                await links.close()
            return out, await seen(direct, msg, "lim-over"), await seen(direct, msg, "lim-after")

    out, over, after = asyncio.run(main())
    assert (out[1]["grpc-status"], out[1]["grpc-message"]) == ("8", "drill: in-flight limit 1 reached")
    assert over == []  # its block reached the probe's decoder, never its message: no call handled
    # the next block on the connection decoded in step (the table kept in sync by the block that went on), and its
    # call was served once the limit had room
    assert out[3]["grpc-status"] == "0" and after == ["answered"]


async def _cancel(task: asyncio.Future) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
