"""W3C baggage: the header's grammar and limits, the drill keys read from it (precedence, malformed), the gate over
it (Java vectors, token, organic), and what our clients send. Pure logic, no server."""

from __future__ import annotations

import csv
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.core import baggage as b
from harness.core import headers as h
from harness.core import token
from harness.core.faults import RejectReason
from harness.core.gate import FaultGate, Outcome, SkipReason
from harness.core.settings import FaultSettings
from harness.interceptors._client_core import CallTags, Tagging, outgoing_metadata, with_baggage

ON = FaultSettings(enabled=True, seed=7, service="ledger", instance_id="ledger-0")


def drill_baggage(**keys: str) -> str:
    """A baggage header with the drill keys given as x-* names (x_tenant_id=...)."""
    return b.with_entries(None, h.BAGGAGE_PREFIX, {h.BAGGAGE_NAMES[k.replace("_", "-")]: v for k, v in keys.items()})


# --- the grammar -------------------------------------------------------------------------------------------------


def test_the_w3c_example_parses_with_its_whitespace_and_properties():
    # w3c/baggage HTTP_HEADER_FORMAT.md's examples, OWS around ',', '=' and ';'
    members = b.parse("key1 = value1;property1;property2, key2=value2 ,key3=value3; propertyKey=propertyValue")
    assert [(m.key, m.value, m.props) for m in members] == [
        ("key1", "value1", ";property1;property2"),
        ("key2", "value2", ""),
        ("key3", "value3", "; propertyKey=propertyValue"),
    ]


def test_values_are_percent_decoded_as_utf8():
    (m,) = b.parse("k=%E2%9C%93%20a%2Cb%3Bc%25")
    assert m.value == "✓ a,b;c%"


@given(st.text(max_size=40))
def test_any_text_survives_encode_then_parse(value):
    (m,) = b.parse(f"k={b.encode_value(value)}")
    assert m.value == value


def test_drill_values_need_no_percent_encoding_and_are_decoded_once():
    """What the drill sends (tenant, directive with options, method, uuid, token) goes as it is; what arrives is
    decoded once, exactly (an id holding an escape keeps it: the hit decision hashes the id as sent)."""
    for value in ("tenant-drill", "delay:100-300@after=3", "drill.v1.Demo/Call", "1796524696.1d5b22d8", "50"):
        assert b.encode_value(value) == value
    assert b.parse("k=abort%3AUNAVAILABLE")[0].value == "abort:UNAVAILABLE"  # as one OpenTelemetry Go hop sends it
    assert b.parse("k=abort%253AUNAVAILABLE")[0].value == "abort%3AUNAVAILABLE"  # after two: refused downstream
    assert b.parse(f"k={b.encode_value('t%9ArF')}")[0].value == "t%9ArF"


@pytest.mark.parametrize(
    "header",
    [
        "k",  # no '='
        "=v",  # no key
        "k=v,",  # an empty member
        "k=v,,j=w",
        "k=a b",  # a blank inside a value
        'k="v"',  # DQUOTE is not a baggage-octet
        "k=a\\b",  # nor is '\'
        "k=%zz",  # '%' that is not an escape
        "k=%C3",  # an escape that is not UTF-8
        "k(=v",  # '(' is not a token char
        "k=v;",  # an empty property
        "k=v;=p",
    ],
)
def test_malformed_headers_are_refused_whole(header):
    with pytest.raises(b.BaggageError):
        b.parse(header)


def test_the_w3c_limits_are_the_bounds():
    at_members = ",".join(f"k{i}=v" for i in range(b.MAX_MEMBERS))
    assert len(b.parse(at_members)) == 180
    with pytest.raises(b.BaggageError, match="180 members"):
        b.parse(at_members + ",k180=v")
    at_bytes = "k=" + "v" * (b.MAX_BYTES - 2)
    assert b.parse(at_bytes)[0].value == "v" * 8190
    with pytest.raises(b.BaggageError, match="8192 bytes"):
        b.parse(at_bytes + "v")
    with pytest.raises(b.BaggageError):  # a sender never sends what a reader drops
        b.format_members([b.Member("k", "v" * b.MAX_BYTES)])


