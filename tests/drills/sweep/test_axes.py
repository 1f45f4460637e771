"""`sweep/axes.py`: every form of `--vary KEY=LO..HI`, the keys and ranges it refuses (one line, before anything
runs), and the plan rebuilt and validated at each value of the axis (the shipped metastable plan: `delay:250`,
`phases: {fault: 5}`, `fault.ratio: 100`, `traffic.timeout_s: 4.0`, `traffic.organic_rate: 4`)."""

from __future__ import annotations

import pytest

from harness.core.errors import BadInput
from harness.drills.sweep.axes import DEFAULT_STEPS, SECOND_AXIS_STEPS, Axis, overrides, parse, parse_all, plan_at


@pytest.mark.parametrize(("spec", "axis"), [
    # a whole-number key: whole steps, the range in DEFAULT_STEPS of them, at least 1
    ("phases.fault=1..20", Axis("phases.fault", 1.0, 20.0, 1.0, True)),
    ("fault.ratio=10..100", Axis("fault.ratio", 10.0, 100.0, 6.0, True)),
    # a decimal key: the range in DEFAULT_STEPS exact steps
    ("traffic.timeout_s=1..4", Axis("traffic.timeout_s", 1.0, 4.0, 3 / DEFAULT_STEPS, False)),
    ("traffic.timeout_s=0.5..1.3", Axis("traffic.timeout_s", 0.5, 1.3, 0.8 / DEFAULT_STEPS, False)),
    # a delay directive's milliseconds, the rest of the directive kept; spaces around the parts
    ("fault.delay=100..2000", Axis("fault.delay", 100.0, 2000.0, 119.0, True)),
    (" traffic.organic_rate = 2 .. 10 ", Axis("traffic.organic_rate", 2.0, 10.0, 1.0, True)),
])  # fmt: skip
def test_every_key_form_gives_its_axis_and_grid(spec: str, axis: Axis) -> None:
    got = parse(spec, "metastable", step=None, quick=False)
    assert got == pytest.approx(axis) if not axis.integer else got == axis
    assert got.values[0] == axis.lo and got.values[-1] == axis.hi


def test_a_given_step_is_the_grid_and_must_suit_the_key() -> None:
    assert parse("phases.fault=1..20", "metastable", step=4, quick=False).values == [1, 5, 9, 13, 17, 20]
    assert parse("traffic.timeout_s=1..2", "metastable", step=0.25, quick=False).values == [1, 1.25, 1.5, 1.75, 2]
    with pytest.raises(BadInput, match="--step 0: must be above 0"):
        parse("phases.fault=1..20", "metastable", step=0, quick=False)
    with pytest.raises(BadInput, match="a whole number in the plan; give whole LO, HI and --step"):
        parse("phases.fault=1..20", "metastable", step=1.5, quick=False)


@pytest.mark.parametrize(("spec", "says"), [
    ("phases.fault", "expected KEY=LO..HI with numbers"),
    ("phases.fault=a..b", "expected KEY=LO..HI with numbers"),
    ("phases.fault=3..1", "an empty range (LO must be below HI)"),
    ("phases.fault=3..3", "an empty range"),
    ("nope=1..3", "the plan has no key 'nope'"),
    ("phases.nope=1..3", "the plan has no key 'phases.nope'"),
    ("topology.hops.ledger=1..3", "the plan has no key 'topology.hops.ledger'"),  # a list, not a mapping
    ("slo.traffic=1..2", "not a number in the plan ('organic')"),
    ("topology.hops=1..2", "not a number in the plan"),
    ("fault.ratio=1.5..20", "a whole number in the plan"),
    ("phases.fault=1..99999", "phases.fault=99999: "),  # the plan's own bound, at the end that breaks it
    ("fault.ratio=50..200", "fault.ratio=200: "),
    ("traffic.timeout_s=-1..2", "traffic.timeout_s=-1: "),
])  # fmt: skip
def test_a_bad_key_or_range_is_refused_before_anything_runs(spec: str, says: str) -> None:
    with pytest.raises(BadInput) as err:
        parse(spec, "metastable", step=None, quick=False)
    assert says in str(err.value) and str(err.value).startswith("sweep: --vary ")


def test_a_delay_axis_needs_a_plain_delay_directive() -> None:
    with pytest.raises(BadInput, match="the plan's directive 'delay:3000-5000' is not delay:MS"):
        parse("fault.delay=100..2000", "slow-half", step=None, quick=False)  # a range of delays: no one number
    with pytest.raises(BadInput, match="is not delay:MS"):
        parse("fault.delay=100..2000", "retry-storm", step=None, quick=False)  # an abort
    with pytest.raises(BadInput, match="nope-plan"):
        parse("phases.fault=1..3", "nope-plan", step=None, quick=False)


