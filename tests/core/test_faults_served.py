"""`@served` in the grammar: parser, kinds, steps, the point at which it acts, `drill hits`, plan load and dry run.
Pure logic and in-process CLI, no server (the servers are in tests/interceptors/test_served.py and
tests/proxy/test_served.py)."""

from __future__ import annotations

from io import StringIO
from unittest import mock

import pytest

from harness.core import headers as h
from harness.core.faults import DirectiveError, Kind, Mode, RejectReason, is_hit, parse_directive
from harness.core.gate import FaultGate, Outcome
from harness.core.reasons import explain
from harness.core.safety import EmergencyStop
from harness.core.settings import FaultSettings
from harness.drills.plan.sections import Fault
from harness.interceptors._fault_steps import Step
from harness.interceptors._server_pipeline import CallPlan, ServerCore
from tests.conftest import drill_inprocess
from tests.drills.trials.test_dry_run import _demo_plan, _one_line

ON = FaultSettings(enabled=True, seed=7, service="ledger", instance_id="ledger-0")


@pytest.mark.parametrize(
    "raw,mode,headers,options",
    [
        ("abort:UNAVAILABLE@served", Mode.ABORT, False, "served"),
        ("drop:2000@served", Mode.DROP, False, "served"),
        ("delay:300@served", Mode.DELAY, False, "served"),
        ("abort:INTERNAL@SERVED", Mode.ABORT, False, "served"),  # keys in any case, like the mode
        ("abort:INTERNAL@served@headers=sent", Mode.ABORT, True, "headers=sent,served"),
        ("abort:INTERNAL@headers=sent@served", Mode.ABORT, True, "headers=sent,served"),  # any order
    ],
)
def test_served_parses_as_a_bare_option(raw, mode, headers, options):
    d = parse_directive(raw)
    assert (d.mode, d.served, d.headers_sent, d.after, d.read, d.options) == (mode, True, headers, 0, 0, options)
    assert d.raw == raw  # the hit formula hashes the raw value, the point included
    assert not parse_directive(raw.split("@")[0]).served


@pytest.mark.parametrize(
    "raw,reason,words",
    [
        ("abort:UNAVAILABLE@served=yes", RejectReason.BAD_OPTION, "served takes no value"),
        ("abort:UNAVAILABLE@served=", RejectReason.BAD_OPTION, "served takes no value"),
        ("abort:UNAVAILABLE@served@SERVED", RejectReason.BAD_OPTION, "given twice"),
        ("abort:UNAVAILABLE@served@after=2", RejectReason.CONFLICTING_OPTIONS, "served and after"),
        ("drop:10@read=1@served", RejectReason.CONFLICTING_OPTIONS, "served and read"),
        ("abort:TEAPOT@served", RejectReason.UNKNOWN_CODE, "TEAPOT"),  # the head is checked first
    ],
)
def test_served_with_a_value_twice_or_beside_a_point_in_the_stream_is_refused(raw, reason, words):
    with pytest.raises(DirectiveError) as info:
        parse_directive(raw)
    assert info.value.reason is reason and words in explain(info.value)


@pytest.mark.parametrize("raw", ["abort:UNAVAILABLE@served", "drop:5@served", "delay:5@served@headers=sent"])
def test_served_fits_every_kind_each_has_an_answer_to_replace(raw):
    d = parse_directive(raw)
    assert all(d.refusal_for(k) is None for k in Kind)
    gate = FaultGate(ON)
    md = {h.TENANT: "tenant-drill", h.REQUEST_ID: "r1", h.FAULT: raw}
    assert all(gate.decide(md, "pkg.S/M", k).outcome is Outcome.HIT for k in Kind)


def test_the_point_is_part_of_what_is_hashed_so_served_is_its_own_draw():
    """contracts §4 hashes the raw `x-fault` value: `@served` moves the hit set as any other text would, and the
    gate, `is_hit` and `drill hits` agree on it."""
    ids = [f"req-{i}" for i in range(400)]
    gate = FaultGate(ON)
    raw = "abort:UNAVAILABLE@served"
    md = {h.TENANT: "tenant-drill", h.FAULT: raw, h.FAULT_RATIO: "30"}
    by_gate = {rid for rid in ids if gate.decide({**md, h.REQUEST_ID: rid}, "m", Kind.UNARY).outcome is Outcome.HIT}
    served = {rid for rid in ids if is_hit(ON.seed, rid, raw, 30)}
    plain = {rid for rid in ids if is_hit(ON.seed, rid, "abort:UNAVAILABLE", 30)}
    assert by_gate == served != plain and 60 <= len(served) <= 180
    with mock.patch("sys.stdin", StringIO("".join(f"{rid}\n" for rid in ids))):
        done = drill_inprocess("hits", "--seed", "7", "--directive", raw, "--ratio", "30")
    assert done.returncode == 0, done.stderr
    assert {line.split("\t")[0] for line in done.stdout.splitlines() if line.endswith("\thit")} == served