def test_entries_replace_only_the_drill_members_and_keep_the_rest_byte_for_byte():
    theirs = "userId=alice;p=1 , sess=a%2Cb,drill.tenant=old,drill.fault=old"
    out = b.with_entries(theirs, "drill.", {"drill.tenant": "tenant-drill"})
    assert out == "userId=alice;p=1,sess=a%2Cb,drill.tenant=tenant-drill"
    assert b.with_entries("bad,,header", "drill.", {"drill.tenant": "t"}) == "drill.tenant=t"
    assert b.with_entries(theirs, "drill.", {}) == "userId=alice;p=1,sess=a%2Cb"


def test_the_first_of_duplicate_entries_wins():
    assert b.entries("drill.tenant=a,drill.tenant=b,x=1", "drill.") == {"drill.tenant": "a"}


# --- reading the drill keys (headers.metadata_dict) --------------------------------------------------------------


def test_baggage_alone_carries_every_drill_key():
    keys = {
        h.TENANT: "tenant-drill", h.FAULT: "delay:100-300@after=3", h.FAULT_RATIO: "50", h.FAULT_TARGET: "ledger",
        h.FAULT_INSTANCES: "40", h.FAULT_METHOD: "drill.v1.Demo/Call", h.FAULT_SCOPE: "attempt",
        h.FAULT_ATTEMPTS: "2", h.REQUEST_ID: "Jc|]Sqz.De83;E&vz'Om!rw>92,2_Z'e-4", h.DRILL_TOKEN: "123.abc",
    }  # fmt: skip
    header = b.with_entries(None, "drill.", {h.BAGGAGE_NAMES[k]: v for k, v in keys.items()})
    md = h.metadata_dict([(h.BAGGAGE, header)])
    assert {k: md[k] for k in keys} == keys
    assert set(h.BAGGAGE_NAMES) == set(h.DRILL_KEYS)  # every drill key has its one name
    assert all(name.startswith(h.BAGGAGE_PREFIX) for name in h.BAGGAGE_NAMES.values())


def test_any_x_drill_key_wins_and_the_baggage_is_not_read():
    header = drill_baggage(x_tenant_id="tenant-drill", x_fault="abort:UNAVAILABLE", x_request_id="bag")
    md = h.metadata_dict([(h.FAULT, "delay:5"), (h.REQUEST_ID, "x"), (h.BAGGAGE, header)])
    assert (md.get(h.TENANT), md[h.FAULT], md[h.REQUEST_ID]) == (None, "delay:5", "x")  # never a mix


def test_the_baggage_replaces_the_request_id_and_a_lone_x_request_id_does_not_count():
    header = drill_baggage(x_tenant_id="tenant-drill", x_fault="abort:UNAVAILABLE")
    md = h.metadata_dict([(h.REQUEST_ID, "x"), (h.BAGGAGE, header)])
    assert md[h.FAULT] == "abort:UNAVAILABLE" and h.REQUEST_ID not in md  # baggage alone: it had no request id


def test_a_baggage_with_only_a_drill_request_id_changes_nothing():
    md = h.metadata_dict([(h.REQUEST_ID, "x"), (h.BAGGAGE, "drill.request-id=y,other=1")])
    assert md[h.REQUEST_ID] == "x" and h.TENANT not in md


@pytest.mark.parametrize("header", ["drill.tenant=tenant-drill,,", "drill.tenant=" + "a" * 8200, "drill.fault=%zz"])
def test_a_malformed_drill_baggage_gives_no_key_and_says_why(header):
    md = h.metadata_dict([(h.REQUEST_ID, "r"), (h.BAGGAGE, header)])
    assert md[h.BAGGAGE_ERROR] and h.TENANT not in md and h.FAULT not in md


@given(st.text(max_size=300), st.text(alphabet='drill.=,;%t \\"abc\x00é\ud800', max_size=60))
def test_reading_any_baggage_never_raises_and_yields_drill_keys_or_why_not(noise, shaped):
    for header in (noise, "drill." + noise, "drill.tenant=" + shaped, shaped):
        md = h.metadata_dict([(h.BAGGAGE, header)])
        assert (h.BAGGAGE_ERROR in md) + (h.TENANT in md) <= 1
        FaultGate(ON).decide(md)  # and the gate decides on it (it never raises either)


