"""The bytes the link's call faults read and write: header blocks that change no HPACK table, SETTINGS with a table
size of 0, trailers' status, gRPC message boundaries in DATA (harness.link.calls performs the faults with them).

Every block written here is literals without indexing and static-table indices (RFC 7541 §6.1, §6.2.2), no Huffman:
it changes neither side's dynamic table, so it may be inserted anywhere in a connection whose blocks stand alone.
"""

from __future__ import annotations

import struct

import grpc
from hpack.huffman_table import decode_huffman

from harness.core import headers as h
from harness.link import h2
from harness.link.hscan import HeaderScanner, HpackError, _integer

_STATUS_BY_VALUE = {code.value[0]: code for code in grpc.StatusCode}
_TIMEOUT_UNIT = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_STATUS_200 = b"\x88"  # `:status: 200`, static entry 8 (RFC 7541 Appendix A)
#: SETTINGS_MAX_FRAME_SIZE's floor (RFC 9113 §6.5.2): a frame the link rewrites never grows past what every peer takes
MIN_MAX_FRAME = 16384


def _int7(value: int) -> bytes:
    """An HPACK integer with a 7-bit prefix and the Huffman bit clear (RFC 7541 §5.1)."""
    if value < 0x7F:
        return bytes((value,))
    out, value = bytearray((0x7F,)), value - 0x7F
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: str, value: str) -> bytes:
    """One field as a literal without indexing, new name (RFC 7541 §6.2.2)."""
    n, v = name.encode(), value.encode()
    return b"\x00" + _int7(len(n)) + n + _int7(len(v)) + v


def percent(text: str) -> str:
    """grpc-message's percent-encoding (gRPC over HTTP/2: bytes outside 0x20-0x7E, and `%`)."""
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b != 0x25 else f"%{b:02X}" for b in text.encode())


_CONTENT_TYPE = literal("content-type", "application/grpc")


def response_headers(mode: str) -> bytes:
    """The response headers a fault sends (`@headers=sent`): `:status`, `content-type` and the marker."""
    return _STATUS_200 + _CONTENT_TYPE + literal(h.FAULT_MARKER, mode)


def trailers(code: grpc.StatusCode, details: str, mode: str, headers_out: bool, kept: bytes = b"") -> bytes:
    """The fault's status as trailers (trailers-only, with `:status` and `content-type`, unless headers went out);
    `kept`: the service's own trailers an `@served` fault keeps (`kept_trailers`)."""
    head = b"" if headers_out else _STATUS_200 + _CONTENT_TYPE
    return (head + literal("grpc-status", str(code.value[0])) + literal("grpc-message", percent(details))
            + kept + literal(h.FAULT_MARKER, mode))  # fmt: skip


def refusal(code: grpc.StatusCode, details: str) -> bytes:
    """A trailers-only answer of the link's own (the in-flight limit): `:status`, `content-type`, the status; no
    fault marker (no fault acted)."""
    status = literal("grpc-status", str(code.value[0]))
    return _STATUS_200 + _CONTENT_TYPE + status + literal("grpc-message", percent(details))


#: fields of a server's trailers its status owns (or the transport's): never kept beside a fault's status
_NOT_KEPT = frozenset({b"content-type", b"grpc-status", b"grpc-message", b"grpc-status-details-bin",
                       h.FAULT_MARKER.encode()})  # fmt: skip


def kept_trailers(block: list[bytes]) -> bytes:
    """The service's own trailers in its trailers block (`x-…` and the like: not its status, details, rich status or
    pseudo-headers), as literals that change no table, for a fault's answer to carry as the aio plane's does; b""
    when the block cannot be read alone (it names the dynamic table) or they would not fit one frame."""
    from hpack import Decoder  # only for an `@served` fault's answer: not on a passing call's path

    data = b"".join(fragment(f[3], f[4], f[9:])[1] for f in block)
    try:
        fields = Decoder().decode(data, raw=True)
    except Exception:  # noqa: BLE001 - hpack's errors: the block names entries a fresh table has not
        return b""
    out = b"".join(b"\x00" + _int7(len(k)) + k + _int7(len(v)) + v for k, v in fields
                   if k[:1] != b":" and k not in _NOT_KEPT)  # fmt: skip
    return out if len(out) <= MIN_MAX_FRAME // 2 else b""


def fragment(ftype: int, flags: int, payload: bytes) -> tuple[bytes, bytes]:
    """(what precedes the block in a HEADERS frame: its priority fields; the block fragment), padding dropped."""
    if ftype != h2.HEADERS:
        return b"", payload
    start, end = 0, len(payload)
    if flags & h2.PADDED and payload:
        start, end = 1, len(payload) - payload[0]
    head = b""
    if flags & h2.PRIORITY_FLAG:
        head, start = payload[start : start + 5], start + 5
    return head, payload[start:end]


def with_field(frame_bytes: bytes, field: bytes) -> bytes:
    """A HEADERS / CONTINUATION frame that ends its block, with one more field at the block's end (no padding)."""
    ftype, flags, stream = frame_bytes[3], frame_bytes[4], int.from_bytes(frame_bytes[5:9], "big")
    head, block = fragment(ftype, flags, frame_bytes[9:])
    payload = head + block + field
    if len(payload) > MIN_MAX_FRAME:
        return frame_bytes
    return h2.frame(ftype, flags & ~h2.PADDED, stream, payload)


