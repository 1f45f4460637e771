"""Container healthcheck: one standard gRPC health Check (`grpc.health.v1.Health/Check`) on HOST:PORT.

    python3 -I -S /app/compose/grpc_health_probe.py 127.0.0.1:50051 [SERVICE] [--timeout S]

Exit 0 only when the server answers SERVING; 1 on NOT_SERVING, UNKNOWN, an error status (no health
service, unknown SERVICE), a refused or reset connection, or no answer within the timeout (2 s).

Why not grpcio: a healthcheck runs every 2 s in every hop. Importing grpc and the generated health
stubs costs ~0.2 s of CPU per check; this client uses the standard library only and runs with `-I -S`
(no site-packages, no user paths), so a check is an interpreter start and one TCP round trip
(benchmarks/healthcheck_cost.py measures both). It speaks just enough cleartext HTTP/2 (prior
knowledge, RFC 9113 §3.3) for one unary call, like grpc_health_probe: the connection preface and
SETTINGS (acknowledged), one HEADERS frame (HPACK literals, no Huffman, no indexing) and one DATA
frame carrying the request, then it reads frames until the stream ends, answering PING and SETTINGS.

The verdict comes from the reply message, a `HealthCheckResponse` whose field 1 (`status`) is
SERVING = 1, and the trailers' `grpc-status`: an error status fails the check even after a message
(grpcio's health service answers an unknown SERVICE with an empty message and NOT_FOUND). The
header decoder is minimal HPACK (the dynamic table, no Huffman: grpc's C core sends these
trailers as plain literals); a Huffman-coded `grpc-status` is not read, and then the message
alone decides.
"""

from __future__ import annotations

import _socket  # the C module: `socket` would import enum, selectors and collections (~15 ms of a check)
import sys
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
STREAM = 1
#: grpc.health.v1.HealthCheckResponse.ServingStatus
STATUS_NAMES = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
#: grpc-status codes a failure may name
CODE_NAMES = {
    "1": "CANCELLED", "2": "UNKNOWN", "3": "INVALID_ARGUMENT", "4": "DEADLINE_EXCEEDED", "5": "NOT_FOUND",
    "7": "PERMISSION_DENIED", "8": "RESOURCE_EXHAUSTED", "12": "UNIMPLEMENTED", "13": "INTERNAL",
    "14": "UNAVAILABLE", "16": "UNAUTHENTICATED",
}  # fmt: skip
HPACK_TABLE_SIZE = 4096  # SETTINGS_HEADER_TABLE_SIZE default (RFC 7541 §4.2); we never announce another


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload


def hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """RFC 7541 §5.1 integer with an N-bit prefix; `first` holds the representation's flag bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out, value = [first | limit], value - limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    return bytes((*out, value))


def hpack_literal(name_index: int, name: str, value: str) -> bytes:
    """Literal header field without indexing (§6.2.2): an indexed name, else a literal one; no Huffman."""
    out = hpack_int(name_index, 4)
    if not name_index:
        out += hpack_int(len(name), 7) + name.encode()
    return out + hpack_int(len(value.encode()), 7) + value.encode()


def request_headers(authority: str) -> bytes:
    return (
        b"\x83\x86"  # :method POST, :scheme http (static table 3 and 6, indexed)
        + hpack_literal(4, ":path", "/grpc.health.v1.Health/Check")
        + hpack_literal(1, ":authority", authority)
        + hpack_literal(31, "content-type", "application/grpc")
        + hpack_literal(0, "te", "trailers")
        + hpack_literal(0, "user-agent", "drill-grpc-health-probe")
    )


def grpc_message(service: str) -> bytes:
    """A length-prefixed, uncompressed `HealthCheckRequest{service}` (field 1, a string)."""
    body = b"" if not service else b"\x0a" + hpack_varint(len(service.encode())) + service.encode()
    return b"\x00" + len(body).to_bytes(4, "big") + body


def hpack_varint(value: int) -> bytes:
    """A protobuf base-128 varint."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def serving_status(message: bytes) -> int:
    """Field 1 (`status`, a varint) of a `HealthCheckResponse`; 0 (UNKNOWN) when absent."""
    i, status = 0, 0
    while i < len(message):
        key, i = _varint(message, i)
        wire = key & 7
        if wire == 0:
            value, i = _varint(message, i)
            if key >> 3 == 1:
                status = value
        elif wire == 2:
            size, i = _varint(message, i)
            i += size
        elif wire == 5:
            i += 4
        elif wire == 1:
            i += 8
        else:
            raise ValueError("malformed HealthCheckResponse")
    return status


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        b = data[i]
        value |= (b & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not b & 0x80:
            return value, i


class HeaderReader:
    """Just enough HPACK decoding to find `grpc-status` / `grpc-message` in a header block.

    Tracks the dynamic table (a later block may refer to an entry an earlier one added);
    Huffman-coded strings are skipped (kept as None): a failure message may then lack its code.
    """

    def __init__(self) -> None:
        self.table: list[tuple[bytes | None, bytes | None]] = []  # newest first
        self.sizes: list[int] = []
        self.max_size = HPACK_TABLE_SIZE

    def _string(self, data: bytes, i: int) -> tuple[bytes | None, int]:
        huffman = data[i] & 0x80
        size, i = _hpack_int(data, i, 7)
        raw = data[i : i + size]
        return (None if huffman else raw), i + size

    def _entry(self, index: int) -> tuple[bytes | None, bytes | None]:
        if index <= 61:  # static table: no grpc-* names, values irrelevant here
            return None, None
        if index - 62 >= len(self.table):
            raise ValueError("HPACK index out of range")
        return self.table[index - 62]

    def _add(self, name: bytes | None, value: bytes | None, size: int) -> None:
        self.table.insert(0, (name, value))
        self.sizes.insert(0, size)
        self._evict()

    def _evict(self) -> None:
        while self.sizes and sum(self.sizes) > self.max_size:
            self.table.pop()
            self.sizes.pop()

    def read(self, block: bytes) -> dict[bytes, bytes]:
        out: dict[bytes, bytes] = {}
        i = 0
        while i < len(block):
            b = block[i]
            if b & 0x80:  # indexed field
                index, i = _hpack_int(block, i, 7)
                name, value = self._entry(index)
            elif b & 0xE0 == 0x20:  # dynamic table size update
                self.max_size, i = _hpack_int(block, i, 5)
                self._evict()
                continue
            else:  # literal: with incremental indexing (01), without (0000) or never indexed (0001)
                incremental = b & 0xC0 == 0x40
                index, i = _hpack_int(block, i, 6 if incremental else 4)
                if index:
                    name, _ = self._entry(index)
                    name_size = 0 if name is None else len(name)
                else:
                    name, i = self._string(block, i)
                    name_size = len(name or b"")
                value, i = self._string(block, i)
                if incremental:
                    self._add(name, value, name_size + len(value or b"") + 32)
            if name is not None and value is not None:
                out[name] = value
        return out


def _hpack_int(data: bytes, i: int, prefix_bits: int) -> tuple[int, int]:
    limit = (1 << prefix_bits) - 1
    value = data[i] & limit
    i += 1
    if value < limit:
        return value, i
    shift = 0
    while True:
        b = data[i]
        value += (b & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not b & 0x80:
            return value, i


class Connection:
    """One cleartext HTTP/2 connection, read frame by frame against a deadline."""

    def __init__(self, sock: _socket.socket, deadline: float) -> None:
        self.sock, self.deadline, self.buf = sock, deadline, b""

    def _recv(self, n: int) -> bytes:
        while len(self.buf) < n:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer in time")
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by the server")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_frame(self) -> tuple[int, int, int, bytes]:
        head = self._recv(9)
        size = int.from_bytes(head[:3], "big")
        kind, flags = head[3], head[4]
        stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        return kind, flags, stream, self._recv(size)


def _unpad(kind: int, flags: int, payload: bytes) -> bytes:
    if flags & PADDED:
        pad = payload[0]
        payload = payload[1 : len(payload) - pad]
    if kind == HEADERS and flags & PRIORITY:
        payload = payload[5:]
    return payload


def check(target: str, service: str = "", timeout_s: float = 2.0) -> tuple[bool, str]:
    """(serving, one line saying what the server answered) for one health Check on `target`."""
    host, _, port = target.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    deadline = time.monotonic() + timeout_s
    try:
        sock = connect(host, int(port), deadline)
        try:
            sock.sendall(
                PREFACE
                + frame(SETTINGS, 0, 0)
                + frame(HEADERS, END_HEADERS, STREAM, request_headers(target))
                + frame(DATA, END_STREAM, STREAM, grpc_message(service))
            )
            return _read_reply(Connection(sock, deadline), target)
        finally:
            sock.close()
    except (OSError, ValueError, IndexError) as exc:  # refused, reset, timed out, malformed
        return False, f"{target}: {type(exc).__name__}: {exc}"


def connect(host: str, port: int, deadline: float) -> _socket.socket:
    """A TCP connection to the first address of `host` that accepts one (as socket.create_connection)."""
    error: OSError = OSError(f"{host}: no address")
    # bytes: a str host would be IDNA-encoded, importing encodings.idna and re (~14 ms of a check)
    for family, kind, proto, _, address in _socket.getaddrinfo(host.encode(), port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.connect(address)
            sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error


def _read_reply(conn: Connection, target: str) -> tuple[bool, str]:
    headers = HeaderReader()
    data, fields, block = b"", {}, b""
    while True:
        kind, flags, stream, payload = conn.read_frame()
        if kind == SETTINGS and not flags & ACK:
            conn.sock.sendall(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            conn.sock.sendall(frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            return False, f"{target}: connection closed (GOAWAY) before an answer"
        elif stream != STREAM:
            continue  # WINDOW_UPDATE and the like
        elif kind == RST_STREAM:
            return False, f"{target}: stream reset (HTTP/2 error {int.from_bytes(payload[:4], 'big')})"
        elif kind in (HEADERS, 0x9):  # HEADERS, CONTINUATION
            block += _unpad(kind, flags, payload)
            if flags & END_HEADERS:
                fields.update(headers.read(block))
                block = b""
        elif kind == DATA:
            data += _unpad(kind, flags, payload)
        if stream == STREAM and flags & END_STREAM and kind in (HEADERS, DATA) and not block:
            break
    code = fields.get(b"grpc-status", b"").decode()
    why = fields.get(b"grpc-message", b"").decode(errors="replace")
    if code not in ("", "0"):  # an error status, whatever message came before it
        return False, f"{target}: {CODE_NAMES.get(code, 'grpc-status ' + code)}" + (f" {why}" if why else "")
    if len(data) < 5 or data[0] != 0:
        return False, f"{target}: no reply message"
    status = serving_status(data[5 : 5 + int.from_bytes(data[1:5], "big")])
    return status == 1, f"{target}: {STATUS_NAMES.get(status, status)}"


def main(argv: list[str]) -> int:
    args = list(argv[1:])
    timeout_s = 2.0
    if "--timeout" in args:
        at = args.index("--timeout")
        timeout_s = float(args[at + 1])
        del args[at : at + 2]
    target = args[0] if args else "127.0.0.1:50051"
    service = args[1] if len(args) > 1 else ""
    serving, line = check(target, service, timeout_s)
    print(line, file=sys.stdout if serving else sys.stderr)
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