def test_a_malformed_baggage_without_drill_entries_is_not_ours():
    md = h.metadata_dict([(h.BAGGAGE, "userId=a b")])
    assert h.BAGGAGE_ERROR not in md


# --- the gate over baggage ---------------------------------------------------------------------------------------


def _vector_rows(shared_dir):
    with open(shared_dir / "vectors" / "fault_hit_java.tsv", newline="", encoding="utf-8") as fh:
        lines = [line for line in fh if not line.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE))


def test_a_drill_carried_by_baggage_is_hit_as_the_java_reference_says(shared_dir):
    rows = [r for r in _vector_rows(shared_dir) if 0 <= int(r["seed"]) < 2**31]
    assert len(rows) >= 100
    wrong = []
    for row in rows:
        gate = FaultGate(FaultSettings(enabled=True, seed=int(row["seed"]), service="ledger"))
        header = drill_baggage(
            x_tenant_id="tenant-drill", x_fault=row["spec"], x_fault_ratio=row["ratio"], x_request_id=row["request_id"]
        )
        d = gate.decide(h.metadata_dict([(h.BAGGAGE, header)]))
        if (d.outcome is Outcome.HIT) != (row["hit"] == "true") or d.request_id != row["request_id"][: h.MAX_VALUE_LEN]:
            wrong.append((row, d))
    assert not wrong, wrong[:2]


def test_the_token_signs_the_same_fields_in_baggage():
    gate = FaultGate(FaultSettings(enabled=True, seed=7, service="ledger", secret="s3cret"))
    fields = dict(request_id="r1", tenant="tenant-drill", directive="abort:UNAVAILABLE", method="drill.v1.Demo/Call")
    tok = token.sign("s3cret", **fields, target="ledger", now=time.time())  # the injecting hop signs its own name
    keys = dict(x_tenant_id="tenant-drill", x_fault="abort:UNAVAILABLE", x_request_id="r1",
                x_fault_method="drill.v1.Demo/Call", x_drill_token=tok)  # fmt: skip
    d = gate.decide(h.metadata_dict([(h.BAGGAGE, drill_baggage(**keys))]), "drill.v1.Demo/Call")
    assert d.outcome is Outcome.HIT and d.authenticated
    forged = drill_baggage(**{**keys, "x_fault": "delay:5000"})  # a field changed in transit
    d = gate.decide(h.metadata_dict([(h.BAGGAGE, forged)]), "drill.v1.Demo/Call")
    refused = (Outcome.SKIPPED, SkipReason.TOKEN.value, "mismatch", "organic")
    assert (d.outcome, d.reason, d.detail, d.traffic) == refused
    unsigned = drill_baggage(**{k: v for k, v in keys.items() if k != "x_drill_token"})
    d = gate.decide(h.metadata_dict([(h.BAGGAGE, unsigned)]), "drill.v1.Demo/Call")
    assert (d.outcome, d.detail) == (Outcome.SKIPPED, "missing")


def test_baggage_without_the_drill_tenant_is_organic():
    gate = FaultGate(ON)
    d = gate.decide(h.metadata_dict([(h.BAGGAGE, drill_baggage(x_fault="abort:UNAVAILABLE"))]))
    assert (d.outcome, d.reason, d.traffic) == (Outcome.SKIPPED, SkipReason.TENANT.value, "organic")
    d = gate.decide(h.metadata_dict([(h.BAGGAGE, drill_baggage(x_tenant_id="someone", x_fault="abort:INTERNAL"))]))
    assert d.traffic == "organic" and d.outcome is not Outcome.HIT
    assert gate.decide(h.metadata_dict([(h.BAGGAGE, "userId=alice")])).outcome is Outcome.PASS


def test_a_malformed_drill_baggage_is_refused_as_bad_baggage():
    d = FaultGate(ON).decide(h.metadata_dict([(h.REQUEST_ID, "r9"), (h.BAGGAGE, "drill.tenant=tenant-drill,,")]))
    assert (d.outcome, d.reason, d.traffic, d.request_id) == (
        Outcome.REJECTED, RejectReason.BAD_BAGGAGE.value, "organic", "r9"
    )  # fmt: skip
    assert "not key=value" in d.detail