def data_payload(frame_bytes: bytes) -> bytes:
    """A DATA frame's data, padding dropped."""
    payload = frame_bytes[9:]
    if frame_bytes[4] & h2.PADDED and payload:
        return payload[1 : len(payload) - payload[0]]
    return payload


_GRPC_STATUS = frozenset({b"grpc-status"})
#: the Huffman strings of servers' trailers, decoded once for every call's (bounded as a scanner's own cache is)
_STATUS_HUFFMAN: dict[bytes, bytes] = {}


#: "grpc-status" as a literal name: raw, and Huffman-coded (RFC 7541 Appendix B; a string has one Huffman code, its
#: padding the EOS prefix, so equal codes are equal names)
_NAME_RAW, _NAME_HUFFMAN = b"grpc-status", b"\x9a\xca\xc8\xb2\x124\xda\x8f"
_STATIC_LEN = 61


def _status_value(data: bytes) -> bytes | None:
    """grpc-status's value in a block that names no dynamic table entry (b"" when absent), reading no string but
    the names' codes and that value; None when the block names a dynamic entry or is cut short (`status` then reads
    it whole). No static entry is grpc-status, so an indexed name never is."""
    found, pos, n = b"", 0, len(data)
    try:
        while pos < n:
            b = data[pos]
            if b & 0x80:  # indexed field
                index, pos = _integer(data, pos, 7)
                if index > _STATIC_LEN:
                    return None
                continue
            if b & 0xE0 == 0x20:  # dynamic table size update
                _, pos = _integer(data, pos, 5)
                continue
            index, pos = _integer(data, pos, 6 if b & 0x40 else 4)
            if index > _STATIC_LEN:
                return None
            match = False
            if not index:
                huffman = data[pos] & 0x80
                length, pos = _integer(data, pos, 7)
                match = data[pos : pos + length] == (_NAME_HUFFMAN if huffman else _NAME_RAW)
                pos += length
            huffman = data[pos] & 0x80
            length, pos = _integer(data, pos, 7)
            if pos + length > n:
                return None
            if match:
                raw = data[pos : pos + length]
                found = raw if not huffman else _STATUS_HUFFMAN.get(raw) or _decoded(raw)
            pos += length
    except (IndexError, HpackError):
        return None
    return found


def _decoded(raw: bytes) -> bytes:
    if len(_STATUS_HUFFMAN) >= 4096:
        _STATUS_HUFFMAN.clear()
    value = _STATUS_HUFFMAN[raw] = decode_huffman(raw)
    return value


def status(block: list[bytes]) -> grpc.StatusCode:
    """The grpc-status of trailers, frame by frame (blocks that stand alone: read with a fresh table)."""
    data = b"".join(fragment(f[3], f[4], f[9:])[1] for f in block)
    try:
        value = _status_value(data)
        if value is None:
            value = HeaderScanner(_GRPC_STATUS, huffman_cache=_STATUS_HUFFMAN).scan(data).get(b"grpc-status", b"")
    except Exception:  # noqa: BLE001 - HpackError, a bad Huffman code: not a status
        return grpc.StatusCode.UNKNOWN
    return _STATUS_BY_VALUE.get(int(value), grpc.StatusCode.UNKNOWN) if value.isdigit() else grpc.StatusCode.UNKNOWN


def grpc_timeout(value: bytes | None) -> float | None:
    """`grpc-timeout` (up to 8 digits and a unit) in seconds, or None."""
    if not value or len(value) > 9 or not value[:-1].isdigit():
        return None
    unit = _TIMEOUT_UNIT.get(chr(value[-1]))
    return None if unit is None else int(value[:-1]) * unit


def settings_table_zero(data: bytes, first: bool) -> bytes:
    """A SETTINGS frame with SETTINGS_HEADER_TABLE_SIZE = 0 (added to a side's `first`: absent, it is 4,096)."""
    payload = data[9:]
    pairs = [struct.unpack_from(">HI", payload, i) for i in range(0, len(payload) - 5, 6)]
    out = [(k, 0 if k == h2.SETTINGS_HEADER_TABLE_SIZE else v) for k, v in pairs]
    if first and all(k != h2.SETTINGS_HEADER_TABLE_SIZE for k, _ in pairs):
        out.append((h2.SETTINGS_HEADER_TABLE_SIZE, 0))
    return h2.frame(h2.SETTINGS, data[4], 0, b"".join(struct.pack(">HI", k, v) for k, v in out))


def initial_window(data: bytes, current: int) -> int:
    """SETTINGS_INITIAL_WINDOW_SIZE in a SETTINGS frame, else `current`."""
    payload = data[9:]
    for i in range(0, len(payload) - 5, 6):
        key, value = struct.unpack_from(">HI", payload, i)
        if key == 0x4:
            current = value
    return current


def window_update(n: int, stream: int = 0) -> bytes:
    return h2.frame(h2.WINDOW_UPDATE, 0, stream, struct.pack(">I", n & h2.MAX_STREAM_ID))