def test_overrides_set_one_key_and_keep_the_rest_of_a_delay_directive() -> None:
    data = {"fault": {"directive": "delay:250@headers=sent"}}
    assert overrides("fault.delay", 800.4, data, True) == {"fault": {"directive": "delay:800@headers=sent"}}
    assert overrides("phases.fault", 7.0, {}, True) == {"phases": {"fault": 7}}
    assert overrides("traffic.timeout_s", 1.25, {}, False) == {"traffic": {"timeout_s": 1.25}}


@pytest.mark.parametrize(("spec", "read"), [
    ("phases.fault=1..20", lambda p: p.phases.fault),
    ("fault.ratio=10..100", lambda p: p.fault.ratio),
    ("fault.delay=100..2000", lambda p: int(p.fault.directive.removeprefix("delay:"))),
    ("traffic.timeout_s=1..4", lambda p: p.traffic.timeout_s),
])  # fmt: skip
def test_the_plan_is_rebuilt_and_validated_at_every_value_of_the_axis(spec, read) -> None:
    axis = parse(spec, "metastable", step=None, quick=True)
    for value in axis.values:
        plan = plan_at("metastable", axis, value, quick=True, only=["naive"], trials=2, seed=9)
        assert read(plan) == pytest.approx(value)
        assert plan.trials == 2 and plan.seed == 9 and [v.name for v in plan.variants] == ["naive"]
        assert plan.phases.warmup == 3  # the quick block still applies under the axis' override


def test_two_axes_step_the_second_and_check_every_corner() -> None:
    first, second = parse_all(["phases.fault=1..20", "traffic.organic_rate=2..10"], "metastable", step=None,
                              quick=False)  # fmt: skip
    assert first.values == [float(v) for v in range(1, 21)]
    assert second == Axis("traffic.organic_rate", 2.0, 10.0, 2.0, True)  # (10 - 2) / SECOND_AXIS_STEPS
    assert len(second.values) == SECOND_AXIS_STEPS + 1
    plan = plan_at("metastable", first, 3, quick=False, fixed=(second, 6))
    assert (plan.phases.fault, plan.traffic.organic_rate, plan.fault.directive) == (3, 6, "delay:250")
    assert parse_all(["phases.fault=1..20"], "metastable", step=None, quick=False)[1] is None


@pytest.mark.parametrize(("specs", "says"), [
    ([], "give the axis: --vary KEY=LO..HI"),
    (["phases.fault=1..3", "fault.ratio=1..2", "traffic.drill_rate=1..2"], "at most 2 --vary axes (3 given)"),
    (["phases.fault=1..3", "phases.fault=1..2"], "phases.fault given twice"),
    (["phases.fault=1..3", "fault.ratio=1..200"], "--vary fault.ratio=200: "),
])  # fmt: skip
def test_two_axes_are_refused_when_the_plan_cannot_take_them(specs, says) -> None:
    with pytest.raises(BadInput) as err:
        parse_all(specs, "metastable", step=None, quick=False)
    assert says in str(err.value), str(err.value)


def test_a_value_is_labelled_in_the_key_s_unit() -> None:
    assert Axis("phases.fault", 1, 20, 1, True).label(3.0) == "3 s"
    assert Axis("traffic.timeout_s", 1, 4, 0.5, False).label(1.5) == "1.5 s"
    assert Axis("fault.delay", 100, 2000, 100, True).label(300.0) == "300 ms"
    assert Axis("fault.ratio", 10, 100, 10, True).label(40.0) == "40"


def test_every_corner_of_two_axes_is_built_before_anything_runs(monkeypatch) -> None:
    from harness.drills.sweep import axes

    built = []
    real = axes.plan_at

    def spy(plan_name, axis, value, **kw):
        fixed = kw.get("fixed")
        built.append((axis.key, value) + ((fixed[0].key, fixed[1]) if fixed else ()))
        return real(plan_name, axis, value, **kw)

    monkeypatch.setattr(axes, "plan_at", spy)
    parse_all(["phases.fault=1..20", "fault.ratio=10..100"], "metastable", step=None, quick=True)
    corners = [b for b in built if len(b) == 4]
    assert sorted(corners) == [("phases.fault", lo, "fault.ratio", r) for lo in (1, 20) for r in (10, 100)]
