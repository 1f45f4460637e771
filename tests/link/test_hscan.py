"""The link's HPACK reader (harness.link.hscan) against `hpack`'s own encoder and decoder: over many blocks in order,
with Huffman or raw strings, indexed and never-indexed fields and table size changes, it finds the same values for
its keys and keeps the same dynamic table (names and sizes), block after block."""

from __future__ import annotations

import hpack
import pytest
from hpack import NeverIndexedHeaderTuple
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.link.hscan import HeaderScanner, HpackError

KEY = b"x-tenant-id"
names = st.sampled_from([b"x-tenant-id", b"x-request-id", b"grpc-timeout", b"te", b"user-agent", b"x-other",
                         b":path", b"content-type"])  # fmt: skip
values = st.binary(min_size=0, max_size=40)
field = st.tuples(names, values, st.booleans())  # (name, value, never indexed)
block = st.tuples(st.lists(field, max_size=12), st.booleans(), st.one_of(st.none(), st.integers(0, 600)))


@settings(max_examples=150, deadline=None)
@given(st.lists(block, min_size=1, max_size=12))
def test_same_values_and_same_table_as_hpack_block_after_block(blocks):
    enc, dec, scan = hpack.Encoder(), hpack.Decoder(), HeaderScanner(frozenset({KEY}))
    dec.max_header_list_size = 1 << 24
    for fields, huffman, table_size in blocks:
        if table_size is not None:
            enc.header_table_size = table_size  # the next block starts with a size update
        headers = [NeverIndexedHeaderTuple(n, v) if never else (n, v) for n, v, never in fields]
        data = enc.encode(headers, huffman=huffman)
        expected = [v for n, v in dec.decode(data, raw=True) if n == KEY]
        found = scan.scan(data)
        assert found.get(KEY) == (expected[-1] if expected else None)
        table = [(n, len(n) + len(v) + 32) for n, v in dec.header_table.dynamic_entries]
        assert list(scan.table) == table and scan.size == dec.header_table._current_size


def test_a_block_that_is_not_hpack_is_refused_not_misread():
    scan = HeaderScanner(frozenset({KEY}))
    with pytest.raises(HpackError):
        scan.scan(b"\xff\xff\xff\xff")  # an index far past any table
    with pytest.raises(HpackError):
        scan.scan(b"\x40\x85ab")  # a string longer than the block
