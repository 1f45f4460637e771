"""The status a link-plane hop records for a passing call is the grpc-status its server wrote: `hblock.status` reads
it from the trailers without decoding what it does not need, and agrees with a full HPACK decoder (python-hyper's
`hpack`) on every form an encoder may write, falling back to a full read where a block names the dynamic table."""

from __future__ import annotations

import grpc
import pytest
from hpack import Encoder
from hpack.struct import NeverIndexedHeaderTuple

from harness.link import h2
from harness.link import hblock as hb


def _frames(block: bytes, split: int | None = None) -> list[bytes]:
    if split is None:
        return [h2.frame(h2.HEADERS, h2.END_STREAM | h2.END_HEADERS, 1, block)]
    return [h2.frame(h2.HEADERS, h2.END_STREAM, 1, block[:split]),
            h2.frame(h2.CONTINUATION, h2.END_HEADERS, 1, block[split:])]  # fmt: skip


@pytest.mark.parametrize("huffman", [True, False])
@pytest.mark.parametrize("table", [0, 4096])
@pytest.mark.parametrize("code", [grpc.StatusCode.OK, grpc.StatusCode.FAILED_PRECONDITION,
                                  grpc.StatusCode.UNAUTHENTICATED])  # fmt: skip
def test_the_status_is_the_one_a_full_decoder_reads_in_every_form(huffman, table, code):
    enc = Encoder()
    enc.header_table_size = table
    value = str(code.value[0])
    headers = [("x-trailer", "grpc-status"), ("grpc-status", value), ("grpc-message", "grpc-status: 0 and more")]
    first = enc.encode(headers, huffman=huffman)
    # the same trailers again on the same connection: with a table, they now name its entries (a full read)
    again = enc.encode(headers, huffman=huffman)
    never = Encoder()
    never.header_table_size = table
    hidden = never.encode([NeverIndexedHeaderTuple("grpc-status", value)], huffman=huffman)
    for block in (first, hidden):
        assert hb.status(_frames(block)) is code
        assert hb.status(_frames(block, split=len(block) // 2)) is code
    if table:
        assert hb._status_value(again) is None  # it names the dynamic table: read whole, with the first block's
    else:
        assert hb.status(_frames(again)) is code


def test_trailers_without_a_status_or_cut_short_are_unknown():
    enc = Encoder()
    enc.header_table_size = 0
    assert hb.status(_frames(enc.encode([("x-a", "b")]))) is grpc.StatusCode.UNKNOWN
    whole = enc.encode([("grpc-status", "5")], huffman=False)
    assert hb.status(_frames(whole)) is grpc.StatusCode.NOT_FOUND
    assert hb.status(_frames(whole[:-1])) is grpc.StatusCode.UNKNOWN
