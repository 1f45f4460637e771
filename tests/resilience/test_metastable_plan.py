"""The `metastable` plan's arithmetic: healthy at rest, overloaded by naive's retries, not by a budget's.

The plan is a claim about capacity (harness/plans/metastable.yaml's comment): the ledger serves
`concurrency × 1000 / work_ms` attempts/s; the load offers half of that; once attempts time out,
naive's gateway retries each edge call every per-try timeout until the edge gives up (its
attempts within the edge's timeout), a budget adds at most its ratio per hop. These checks keep
the plan and the configurations it compares from drifting apart silently.
"""

from __future__ import annotations

import math

from harness.drills.plan.files import load_plan
from harness.resilience import config as rconfig


def _numbers(quick: bool = False):
    plan = load_plan("metastable", quick=quick)
    ledger = next(h for h in plan.hops if h.name == "ledger")
    capacity = ledger.concurrency * 1000.0 / ledger.work_ms
    tr = plan.traffic
    offered = tr.organic_users * tr.organic_rate + tr.drill_users * tr.drill_rate
    return plan, ledger, capacity, offered


def test_the_warm_up_runs_at_half_the_ledgers_capacity():
    _, ledger, capacity, offered = _numbers()
    assert offered / capacity <= 0.4
    assert ledger.orphan_work  # abandoned attempts still cost a worker: the wasted work that sustains it


def test_naive_retries_offer_more_than_the_ledger_serves_once_attempts_time_out():
    plan, ledger, capacity, offered = _numbers()
    naive = rconfig.load("naive")
    per_try = naive.timeouts["default"]["seconds"]
    attempts = min(naive.retry.max_attempts, math.ceil(plan.traffic.timeout_s / per_try))
    assert attempts * offered >= 1.5 * capacity  # 4 × 20 = 80 attempts/s offered to a ledger serving 50
    # a full queue makes every attempt wait longer than naive's per-try timeout: none is served in time
    assert ledger.queue / capacity > per_try


def test_budgeted_configurations_offer_less_than_the_ledger_serves():
    _, _, capacity, offered = _numbers()
    for name in ("budget", "resilient"):
        ratio = rconfig.load(name).budget["ratio"]
        hops_that_retry = 3  # gateway, order, account each retry within their own budget at most
        assert offered * (1 + ratio) ** hops_that_retry < 0.6 * capacity, name


def test_the_trigger_overloads_the_ledger_and_the_recovery_phase_leaves_room():
    plan, ledger, capacity, offered = _numbers()
    delay_s = int(plan.fault.directive.split(":")[1]) / 1000.0
    drill = plan.traffic.drill_users * plan.traffic.drill_rate
    organic = offered - drill
    work_per_s = drill * (delay_s + ledger.work_ms / 1000.0) + organic * ledger.work_ms / 1000.0
    assert work_per_s >= 1.3  # 1.4 s of work per second during the spike: the queue grows
    backlog_s = (work_per_s - 1.0) * plan.phases.fault
    assert backlog_s > 1.5  # more than naive's 1-s per-try timeout of waiting when the trigger ends
    # a budgeted configuration offers its first attempts, 10 % more from the hop whose per-try
    # timeout fires first (the gateway: the hops below it are cancelled), and each hop's floor of
    # 1 retry/s; it drains the backlog with the ledger at two thirds of its speed on a busy box
    budget = rconfig.load("budget").budget
    offered_after = offered * (1 + budget["ratio"]) + 3 * budget["min_retries_per_s"]
    drain_s = backlog_s * capacity / (capacity * 2 / 3 - offered_after)
    assert plan.phases.recovery >= round(3 * drain_s, 6)
