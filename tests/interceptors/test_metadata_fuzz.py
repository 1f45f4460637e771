"""Fuzz the metadata path end to end: no directive, however malformed, may fail a call or raise."""

from __future__ import annotations

import asyncio

import grpc
from grpc import aio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.core import headers as h
from harness.core.settings import FaultSettings
from harness.demo.proto import drill_pb2
from harness.interceptors import FaultServerInterceptor
from tests.interceptors.servers import aio_server, aio_stub

KEYS = [h.TENANT, h.FAULT, h.FAULT_RATIO, h.FAULT_TARGET, h.FAULT_INSTANCES, h.REQUEST_ID, h.DRILL_TOKEN,
        h.ORIGIN_DEADLINE, "user-agent", "x-other"]  # fmt: skip
_any_value = st.one_of(st.text(max_size=400), st.binary(max_size=64), st.none(), st.integers())


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(KEYS), _any_value), max_size=12))
def test_interceptor_plans_any_metadata_without_raising(pairs):
    interceptor = FaultServerInterceptor(FaultSettings(enabled=True, seed=5, service="fuzz", max_delay_ms=50))
    handler = grpc.unary_unary_rpc_method_handler(lambda r, c: r)

    class Details:
        method = "/drill.v1.Demo/Call"
        invocation_metadata = tuple(pairs)

    async def continuation(_d):
        return handler

    wrapped = asyncio.run(interceptor.intercept_service(continuation, Details()))
    assert wrapped is not None and wrapped.unary_unary is not None


# What a real client can put on the wire: printable ASCII metadata values.
_wire_value = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=300)
_directive = st.one_of(
    _wire_value,
    st.from_regex(r"(delay|drop|abort|DELAY|sleep)?:?-?[0-9A-Z_]{0,12}(-[0-9]{0,6})?", fullmatch=True),
)


def test_real_server_survives_fuzzed_directives():
    """One real server, many fuzzed calls: each ends OK or with an injected (bounded) fault."""
    loop = asyncio.new_event_loop()
    server_cm = aio_server(FaultSettings(enabled=True, seed=5, service="fuzz2", max_delay_ms=20))
    port, _ = loop.run_until_complete(server_cm.__aenter__())
    stub_cm = aio_stub(port)
    stub = loop.run_until_complete(stub_cm.__aenter__())

    async def call(md) -> grpc.StatusCode:
        try:
            await stub.Call(drill_pb2.CallRequest(), metadata=md, timeout=5)
            return grpc.StatusCode.OK
        except aio.AioRpcError as err:
            return err.code()

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        directive=_directive,
        ratio=st.one_of(st.none(), _wire_value.filter(lambda v: len(v) < 8)),
        target=st.one_of(st.none(), st.just("fuzz2"), _wire_value.filter(lambda v: len(v) < 20)),
    )
    def check(directive, ratio, target):
        md = [(h.TENANT, "tenant-drill"), (h.FAULT, directive)]
        if ratio is not None:
            md.append((h.FAULT_RATIO, ratio))
        if target is not None:
            md.append((h.FAULT_TARGET, target))
        code = loop.run_until_complete(call(tuple(md)))
        injected = directive.strip(" ").lower().startswith(("abort:", "drop:"))
        assert code is grpc.StatusCode.OK or injected, (directive, code)

    try:
        check()
    finally:
        loop.run_until_complete(stub_cm.__aexit__(None, None, None))
        loop.run_until_complete(server_cm.__aexit__(None, None, None))
        loop.close()


_FUZZ3 = FaultSettings(enabled=True, seed=5, service="fuzz3", max_delay_ms=50)
#: Values that mean something to the gate, beside arbitrary ones.
_meaningful = st.one_of(
    st.sampled_from(["tenant-drill", "", "delay:5", "abort:UNAVAILABLE", "30", "fuzz3"]), _any_value
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KEYS), _meaningful), max_size=12))
def test_the_plan_without_a_metadata_copy_decides_what_the_gate_decides(pairs):
    """`plan` skips the dict and the gate when no key the gate reads is present: the decision, the traffic
    and the request id in the call's scope must be what the gate and the first `x-request-id` give."""
    core = _core()
    md = tuple(pairs)
    plan = core.plan("/drill.v1.Demo/Call", md)
    as_dict = h.metadata_dict(md)
    gate = core.gate.decide(as_dict, "drill.v1.Demo/Call")
    assert (plan.decision.outcome, plan.decision.traffic, plan.decision.mode) == (gate.outcome, gate.traffic, gate.mode)
    assert plan.scope.request_id == (gate.request_id or as_dict.get(h.REQUEST_ID, "")[: h.MAX_VALUE_LEN])
    assert plan.scope.traffic == gate.traffic


def _core(cache: list = []):  # noqa: B006 - one interceptor for every example (metrics register once)
    if not cache:
        cache.append(FaultServerInterceptor(_FUZZ3).core)
    return cache[0]
