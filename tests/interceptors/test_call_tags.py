"""`CallTags` (the tags computed once per tagging and method) sends exactly what `outgoing_metadata` sends.

The Locust user tags its calls with `CallTags` instead of grpc's client-interceptor
machinery; the interceptors use `outgoing_metadata`. For every tagging (organic,
quiet drill, every directive key, a secret), a call that gives only its request id
must carry the same keys, values and order, the same token (the wall clock is
pinned, so expiry and origin deadline are equal to the digit) and be recorded
under the same tenant, traffic and fault mode. Inside a served call (a scope to
propagate), `CallTags` hands over to `outgoing_metadata` itself.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core import headers as h
from harness.core import scope, token
from harness.interceptors import _client_core
from harness.interceptors._client_core import CallTags, Tagging, outgoing_metadata

METHOD = "drill.v1.Demo/Call"
DRILL = frozenset({"tenant-drill"})
NOW = 1_800_000_000.25


@pytest.fixture(autouse=True)
def pinned_clock(monkeypatch):
    monkeypatch.setattr(_client_core, "wall_clock", lambda: NOW)


def both(tagging: Tagging, request_id: str = "plan-7-drill0-3", timeout: float | None = 2.0):
    expected, rid, tenant = outgoing_metadata(
        ((h.REQUEST_ID, request_id),), tagging, timeout, method=METHOD, drill_tenants=DRILL
    )
    tags = CallTags(tagging, METHOD, DRILL)
    return tuple(expected), tags.metadata(request_id, timeout), tags, tenant


TAGGINGS = [
    Tagging(),
    Tagging(tenant="tenant-drill"),
    Tagging(tenant="tenant-drill", directive="delay:250", ratio=30, target="ledger", instances=50),
    Tagging(tenant="tenant-drill", directive="abort:UNAVAILABLE", scope="attempt", attempts=2),
    Tagging(tenant="tenant-drill", directive="drop:3000", secret="s3cret", target="demo", token_ttl_s=60),
    Tagging(tenant="tenant-drill", secret="s3cret"),  # quiet drill traffic still signs its tenant
    Tagging(tenant="someone-else", directive="delay:5"),  # not a drill tenant: no origin deadline
    Tagging(tenant="tenant-drill", directive="delay:5", method="drill.v1.Demo/Other"),
]


@pytest.mark.parametrize("tagging", TAGGINGS, ids=range(len(TAGGINGS)))
def test_call_tags_send_what_the_interceptor_sends(tagging):
    expected, got, tags, tenant = both(tagging)
    assert got == expected  # key by key, value by value, in order
    assert (tags.tenant, tags.traffic) == (tenant, h.traffic_of(tenant, DRILL))
    assert tags.fault_mode == tagging.fault_mode


def test_the_token_and_origin_deadline_are_the_interceptors_and_valid():
    t = Tagging(tenant="tenant-drill", directive="delay:250", ratio=30, target="demo", secret="s3cret")
    expected, got, _, _ = both(t)
    sent = dict(got)
    assert sent[h.DRILL_TOKEN] == dict(expected)[h.DRILL_TOKEN]
    assert sent[h.ORIGIN_DEADLINE] == f"{NOW + 2.0:.3f}"
    problem = token.check(
        "s3cret", sent[h.DRILL_TOKEN], request_id="plan-7-drill0-3", tenant="tenant-drill",
        directive="delay:250", ratio="30", target="demo", method=METHOD, now=NOW,
    )  # fmt: skip
    assert problem == ""


def test_no_timeout_means_no_origin_deadline_on_either_path():
    expected, got, _, _ = both(Tagging(tenant="tenant-drill", directive="delay:5"), timeout=None)
    assert got == expected and h.ORIGIN_DEADLINE not in dict(got)


def test_inside_a_served_call_the_scope_is_propagated_like_the_interceptor_does():
    sc = scope.CallScope(
        service="gw", method=METHOD, request_id="r", tenant="tenant-drill", traffic="drill",
        origin_deadline=NOW + 9, propagate=((h.TENANT, "tenant-drill"), (h.FAULT, "delay:5")),
    )  # fmt: skip
    token_ = scope.enter(sc)
    try:
        expected, got, _, _ = both(Tagging())
    finally:
        scope.leave(token_)
    assert got == expected and dict(got)[h.FAULT] == "delay:5"


_text = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    tenant=st.one_of(st.none(), st.sampled_from(["tenant-drill", "other"]), _text),
    directive=st.one_of(st.none(), st.sampled_from(["delay:5", "abort:UNAVAILABLE", "drop:10", "bogus"]), _text),
    ratio=st.one_of(st.none(), st.integers(0, 100)),
    target=st.one_of(st.none(), _text),
    instances=st.one_of(st.none(), st.integers(0, 100)),
    secret=st.one_of(st.none(), _text),
    method=st.one_of(st.none(), _text),
    fault_scope=st.sampled_from(["request", "attempt"]),
    attempts=st.one_of(st.none(), st.integers(1, 5)),
    request_id=_text,
    timeout=st.one_of(st.none(), st.floats(0.001, 60)),
)
def test_any_tagging_is_sent_alike(
    tenant, directive, ratio, target, instances, secret, method, fault_scope, attempts, request_id, timeout
):
    t = Tagging(
        tenant=tenant, directive=directive, ratio=ratio, target=target, instances=instances, secret=secret,
        method=method, scope=fault_scope, attempts=attempts,
    )  # fmt: skip
    expected, got, tags, expected_tenant = both(t, request_id, timeout)
    assert got == expected
    assert tags.tenant == expected_tenant
