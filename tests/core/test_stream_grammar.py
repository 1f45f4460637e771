"""The mid-stream grammar (`@after=N`, `@read=N`, `@headers=sent`): parser, kinds, gate, tripwire, `drill hits`
and plan validation. Pure logic, no server (the servers are in test_stream_faults.py and test_stream_midstream.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core import headers as h
from harness.core.faults import (
    MAX_STREAM_MESSAGES,
    DirectiveError,
    Kind,
    Mode,
    RejectReason,
    is_hit,
    parse_directive,
)
from harness.core.gate import FaultGate, Outcome
from harness.core.safety import EmergencyStop
from harness.core.settings import FaultSettings
from harness.drills.plan.sections import Fault
from harness.interceptors._fault_steps import Step
from harness.interceptors._server_pipeline import CallPlan, ServerCore
from tests.conftest import drill_inprocess

ON = FaultSettings(enabled=True, seed=7, service="ledger", instance_id="ledger-0")


@pytest.mark.parametrize(
    "raw,mode,after,read,headers,options",
    [
        ("abort:UNAVAILABLE@after=5", Mode.ABORT, 5, 0, False, "after=5"),
        ("delay:500@after=3", Mode.DELAY, 3, 0, False, "after=3"),
        ("drop:2000@read=1", Mode.DROP, 0, 1, False, "read=1"),
        ("abort:UNAVAILABLE@headers=sent", Mode.ABORT, 0, 0, True, "headers=sent"),
        ("abort:INTERNAL@read=4@headers=sent", Mode.ABORT, 0, 4, True, "read=4,headers=sent"),
        ("abort:INTERNAL@headers=sent@read=4", Mode.ABORT, 0, 4, True, "read=4,headers=sent"),  # any order
        ("DELAY:10-20@AFTER=2", Mode.DELAY, 2, 0, False, "after=2"),  # keys in any case, like the mode
        ("delay:1@after=1000000", Mode.DELAY, MAX_STREAM_MESSAGES, 0, False, "after=1000000"),
        ("delay:250", Mode.DELAY, 0, 0, False, ""),  # no option: what it always was
    ],
)
def test_options_parse(raw, mode, after, read, headers, options):
    d = parse_directive(raw)
    assert (d.mode, d.after, d.read, d.headers_sent, d.options) == (mode, after, read, headers, options)
    assert d.raw == raw  # the hit formula hashes the raw value, options included


@pytest.mark.parametrize(
    "raw,reason",
    [
        ("abort:UNAVAILABLE@after=0", RejectReason.BAD_COUNT),  # the start of the stream is the plain directive
        ("abort:UNAVAILABLE@after=-1", RejectReason.BAD_COUNT),
        ("abort:UNAVAILABLE@after=x", RejectReason.BAD_COUNT),
        ("abort:UNAVAILABLE@after=05", RejectReason.BAD_COUNT),  # one spelling per count (the hit set hashes it)
        (f"abort:UNAVAILABLE@after={MAX_STREAM_MESSAGES + 1}", RejectReason.BAD_COUNT),
        ("abort:UNAVAILABLE@read=", RejectReason.BAD_COUNT),
        ("abort:UNAVAILABLE@headers=received", RejectReason.BAD_OPTION),
        ("abort:UNAVAILABLE@before=3", RejectReason.BAD_OPTION),
        ("abort:UNAVAILABLE@after", RejectReason.BAD_OPTION),
        ("abort:UNAVAILABLE@", RejectReason.BAD_OPTION),
        ("abort:UNAVAILABLE@after=1@after=2", RejectReason.BAD_OPTION),
        ("abort:UNAVAILABLE@after=1@read=2", RejectReason.CONFLICTING_OPTIONS),
        ("abort:UNAVAILABLE@after=1@headers=sent", RejectReason.CONFLICTING_OPTIONS),  # a message carries headers
        ("abort:UNAVAILABLE@after=1,read=2", RejectReason.BAD_CHARS),
        ("abort:TEAPOT@after=1", RejectReason.UNKNOWN_CODE),  # the head is checked first
        ("delay:70000@after=1", RejectReason.OVER_MAX),
    ],
)
def test_bad_options_are_rejected_with_a_reason(raw, reason):
    with pytest.raises(DirectiveError) as info:
        parse_directive(raw)
    assert info.value.reason is reason


@pytest.mark.parametrize(
    "raw,fits",
    [
        ("abort:UNAVAILABLE@after=2", {Kind.SERVER_STREAMING, Kind.BIDI_STREAMING}),
        ("abort:UNAVAILABLE@read=2", {Kind.CLIENT_STREAMING, Kind.BIDI_STREAMING}),
        ("abort:UNAVAILABLE@headers=sent", set(Kind)),
        ("delay:5", set(Kind)),
    ],
)
def test_which_kinds_an_option_fits(raw, fits):
    d = parse_directive(raw)
    assert {k for k in Kind if d.refusal_for(k) is None} == fits
    assert all(d.refusal_for(k) is RejectReason.WRONG_KIND for k in set(Kind) - fits)


def md(**kw: str) -> dict[str, str]:
    base = {h.TENANT: "tenant-drill", h.REQUEST_ID: "req-1"}
    base.update({k.replace("_", "-"): v for k, v in kw.items()})
    return base


def test_the_gate_refuses_an_option_the_method_cannot_have_at_the_target_only():
    gate = FaultGate(ON)
    wrong = gate.decide(md(x_fault="abort:UNAVAILABLE@after=2"), "pkg.S/Unary", Kind.UNARY)
    assert (wrong.outcome, wrong.reason) == (Outcome.REJECTED, "wrong_kind")
    assert wrong.detail == "after=2 on a unary method"
    assert gate.decide(md(x_fault="abort:UNAVAILABLE@after=2"), "pkg.S/Watch", Kind.SERVER_STREAMING).outcome is (
        Outcome.HIT
    )
    # A hop that is not the target does not know the target's method: it forwards.
    passing = gate.decide(md(x_fault="abort:UNAVAILABLE@after=2", x_fault_target="other"), "pkg.S/Unary", Kind.UNARY)
    assert passing.reason == "target" and dict(passing.propagate)[h.FAULT] == "abort:UNAVAILABLE@after=2"


def test_hits_of_a_stream_directive_follow_the_hit_formula_on_its_raw_text():
    gate = FaultGate(ON)
    raw = "abort:UNAVAILABLE@after=3"
    ids = [f"req-{i}" for i in range(400)]
    hit = {rid for rid in ids if gate.decide(md(x_fault=raw, x_fault_ratio="30", x_request_id=rid), "m",
                                             Kind.BIDI_STREAMING).outcome is Outcome.HIT}  # fmt: skip
    assert hit == {rid for rid in ids if is_hit(ON.seed, rid, raw, 30)}
    # The options are part of the directive: the same fault at another point is another draw.
    other = {rid for rid in ids if is_hit(ON.seed, rid, "abort:UNAVAILABLE@after=4", 30)}
    assert hit != other and 60 <= len(hit) <= 180


def _plan(raw: str, kind: Kind, stop: EmergencyStop | None = None) -> CallPlan:
    core = ServerCore(ON, metrics=False, stop=stop or EmergencyStop())
    plan = core.plan("/pkg.S/M", tuple(md(x_fault=raw).items()), kind=kind)
    core.begin(plan, None, ())
    return plan


def test_a_tripwire_after_n_fires_once_right_after_the_nth_response():
    plan = _plan("abort:UNAVAILABLE@after=3", Kind.SERVER_STREAMING)
    trip = plan.trip
    assert ServerCore.steps(plan) == (Step.RUN,) and not plan.acted
    answers = [trip.sent() for _ in range(6)]
    assert answers == [(), (), (Step.ABORT,), (), (), ()]
    assert plan.acted and trip.before_read() == ()  # it counts responses only


def test_a_tripwire_on_reads_fires_when_the_handler_asks_for_message_n_plus_one():
    plan = _plan("drop:100@read=2@headers=sent", Kind.BIDI_STREAMING)
    trip = plan.trip
    answers = []
    for _ in range(4):
        answers.append(trip.before_read())
        trip.read()
        assert trip.sent() == ()  # responses do not count
    assert answers == [(), (), (Step.HEADERS, Step.WAIT, Step.ABORT), ()]


def test_a_tripwire_whose_point_comes_after_the_stop_does_nothing():
    stop = EmergencyStop()
    plan = _plan("delay:100@after=1", Kind.BIDI_STREAMING, stop)
    stop.trip("test")
    assert plan.trip.sent() == () and not plan.acted


@pytest.mark.parametrize(
    "raw,kind,steps",
    [
        ("abort:UNAVAILABLE", Kind.CLIENT_STREAMING, (Step.ABORT,)),
        ("abort:UNAVAILABLE@headers=sent", Kind.BIDI_STREAMING, (Step.HEADERS, Step.ABORT)),
        ("drop:10", Kind.BIDI_STREAMING, (Step.WAIT, Step.ABORT)),
        ("delay:10", Kind.UNARY, (Step.RUN, Step.WAIT)),
        ("delay:10", Kind.CLIENT_STREAMING, (Step.RUN, Step.WAIT)),  # one response: it is late
        ("delay:10", Kind.SERVER_STREAMING, (Step.WAIT, Step.RUN)),  # a stream: its first message is late
        ("delay:10", Kind.BIDI_STREAMING, (Step.WAIT, Step.RUN)),
        ("delay:10@headers=sent", Kind.UNARY, (Step.RUN, Step.HEADERS, Step.WAIT)),
        ("delay:10@headers=sent", Kind.BIDI_STREAMING, (Step.HEADERS, Step.WAIT, Step.RUN)),
    ],
)
def test_what_a_fault_at_the_start_does_for_each_kind(raw, kind, steps):
    plan = _plan(raw, kind)
    assert ServerCore.steps(plan) == steps and plan.trip is None and plan.acted


# --- drill hits and plan validation: the same parser -------------------------------------------
def test_drill_hits_accepts_the_stream_grammar_and_predicts_the_same_ids():
    ids = "".join(f"req-{i}\n" for i in range(50))
    from io import StringIO
    from unittest import mock

    with mock.patch("sys.stdin", StringIO(ids)):
        done = drill_inprocess("hits", "--seed", "7", "--directive", "abort:UNAVAILABLE@after=3", "--ratio", "30")
    assert done.returncode == 0, done.stderr
    rows = dict(line.split("\t") for line in done.stdout.splitlines() if "\t" in line)
    assert {rid for rid, v in rows.items() if v == "hit"} == {
        f"req-{i}" for i in range(50) if is_hit(7, f"req-{i}", "abort:UNAVAILABLE@after=3", 30)
    }


@pytest.mark.parametrize("raw", ["abort:UNAVAILABLE@after=0", "abort:UNAVAILABLE@after=1@read=1", "delay:5@at=3"])
def test_drill_hits_refuses_wrong_grammar_with_one_line(raw):
    done = drill_inprocess("hits", "--seed", "7", "--directive", raw)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("drill: hits: servers would refuse")


def test_plans_accept_the_stream_grammar_and_refuse_wrong_grammar():
    assert Fault(directive="delay:500@after=3").directive == "delay:500@after=3"
    with pytest.raises(ValueError, match="cannot go together"):
        Fault(directive="abort:UNAVAILABLE@after=3@headers=sent")


_option = st.sampled_from(["after=", "read=", "headers=", "AFTER=", "x="]).flatmap(
    lambda k: st.tuples(st.just(k), st.text(alphabet="0123456789sentx-", max_size=8))
)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["abort:UNAVAILABLE", "delay:5", "drop:7", "delay:1-9"]), st.lists(_option, max_size=3))
def test_fuzz_options_give_a_directive_or_a_reasoned_rejection(head, options):
    raw = head + "".join(f"@{k}{v}" for k, v in options)
    try:
        d = parse_directive(raw)
    except DirectiveError as err:
        assert isinstance(err.reason, RejectReason)
        return
    assert not (d.after and d.read) and not (d.after and d.headers_sent)
    assert 0 <= d.after <= MAX_STREAM_MESSAGES and 0 <= d.read <= MAX_STREAM_MESSAGES
