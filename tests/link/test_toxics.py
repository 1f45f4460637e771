"""A toxic as Toxiproxy's JSON (harness.link.toxics) and the seeded draw (harness.link.draw)."""

from __future__ import annotations

import math

import pytest

from harness.link import draw
from harness.link.toxics import ToxicError, parse_toxic, update_toxic


def test_defaults_are_toxiproxys():
    t = parse_toxic({"type": "latency", "attributes": {"latency": 5}})
    assert t.to_json() == {"name": "latency_downstream", "type": "latency", "stream": "downstream",
                           "toxicity": 1.0, "attributes": {"latency": 5, "jitter": 0}, "drill_only": False}  # fmt: skip


@pytest.mark.parametrize("body, status, words", [
    ({"type": "nope"}, 400, "invalid toxic type"),
    ({"type": "latency", "stream": "sideways"}, 400, "stream was invalid"),
    ({"type": "latency", "attributes": {"latency": -1}}, 400, "bad attribute latency"),
    ({"type": "latency", "attributes": {"latency": 1.5}}, 400, "not an integer"),
    ({"type": "latency", "attributes": {"latency": True}}, 400, "not an integer"),
    ({"type": "latency", "attributes": {"latncy": 5}}, 400, "bad attribute latncy"),
    ({"type": "latency", "attributes": {"latency": 10**9}}, 400, "bad attribute latency"),
    ({"type": "latency", "toxicity": 1.5}, 400, "bad toxicity"),
    ({"type": "rst_stream", "attributes": {"code": "NOT_A_CODE"}}, 400, "bad attribute code"),
    ([], 400, "bad request body"),
    ({"type": "latency", "drill_only": "yes"}, 400, "bad drill_only"),
    ({"type": "connect", "drill_only": True}, 400, "bad drill_only"),
])  # fmt: skip
def test_bad_input_is_refused_with_toxiproxys_status(body, status, words):
    with pytest.raises(ToxicError) as err:
        parse_toxic(body)
    assert err.value.status == status and words in str(err.value)


def test_update_merges_attributes_and_keeps_the_rest():
    t = parse_toxic({"name": "lat", "type": "latency", "stream": "upstream", "attributes": {"latency": 5}})
    u = update_toxic(t, {"attributes": {"jitter": 2}, "toxicity": 0.5})
    assert (u.name, u.stream, u.toxicity, dict(u.attributes)) == ("lat", "upstream", 0.5, {"latency": 5, "jitter": 2})
    with pytest.raises(ToxicError):
        update_toxic(t, {"attributes": {"jitter": -2}})


def test_the_draw_is_a_function_of_seed_toxic_and_order():
    a = [draw.connection_hit(7, "latency_downstream", i, 0.5) for i in range(64)]
    assert a == [draw.connection_hit(7, "latency_downstream", i, 0.5) for i in range(64)]
    assert a != [draw.connection_hit(8, "latency_downstream", i, 0.5) for i in range(64)]
    assert a != [draw.connection_hit(7, "other", i, 0.5) for i in range(64)]
    assert draw.preview(7, "latency_downstream", 0.5, 64) == "".join("x" if h else "." for h in a)


def test_the_draw_hits_its_toxicity_share():
    n, p = 20_000, 0.3
    hits = sum(draw.connection_hit(42, "t", i, p) for i in range(n))
    # SplitMix64 buckets are uniform: hits ~ Binomial(n, p), sd = sqrt(n p (1-p)) ≈ 65; 5 sd is a 1-in-3.5-million miss
    assert abs(hits - n * p) <= 5 * math.sqrt(n * p * (1 - p))
    assert draw.preview(1, "t", 1.0, 10) == "x" * 10 and draw.preview(1, "t", 0.0, 10) == "." * 10