def _plan(raw: str, kind: Kind, stop: EmergencyStop | None = None) -> tuple[ServerCore, CallPlan]:
    core = ServerCore(ON, metrics=False, stop=stop or EmergencyStop())
    plan = core.plan("/pkg.S/M", ((h.TENANT, "tenant-drill"), (h.REQUEST_ID, "r1"), (h.FAULT, raw)), kind=kind)
    core.begin(plan, None, ())
    return core, plan


@pytest.mark.parametrize(
    "raw,steps",
    [
        ("abort:UNAVAILABLE@served", (Step.RUN, Step.ABORT)),
        ("abort:UNAVAILABLE@served@headers=sent", (Step.RUN, Step.HEADERS, Step.ABORT)),
        ("drop:10@served", (Step.RUN, Step.WAIT, Step.ABORT)),
        ("drop:10@served@headers=sent", (Step.RUN, Step.HEADERS, Step.WAIT, Step.ABORT)),
        ("delay:10@served", (Step.RUN, Step.WAIT)),  # a response stream too: its status is late, not its first message
        ("delay:10@headers=sent@served", (Step.RUN, Step.HEADERS, Step.WAIT)),
    ],
)
@pytest.mark.parametrize("kind", list(Kind), ids=lambda k: k.value)
def test_served_runs_the_handler_first_for_every_kind_and_acts_once_it_answered(raw, steps, kind):
    core, plan = _plan(raw, kind)
    assert ServerCore.steps(plan) == steps and plan.trip is None
    assert core.after_run(steps) == steps[1:]
    assert not plan.acted  # not marked while the service works
    assert core.answered(plan) and plan.acted


def test_a_served_fault_does_not_act_once_the_stop_tripped_while_the_service_worked():
    stop = EmergencyStop()
    core = ServerCore(ON, metrics=False, stop=stop)
    plan = core.plan("/pkg.S/M", ((h.TENANT, "tenant-drill"), (h.FAULT, "abort:UNAVAILABLE@served")))
    t0, token = core.begin(plan, None, ())
    assert plan.decision.outcome is Outcome.HIT and plan.slot  # it holds its active slot from handler entry
    stop.trip("test")
    assert not core.answered(plan) and not plan.acted
    core.end(plan, token, None, t0)
    assert not plan.slot and core.active.active == 0


def test_a_fault_at_the_start_has_acted_before_the_handler_answers():
    core, plan = _plan("delay:10", Kind.UNARY)
    assert plan.acted and core.answered(plan)


@pytest.mark.parametrize("raw", ["abort:UNAVAILABLE@served@read=1", "abort:UNAVAILABLE@served=1"])
def test_drill_hits_and_plans_refuse_what_servers_refuse_with_one_line(raw):
    done = drill_inprocess("hits", "--seed", "7", "--directive", raw)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("drill: hits: servers would refuse")
    with pytest.raises(ValueError, match="served"):
        Fault(directive=raw)
    assert Fault(directive="drop:100@served").directive == "drop:100@served"


def test_a_dry_run_and_a_run_refuse_served_beside_a_point_in_the_stream_before_anything(tmp_path):
    plan = _demo_plan(tmp_path, "Exchange", "abort:UNAVAILABLE@served@after=2")
    for args in (["--dry-run"], ["--no-live"]):
        line = _one_line(drill_inprocess("run", plan, "--out", str(tmp_path / "out"), *args), 2)
        assert "served and after" in line, line
        assert not (tmp_path / "out").exists()
    done = drill_inprocess("run", _demo_plan(tmp_path, "Exchange", "abort:UNAVAILABLE@served"), "--dry-run")
    assert done.returncode == 0, done.stderr