def test_a_hop_that_is_not_the_target_forwards_the_baggage_with_the_keys():
    header = "userId=alice;p," + drill_baggage(x_tenant_id="tenant-drill", x_fault="abort:INTERNAL",
                                               x_fault_target="downstream", x_request_id="r2")  # fmt: skip
    d = FaultGate(ON).decide(h.metadata_dict([(h.BAGGAGE, header)]))
    assert d.outcome is Outcome.SKIPPED and d.reason == SkipReason.TARGET.value
    assert dict(d.propagate) == {
        h.TENANT: "tenant-drill", h.FAULT: "abort:INTERNAL", h.FAULT_TARGET: "downstream", h.REQUEST_ID: "r2",
        h.BAGGAGE: header,
    }  # fmt: skip


# --- what our clients send ---------------------------------------------------------------------------------------


def test_a_drill_call_sends_its_keys_also_as_baggage_merged_into_the_callers():
    t = Tagging(tenant="tenant-drill", directive="abort:UNAVAILABLE", ratio=50, target="ledger", secret="s")
    md, rid, _ = outgoing_metadata([(h.BAGGAGE, "userId=alice;p")], t, 2.0, method="drill.v1.Demo/Call")
    (header,) = [v for k, v in md if k == h.BAGGAGE]  # one header
    assert header.startswith("userId=alice;p,")
    read = h.metadata_dict([(h.BAGGAGE, header)])
    sent = dict(md)
    assert {k: read[k] for k in h.DRILL_KEYS if k in read} == {k: sent[k] for k in h.DRILL_KEYS if k in sent}
    assert read[h.REQUEST_ID] == rid and h.DRILL_TOKEN in read


@pytest.mark.parametrize(
    "tagging",
    [
        Tagging(tenant="tenant-drill", directive="delay:5", secret="s"),
        Tagging(
            tenant="tenant-drill",
            directive="abort:UNAVAILABLE",
            ratio=50,
            target="a b",
            instances=40,
            scope="attempt",
            attempts=2,
            method="drill.v1.Demo/Write",
        ),
        Tagging(tenant="tenant-drill"),
        Tagging(tenant="tenant-drill", directive="delay:5", target="x" * 300),  # oversize: x-* keys alone
    ],
)
@pytest.mark.parametrize("timeout", [2.0, None])
@pytest.mark.parametrize("rid", ["r1", "id;with,odd chars", "y" * 300])
def test_call_tags_send_the_same_metadata_as_the_interceptor(tagging, timeout, rid, monkeypatch):
    from harness.interceptors import _client_core

    monkeypatch.setattr(_client_core, "wall_clock", lambda: 1_796_500_000.0)  # the token's expiry: one clock
    fast = CallTags(tagging, "drill.v1.Demo/Call").metadata(rid, timeout)
    slow, _, _ = outgoing_metadata(((h.REQUEST_ID, rid),), tagging, timeout, method="drill.v1.Demo/Call")
    assert list(fast) == slow  # key by key, value by value, in order: the baggage too


def test_an_organic_call_sends_no_drill_baggage_and_strips_what_it_was_handed():
    md, _, _ = outgoing_metadata([(h.BAGGAGE, "userId=alice,drill.tenant=tenant-drill,drill.fault=abort:INTERNAL")],
                                 Tagging(), 2.0)  # fmt: skip
    assert dict(md)[h.BAGGAGE] == "userId=alice"
    md, _, _ = outgoing_metadata([(h.BAGGAGE, "drill.tenant=tenant-drill")], Tagging(), 2.0)
    assert h.BAGGAGE not in dict(md)
    md, _, _ = outgoing_metadata([], Tagging(), 2.0)
    assert h.BAGGAGE not in dict(md)


def test_a_value_servers_refuse_as_oversize_is_not_copied_into_baggage():
    md = [(h.TENANT, "tenant-drill"), (h.DRILL_TOKEN, "1" * 6000)]
    assert with_baggage(md) == md
