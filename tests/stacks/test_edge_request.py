"""A stack edge's request that does not fit its message names the fields as the .proto writes them.

protobuf's JSON parser lists a message's fields by their JSON names (`amountCents`) when a key is unknown; the
user wrote the .proto, where the field is `amount_cents`, and the request takes either spelling. The edge's
error (`stack.edge.request`, `--drill-request` for Locust: the same resolver) lists the names as written.
"""

from __future__ import annotations

import pytest

from harness.core.errors import BadInput
from harness.drills.stack import edge

PROTO = """syntax = "proto3";
package pay.v1;
message Card { string holder_name = 1; }
message Charge { int64 amount_cents = 1; string note_text = 2; Card card = 3; }
message Receipt { string id = 1; }
service Pay {
  rpc Take(Charge) returns (Receipt);
  rpc Batch(stream Charge) returns (Receipt);
}
"""


@pytest.fixture
def proto(tmp_path) -> str:
    path = tmp_path / "pay.proto"
    path.write_text(PROTO)
    return str(path)


def refusal(proto: str, method: str, request) -> str:
    spec = edge.MethodSpec(address="127.0.0.1:1", method=f"pay.v1.Pay/{method}", request=request, proto=proto)
    with pytest.raises(BadInput) as err:
        edge.resolve_call(spec)
    return str(err.value)


def test_an_unknown_key_lists_the_messages_fields_as_the_proto_writes_them(proto):
    said = refusal(proto, "Take", {"amountCent": 5})
    assert said.startswith("stack.edge.request does not fit pay.v1.Charge: ") and "\n" not in said, said
    assert 'has no field named "amountCent"' in said
    assert said.endswith("Available Fields(except extensions): amount_cents, note_text, card"), said
    assert "amountCents" not in said and "noteText" not in said


def test_a_nested_messages_unknown_key_lists_that_messages_fields(proto):
    said = refusal(proto, "Take", {"amount_cents": 5, "card": {"holderNam": "x"}})
    assert 'Message type "pay.v1.Card" has no field named "holderNam" at "Charge.card"' in said, said
    assert "Available Fields(except extensions): holder_name" in said and "holderName" not in said, said


def test_each_message_of_a_client_stream_is_named_by_its_index(proto):
    said = refusal(proto, "Batch", [{"amount_cents": 1}, {"amountCent": 2}])
    assert said.startswith("stack.edge.request[1] does not fit pay.v1.Charge: "), said
    assert said.endswith("Available Fields(except extensions): amount_cents, note_text, card"), said


def test_either_spelling_of_a_field_is_taken_alike(proto):
    def body(request) -> bytes:
        spec = edge.MethodSpec(address="127.0.0.1:1", method="pay.v1.Pay/Take", request=request, proto=proto)
        return edge.resolve_call(spec).request("id")

    assert body({"amount_cents": 250, "note_text": "a"}) == body({"amountCents": 250, "noteText": "a"}) != b""
