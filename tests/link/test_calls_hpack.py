"""HPACK and the link's call faults: a block is cut only when it decodes alone (harness.link.hscan's `touched`), and a
client that sends its first request before the link's SETTINGS reached it (its block then uses the dynamic table)
gets that call faulted all the same (the block goes on to the service, the stream reset right behind it), the next
ones faulted, and a connection that never desyncs.

The client here is HTTP/2 written by hand over a socket (hpack's own encoder and decoder), so it can do what grpc
clients do not: send its first request in the same write as its preface, before it reads anything.
"""

from __future__ import annotations

import asyncio
import socket
import struct

import hpack

from harness.core.safety import EmergencyStop
from harness.core.settings import FaultSettings
from harness.link import h2
from harness.link.calls import LinkCalls
from harness.link.hscan import HeaderScanner
from harness.link.links import LinkSet
from tests.link.echo import SERVICE, echo_server

KEYS = frozenset({b"x-tenant-id"})


def test_touched_says_whether_a_block_used_the_dynamic_table():
    enc, scan = hpack.Encoder(), HeaderScanner(KEYS)
    scan.scan(enc.encode([(b"x-tenant-id", b"t")]))  # a literal with incremental indexing: an entry added
    assert scan.touched
    scan.scan(enc.encode([(b"x-tenant-id", b"t")]))  # the same field: now an index into the dynamic table
    assert scan.touched
    enc.header_table_size = 100
    scan.scan(enc.encode([(b"x-other", b"v" * 60)]))  # an entry that evicts the older one from a table that goes on
    assert scan.touched and len(scan.table) == 1
    enc.header_table_size = 0
    scan.scan(enc.encode([(b"x-other", b"v")]))  # a size update to 0: the table empty for good, nothing to name
    assert not scan.touched and len(scan.table) == 0
    for _ in range(2):  # table size 0: entries added are evicted at once (RFC 7541 §4.4), nothing to depend on
        found = scan.scan(enc.encode([(b"x-tenant-id", b"t"), (b":path", b"/a/b")]))
        assert not scan.touched and found == {b"x-tenant-id": b"t"}


def _frame(ftype: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return h2.frame(ftype, flags, stream, payload)


def _request(enc: hpack.Encoder, stream: int, port: int, extra: list) -> bytes:
    headers = [(":method", "POST"), (":scheme", "http"), (":path", SERVICE + "Unary"),
               (":authority", f"127.0.0.1:{port}"), ("content-type", "application/grpc"), ("te", "trailers"),
               *extra]  # fmt: skip
    message = b"\x00" + struct.pack(">I", 2) + b"hi"
    return (_frame(h2.HEADERS, h2.END_HEADERS, stream, enc.encode(headers))
            + _frame(h2.DATA, h2.END_STREAM, stream, message))  # fmt: skip


def _client(port: int) -> list[dict]:
    """Three calls on one connection, the first sent with the preface before anything is read: for each, what the
    server's (or the link's) header blocks said, decoded in order by one decoder."""
    enc, dec = hpack.Encoder(), hpack.Decoder()
    drill = [("x-tenant-id", "tenant-drill"), ("x-fault", "abort:UNAVAILABLE"), ("x-request-id", "r")]
    out: dict[int, dict] = {}
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(h2.PREFACE + _frame(h2.SETTINGS, 0, 0) + _request(enc, 1, port, drill))
        buf, sent = b"", {1}
        while len([s for s in out.values() if s.get("ended")]) < 3:
            while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
                chunk = sock.recv(65536)
                assert chunk, "the connection closed"
                buf += chunk
            size = int.from_bytes(buf[:3], "big")
            ftype, flags, stream, payload = buf[3], buf[4], int.from_bytes(buf[5:9], "big"), buf[9 : 9 + size]
            buf = buf[9 + size :]
            assert ftype != h2.GOAWAY, payload
            if ftype == h2.SETTINGS and not flags & h2.ACK:
                for i in range(0, len(payload), 6):
                    key, value = struct.unpack_from(">HI", payload, i)
                    if key == h2.SETTINGS_HEADER_TABLE_SIZE:
                        enc.header_table_size = value  # its next block starts with the size update
                sock.sendall(_frame(h2.SETTINGS, h2.ACK, 0))
            elif ftype == h2.PING and not flags & h2.ACK:
                sock.sendall(_frame(h2.PING, h2.ACK, 0, payload))
            elif ftype == h2.HEADERS:
                assert flags & h2.END_HEADERS
                fields = dict(dec.decode(payload[5:] if flags & h2.PRIORITY_FLAG else payload))
                out.setdefault(stream, {}).update(fields, ended=bool(flags & h2.END_STREAM))
                if stream == 1 and flags & h2.END_STREAM:  # the next two: standalone now
                    sock.sendall(_request(enc, 3, port, drill) + _request(enc, 5, port, [("x-request-id", "o")]))
                    sent |= {3, 5}
    return [out[s] for s in (1, 3, 5)]


def test_a_fault_on_a_block_sent_before_the_links_settings_resets_it_behind_the_block_in_sync(caplog):
    async def main():
        async with echo_server() as port:
            calls = LinkCalls(FaultSettings(enabled=True, service="lc-early"), stop=EmergencyStop())
            links = LinkSet(calls=calls)
            link = await links.add("t", "127.0.0.1:0", f"127.0.0.1:{port}")
            try:
                return await asyncio.to_thread(_client, link.port)
            finally:
                await links.close()

    first, second, organic = asyncio.run(main())
    # the first block used the table (hpack's encoder indexes at 4,096): it went on to the service (its decoder needs
    # it) and the stream was reset behind it; the caller got the fault as from a stream the service never saw
    assert (first.get("grpc-status"), first.get("x-drill-fault")) == ("14", "abort")
    assert any("reset right behind it" in r.getMessage() for r in caplog.records)
    # once the encoder took the table size 0, the same directive acts (the stream cut whole); an organic call after
    # it is served: the service's decoder and the client's stayed in step with their encoders throughout
    assert (second.get("grpc-status"), second.get("x-drill-fault")) == ("14", "abort")
    assert organic.get("grpc-status") == "0"
