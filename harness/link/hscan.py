"""Reading a client's HPACK header blocks for one key, keeping the dynamic table exact, and no more (RFC 7541).

`hpack.Decoder` decodes every field of every block (each Huffman string, a log call per field): about
13 µs of CPU for a grpc-go unary call's block, against 1.5 µs here (9 fields, all indexed once the table
holds them; CPU time, best of 7 runs of 5,000 blocks). A relay needs less: which fields are named
the drill's keys (`x-tenant-id` and the like, or `baggage`) and their values, and the dynamic table kept exact for
the blocks to come. `HeaderScanner` walks a block's representations; it decodes a Huffman string only
where it must: a literal name (compared with the keys), a value that enters the dynamic table (an
entry's size counts decoded octets; repeated values come from a small cache), and the value of a key
asked for. A value that neither enters the table nor belongs to a key asked for is skipped undecoded.
The static table and the Huffman code are `hpack`'s. Tested against `hpack`'s own encoder and decoder
(tests/link/test_hscan.py): the same table, the same values.
"""

from __future__ import annotations

import functools
from collections import deque

from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

_STATIC = HeaderTable.STATIC_TABLE
_STATIC_LEN = len(_STATIC)
#: Huffman strings decoded, kept for their next use (cleared whole when full: a bound, not an LRU)
_CACHE_MAX = 4096


@functools.lru_cache(maxsize=64)
def _names_a_static_key(keys: frozenset[bytes]) -> bool:
    """Whether a static table entry is one of `keys` (asked once per set of keys, not per scanner)."""
    return any(name in keys for name, _ in _STATIC)


class HpackError(ValueError):
    """A block that is not valid HPACK (the connection is then read blind)."""


class HeaderScanner:
    """One direction's HPACK decoding context (the client's blocks, in order)."""

    def __init__(self, keys: frozenset[bytes], max_table_size: int = 1 << 20,
                 huffman_cache: dict[bytes, bytes] | None = None) -> None:  # fmt: skip
        """`huffman_cache`: a dict of decoded Huffman strings to share with other scanners (a string decodes alike
        in any context), e.g. across the many short-lived scanners that read one block each; else its own."""
        self.keys = keys
        self.max_allowed = max_table_size
        self.max_size = 4096  # SETTINGS_HEADER_TABLE_SIZE's default, until the encoder says otherwise
        self.size = 0
        self.table: deque[tuple[bytes, int]] = deque()  # (name, entry size), newest first
        self.values: deque[bytes | None] = deque()  # the entries' values where kept (a key's), else None
        self._huff: dict[bytes, bytes] = {} if huffman_cache is None else huffman_cache
        self._static_keys = _names_a_static_key(keys)
        #: the last block scanned used the dynamic table (named an entry in it, or left it in a state later blocks
        #: depend on: an entry kept, an eviction from a table that goes on), so a relay must not drop it
        #: (harness.link.calls). An entry added to a table of size 0 is evicted at once (RFC 7541 §4.4), and a size
        #: update to 0 empties the table for good while the encoder's limit is 0: such a block may be dropped (the
        #: peer's decoder then keeps entries the encoder will never name)
        self.touched = False

    def _string(self, data: bytes, pos: int, need: bool) -> tuple[bytes | None, int, int]:
        """A string literal at `pos`: (its octets if `need`, else None), its decoded length, the next position."""
        huffman = data[pos] & 0x80
        length, pos = _integer(data, pos, 7)
        end = pos + length
        if end > len(data):
            raise HpackError("string past the block's end")
        raw = data[pos:end]
        if not huffman:
            return raw, length, end
        if not need:
            return None, 0, end
        out = self._huff.get(raw)
        if out is None:
            try:
                out = decode_huffman(raw)
            except Exception as exc:  # noqa: BLE001 - hpack's HPACKDecodingError and kin
                raise HpackError(f"bad Huffman string: {exc}") from None
            if len(self._huff) >= _CACHE_MAX:
                self._huff.clear()
            self._huff[raw] = out
        return out, len(out), end

    def _entry(self, index: int) -> tuple[bytes, bytes | None]:
        if index <= 0:
            raise HpackError("index 0")
        if index <= _STATIC_LEN:
            name, value = _STATIC[index - 1]
            return name, value
        i = index - _STATIC_LEN - 1
        self.touched = True
        if i >= len(self.table):
            raise HpackError(f"index {index} past the table")
        return self.table[i][0], self.values[i]

    def _add(self, name: bytes, value: bytes | None, value_len: int) -> None:
        size = len(name) + value_len + 32
        changed = bool(self.table)
        self.table.appendleft((name, size))
        self.values.appendleft(value if name in self.keys else None)
        self.size += size
        self._shrink()
        if self.table or changed and self.max_size:  # added to a table of size 0: gone at once (RFC 7541 §4.4)
            self.touched = True

    def _shrink(self) -> None:
        while self.size > self.max_size and self.table:
            self.size -= self.table.pop()[1]
            self.values.pop()

    def scan(self, data: bytes) -> dict[bytes, bytes]:
        """One header block: {key: value} for the keys asked for that it carries (the last one of each)."""
        found: dict[bytes, bytes] = {}
        keys = self.keys
        self.touched = False
        n, pos = len(data), 0
        while pos < n:
            b = data[pos]
            if b & 0x80:  # indexed field (the common case: read inline)
                index = b & 0x7F
                if index == 0x7F:
                    index, pos = _integer(data, pos, 7)
                else:
                    pos += 1
                if index <= _STATIC_LEN and not self._static_keys:
                    if index == 0:
                        raise HpackError("index 0")
                    continue  # a static entry: never one of the keys asked for
                name, value = self._entry(index)
                if name in keys and value is not None:
                    found[name] = value
                continue
            if b & 0x40:  # literal with incremental indexing
                prefix, indexed = 6, True
            elif b & 0x20:  # dynamic table size update
                size, pos = _integer(data, pos, 5)
                if size > self.max_allowed:
                    raise HpackError(f"table size {size} above the allowed {self.max_allowed}")
                self.max_size = size
                if self.size > size and size:  # entries evicted from a table that goes on (to 0: none can be named)
                    self.touched = True
                self._shrink()
                continue
            else:  # literal without indexing / never indexed
                prefix, indexed = 4, False
            index, pos = _integer(data, pos, prefix)
            if index:
                name = self._entry(index)[0]
            else:
                name, _, pos = self._string(data, pos, True)
            want = name in keys
            if indexed and not self.max_size and not self.table:
                indexed = False  # a table of size 0 stays empty (RFC 7541 §4.4): the value's length is not needed
            value, value_len, pos = self._string(data, pos, want or indexed)
            if want and value is not None:
                found[name] = value
            if indexed:
                self._add(name, value, value_len)
        return found


def _integer(data: bytes, pos: int, prefix: int) -> tuple[int, int]:
    """An HPACK integer with an N-bit prefix at `pos`: (value, next position)."""
    mask = (1 << prefix) - 1
    value = data[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise HpackError("integer past the block's end or too large")
        b = data[pos]
        pos += 1
        value += (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos
