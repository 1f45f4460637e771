"""The runner's request ids scatter hits as the ratio says, on the sequence of calls the runner actually sends.

The criterion (issue: "the ids the runner makes put hits in blocks"): at ratio 50 over 1,000 drill calls, in
the order the drill users send them, every block of 100 consecutive calls (calls 0–99, 100–199, …) has 30–70
hits and the longest run of hits is at most 16. Fair coins meet it: a block falls outside 30–70 with
probability 2·P(Binomial(100, ½) ≤ 29) = 3.2·10⁻⁵, and 1,000 draws hold a run of 17 hits with probability
about 1000 · 2⁻¹⁸ = 0.004, so a sequence fails by chance about once in 250. The runner's former numbered ids
(`PLAN-SEED-USER-N`) hit runs of 30 and more in every shipped plan.
"""

from __future__ import annotations

import heapq
import itertools
import json

import pytest

from harness.core.errors import BadInput
from harness.core.faults import is_hit
from harness.core.ids import MAX_PLAN_NAME_LEN
from harness.drills.load.schedule import request_id, tagged_ids, users
from harness.drills.plan.files import from_dict, load_plan, shipped_plans
from harness.drills.plan.model import Plan, Variant
from tests.conftest import drill_inprocess

CALLS = 1000


def drill_calls(plan: Plan, variant: Variant, trial: int, make=request_id) -> list[str]:
    """The first 1,000 ids the runner's drill users send in a trial, in the order they are scheduled (user k's
    call n at offset_k + n / rate: `schedule.users`), as a trial long enough to send them would."""
    def calls(user: str, rate: float, offset: float):
        return ((offset + n / rate, user, n) for n in itertools.count())

    drill = [calls(user, rate, offset) for user, kind, rate, offset in users(variant.traffic) if kind == "drill"]
    return [make(plan.name, plan.seed, variant.name, trial, user, n)
            for _, user, n in itertools.islice(heapq.merge(*drill), CALLS)]  # fmt: skip


def numbered(plan: str, seed: int, config: str, trial: int, user: str, n: int) -> str:
    """The ids the runner sent before the mix."""
    return f"{plan}-{seed}-{user}-{n}"


def blocks_and_longest_run(plan: Plan, variant: Variant, ids: list[str]) -> tuple[list[int], int]:
    """Hits per block of 100 consecutive calls and the longest run of hits, at ratio 50 with the plan's directive."""
    hits = [is_hit(plan.seed, i, variant.fault.directive or "abort:UNAVAILABLE", 50) for i in ids]
    blocks = [sum(hits[i : i + 100]) for i in range(0, len(hits), 100)]
    return blocks, max(len(list(run)) for hit, run in itertools.groupby(hits) if hit)


def sequences() -> list[tuple[Plan, Variant, int]]:
    """Every shipped plan's configurations with drill users, each of their trials, under the plan's seed; and
    one configuration of each under a handful of other seeds (the extremes of a Java long among them)."""
    out = []
    for name in shipped_plans():
        plan = load_plan(name)
        drilled = [v for v in plan.variants if v.traffic.drill_users]
        out += [(plan, v, trial) for v in drilled for trial in range(1, plan.trials + 1)]
        for seed in (0, 1, 7, -99, 2**31, -(2**63), 2**63 - 1) if drilled else ():
            out.append((plan.model_copy(update={"seed": seed}), drilled[-1], 1))
    return out


SEQUENCES = sequences()
IDS = [f"{p.name}-{p.seed}-{v.name}-{t}" for p, v, t in SEQUENCES]


def test_every_shipped_plan_is_covered_with_each_of_its_drill_configurations():
    names = {p.name for p, _, _ in SEQUENCES}
    assert names == {name for name in shipped_plans() if any(v.traffic.drill_users for v in load_plan(name).variants)}
    assert any(v.traffic.drill_users > 1 for _, v, _ in SEQUENCES)  # a plan whose drill users interleave
    assert len(SEQUENCES) > 60


@pytest.mark.parametrize(("plan", "variant", "trial"), SEQUENCES, ids=IDS)
def test_the_runners_drill_calls_are_hit_like_a_fair_coin_at_ratio_50(plan, variant, trial):
    blocks, longest = blocks_and_longest_run(plan, variant, drill_calls(plan, variant, trial))
    assert len(blocks) == 10 and all(30 <= b <= 70 for b in blocks) and longest <= 16, (blocks, longest)


@pytest.mark.parametrize(("plan", "variant", "trial"), SEQUENCES, ids=IDS)
def test_numbered_ids_fail_the_criterion_their_hits_come_in_runs(plan, variant, trial):
    """The criterion has teeth: on the same calls, the numbered ids hit runs of more than 16 in a row."""
    _, longest = blocks_and_longest_run(plan, variant, drill_calls(plan, variant, trial, make=numbered))
    assert longest > 16


def test_tagged_ids_are_the_drill_calls_in_the_fault_phase_of_that_configurations_trial():
    plan = load_plan("retry-storm-transient")
    v = next(v for v in plan.variants if v.traffic.drill_users > 1)
    ph = plan.phases
    for trial in (1, 2):
        want = [request_id(plan.name, plan.seed, v.name, trial, user, n)
                for user, kind, rate, offset in users(v.traffic) if kind == "drill"
                for n in range(int(ph.total * rate)) if ph.at(offset + n / rate) == "fault"]  # fmt: skip
        assert tagged_ids(plan.name, plan.seed, v.name, trial, v.traffic, v.fault, ph) == want and want
    one, two = (set(tagged_ids(plan.name, plan.seed, v.name, k, v.traffic, v.fault, ph)) for k in (1, 2))
    assert not one & two


def long_plan(tmp_path, length: int):
    path = tmp_path / "long.yaml"
    path.write_text(json.dumps({"name": "p" * length, "topology": {"hops": [{"name": "gateway"}]},
                                "phases": {"warmup": 1, "fault": 1, "recovery": 1}}))  # fmt: skip
    return path


def test_a_plan_whose_ids_could_not_be_sent_is_refused_when_it_loads(tmp_path):
    from_dict(json.loads(long_plan(tmp_path, MAX_PLAN_NAME_LEN).read_text()))
    with pytest.raises(BadInput, match="name: plan name is 189 characters: at most 188"):
        from_dict(json.loads(long_plan(tmp_path, MAX_PLAN_NAME_LEN + 1).read_text()))
    with pytest.raises(BadInput, match="plan name 'a b' has ' '"):
        from_dict({"name": "a b", "topology": {"hops": [{"name": "gateway"}]}})
    refusal = (f"drill: {tmp_path / 'long.yaml'}: name: plan name is 189 characters: at most 188, or its request ids "
               "would be longer than the 256 characters a service accepts in x-request-id")
    out = tmp_path / "o"
    for how in ("--dry-run", "--no-live"):  # refused as the plan loads: nothing printed, nothing started
        proc = drill_inprocess("run", str(long_plan(tmp_path, MAX_PLAN_NAME_LEN + 1)), "--out", str(out), how)
        assert proc.returncode == 2 and proc.stdout == "", (proc.stdout, proc.stderr)
        assert proc.stderr.strip().splitlines() == [refusal], proc.stderr
        assert not (out / "results.json").exists() and not (out / "logs").exists()
