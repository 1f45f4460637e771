"""Shipped plans load, their configurations exist, and plan validation refuses what it cannot run."""

from __future__ import annotations

import pathlib
import re

import pytest

from harness.core.faults import instance_selected
from harness.drills.plan.files import PLANS_DIR, PlanError, from_dict, load_plan, shipped_plans
from harness.drills.plan.sections import Phases

SHIPPED = {"retry-storm", "slow-half", "basics", "half-open"}
CONFIGS = pathlib.Path(__file__).resolve().parents[3] / "harness" / "configs"


def test_the_four_plans_are_shipped():
    assert SHIPPED <= set(shipped_plans())


@pytest.mark.parametrize("name", sorted(SHIPPED))
@pytest.mark.parametrize("quick", [False, True])
def test_shipped_plan_loads_and_names_real_configurations(name, quick):
    plan = load_plan(name, quick=quick)
    assert plan.variants
    for v in plan.variants:
        if v.config is None:
            continue
        if v.config.endswith(".yaml"):
            assert pathlib.Path(v.config).is_file()
        else:
            assert (CONFIGS / f"{v.config}.yaml").is_file(), v.config
    assert plan.phases.fault > 0


def test_the_fixed_ports_a_shipped_plan_listens_on_are_outside_the_ephemeral_range():
    """A plan whose processes listen on fixed ports (`stack.processes`) must not pick them where the kernel hands out
    ports for outgoing connections: any connection of the machine may hold one when a trial starts, and the run (or
    its dry run) then refuses to start (a CI run met 47104 taken this way). Linux's range is read from /proc."""
    low, high = map(int, pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    fixed = {}
    for name in shipped_plans():
        plan = load_plan(name)
        if plan.stack is None or not plan.stack.processes:
            continue
        text = (PLANS_DIR / f"{name}.yaml").read_text()
        ports = {p.ready.port for p in plan.stack.processes if p.ready.port is not None}
        ports |= {int(m) for m in re.findall(r"127\.0\.0\.1:(\d+)", text)}
        fixed[name] = sorted(ports)
    assert fixed.get("retry-storm-go")  # the shipped chain is among them
    inside = {name: [p for p in ports if low <= p <= high] for name, ports in fixed.items()}
    assert not any(inside.values()), (f"{low}-{high}", inside)


def test_retry_storm_compares_naive_budget_resilient_and_quick_is_short():
    full = load_plan("retry-storm")
    quick = load_plan("retry-storm", quick=True)
    assert [v.name for v in full.variants] == ["naive", "budget", "resilient"]
    assert [h.name for h in full.hops] == ["gateway", "order", "account", "ledger"]
    assert {"naive", "resilient"} <= {v.name for v in quick.variants}
    # the demo's time budgets: 3 min full, 60 s quick (plus a few seconds per run to start)
    assert len(full.variants) * (full.phases.total + 5) <= 180
    assert len(quick.variants) * (quick.phases.total + 5) <= 60


def test_slow_half_selects_exactly_half_of_the_ledgers():
    plan = load_plan("slow-half")
    ledger = next(h for h in plan.hops if h.name == "ledger")
    chosen = [i for i in range(ledger.replicas) if instance_selected(plan.seed, f"ledger-{i}", 50)]
    assert len(chosen) * 2 == ledger.replicas


def test_a_late_look_at_the_clock_still_names_every_phase_it_crossed():
    # the runner annotates each phase a trial enters from its tick; a tick that comes after a boundary (a
    # starved loop) must still name the phases it stepped over, each at its own start, and never one of no length
    ph = Phases(warmup=2, fault=3, recovery=4)
    assert ph.entered(None, ph.at(0.1)) == ["warmup"]
    assert ph.entered(None, ph.at(2.5)) == ["warmup", "fault"]
    assert ph.entered("warmup", ph.at(9.2)) == ["fault", "recovery", "done"]
    assert ph.entered("fault", "fault") == []
    assert [ph.start_of(p) for p in ("warmup", "fault", "recovery", "done")] == [0, 2, 5, 9]
    bare = Phases(warmup=0, fault=3, recovery=0)
    assert bare.entered(None, bare.at(0.1)) == ["fault"] and bare.entered("fault", bare.at(3.0)) == ["done"]


def test_only_keeps_the_named_configurations_in_order():
    plan = load_plan("retry-storm", only=["resilient", "naive"])
    assert [v.name for v in plan.variants] == ["resilient", "naive"]
    with pytest.raises(PlanError):
        load_plan("basics", only=["nope"])


@pytest.mark.parametrize(
    "bad",
    [
        {"fault": {"directive": "abort:UNAVAILABLE", "target": "nowhere"}},
        {"fault": {"directive": "x"}, "traffic": {"organic_users": 1, "bogus": 1}},
        {"fault": {"directive": "x"}, "topology": {"hops": [{"name": "a", "colour": "red"}]}},
        {"fault": {"directive": "x"}, "variants": [{"name": "a"}, {"name": "a"}]},
    ],
)
def test_invalid_plans_are_refused_with_a_reason(bad):
    with pytest.raises(PlanError):
        from_dict(bad)


def test_a_malformed_edge_is_named_in_words_not_by_its_regex():
    plan = {
        "fault": {"directive": "abort:UNAVAILABLE"},
        "stack": {"edge": {"address": "localhost", "method": "nope"}, "hops": [{"name": "a", "metrics": ["http://127.0.0.1:1/metrics"]}]},
    }  # fmt: skip
    with pytest.raises(PlanError) as err:
        from_dict(plan)
    text = str(err.value)
    assert "stack.edge.address: 'localhost': expected HOST:PORT" in text
    assert "stack.edge.method: 'nope': expected a full method name, package.Service/Method" in text
    assert "pattern" not in text
