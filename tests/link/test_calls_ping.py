"""A delayed call's frames and the server's PING ACKs keep the order the server sent them in (harness.link.callops'
`_ack`).

Why it matters: grpc-go's server ends a connection with GOAWAY ENHANCE_YOUR_CALM `too_many_pings` once a client
pings twice more with no data sent between (its ping strikes), and grpc-go's client pings when data lands (its BDP
estimator). If the link let an ACK overtake the data the server sent before it, the client would ping again on that
data while the server has sent nothing new: at 2,000 calls/s with `delay` faults, grpc-go services closed busy
connections (docs/proxy.md). In order, as TCP keeps them, each ping answers data sent after the last one.

The client is HTTP/2 written by hand over a socket (hpack's encoder and decoder), so it pings exactly when the test
says: once the server has sent the whole delayed answer (the link holds its trailers; the test runs the link in its
own process and reads that from the link's calls), never earlier.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import hpack

from harness import protos
from harness.core.safety import EmergencyStop
from harness.core.settings import FaultSettings
from harness.link import h2
from harness.link.calls import LinkCalls
from harness.link.links import LinkSet
from tests.proxy.test_forward import probe, service  # noqa: F401 - fixtures

DELAY_MS = 600
PING = b"orderly!"


def _frame(ftype: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return h2.frame(ftype, flags, stream, payload)


def _read(sock: socket.socket, buf: bytearray) -> tuple[int, int, int, bytes]:
    """The next frame (type, flags, stream, payload)."""
    while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
        chunk = sock.recv(65536)
        assert chunk, "the connection closed"
        buf += chunk
    size = int.from_bytes(buf[:3], "big")
    frame = (buf[3], buf[4], int.from_bytes(buf[5:9], "big") & h2.MAX_STREAM_ID, bytes(buf[9 : 9 + size]))
    del buf[: 9 + size]
    return frame


def _settings(sock: socket.socket, enc: hpack.Encoder, payload: bytes) -> None:
    """The server's SETTINGS: the table size it allows (the link's 0) taken by `enc` (its next block starts with the
    size update), and acknowledged."""
    for i in range(0, len(payload), 6):
        key, value = struct.unpack_from(">HI", payload, i)
        if key == h2.SETTINGS_HEADER_TABLE_SIZE:
            enc.header_table_size = value
    sock.sendall(_frame(h2.SETTINGS, h2.ACK, 0))


def _client(port: int, body: bytes, answer_held) -> list[str]:
    """One delayed drill call, then a PING once the link holds the whole answer: what arrived, in order."""
    enc = hpack.Encoder()
    buf = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(h2.PREFACE + _frame(h2.SETTINGS, 0, 0))
        while True:  # the server's SETTINGS (the link's table size 0 in them): the request's block follows them
            ftype, flags, _, payload = _read(sock, buf)
            if ftype == h2.SETTINGS and not flags & h2.ACK:
                _settings(sock, enc, payload)
                break
        headers = [(":method", "POST"), (":scheme", "http"), (":path", "/probe.v1.Probe/Echo"),
                   (":authority", f"127.0.0.1:{port}"), ("content-type", "application/grpc"), ("te", "trailers"),
                   ("x-tenant-id", "tenant-drill"), ("x-fault", f"delay:{DELAY_MS}"),
                   ("x-request-id", "ping-1")]  # fmt: skip
        message = b"\x00" + struct.pack(">I", len(body)) + body
        request = _frame(h2.HEADERS, h2.END_HEADERS, 1, enc.encode(headers))
        sock.sendall(request + _frame(h2.DATA, h2.END_STREAM, 1, message))
        deadline = time.monotonic() + 10
        while not answer_held():  # the server sent it all: every frame of the answer is in the link's delay line
            assert time.monotonic() < deadline, "the link never held the answer"
            time.sleep(0.005)
        sock.sendall(_frame(h2.PING, 0, 0, PING))
        seen: list[str] = []
        while "ping ack" not in seen or "trailers" not in seen:
            ftype, flags, stream, payload = _read(sock, buf)
            assert ftype != h2.GOAWAY, payload
            if ftype == h2.PING and flags & h2.ACK and payload == PING:
                seen.append("ping ack")
            elif ftype == h2.PING and not flags & h2.ACK:
                sock.sendall(_frame(h2.PING, h2.ACK, 0, payload))
            elif ftype == h2.SETTINGS and not flags & h2.ACK:
                sock.sendall(_frame(h2.SETTINGS, h2.ACK, 0))
            elif stream == 1 and ftype in (h2.HEADERS, h2.DATA):
                seen.append("trailers" if ftype == h2.HEADERS and flags & h2.END_STREAM else
                            "headers" if ftype == h2.HEADERS else "data")  # fmt: skip
    return seen


def test_a_ping_ack_never_overtakes_the_answer_the_server_sent_before_it(service, probe):  # noqa: F811
    _, ds, msg, _ = probe
    kinds = protos.from_descriptor_set(str(ds), option="--descriptor-set").kinds()

    async def main():
        calls = LinkCalls(FaultSettings(enabled=True, service="lc-ping"), kinds=kinds, stop=EmergencyStop())
        links = LinkSet(calls=calls)
        link = await links.add("t", "127.0.0.1:0", service)

        def answer_held() -> bool:  # read across threads: a snapshot of the link's faulted calls
            return any(ends is not None for conn in list(calls.conns) for call in list(conn.calls.values())
                       for _, _, ends in list(call.line))  # fmt: skip

        try:
            return await asyncio.to_thread(_client, link.port, msg(id="ping-1").SerializeToString(), answer_held)
        finally:
            await links.close()

    started = time.monotonic()
    seen = asyncio.run(main())
    # the whole answer (headers, its message, its trailers) went first, then the ACK of the ping sent after it
    assert seen == ["headers", "data", "trailers", "ping ack"]
    assert time.monotonic() - started >= DELAY_MS / 1000  # the answer was delayed (so the ACK waited for it)
