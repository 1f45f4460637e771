"""Whether a drill's fault landed as planned (harness.drills.analysis.landing), and how a service names itself.

The judgement is pure: each case below is what a trial's witnesses (audit, marker, the hops' counters, the
target's gates) would say in a real situation, named in the test. The real run of each end (a service that
names itself, one that does not) is tests/stacks/test_own_service_doc.py.
"""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from harness.core import metrics as m
from harness.core import settings as settings_module
from harness.core.settings import FaultSettings, SettingsError
from harness.drills.analysis import landing
from harness.drills.analysis.landing import Gates, Witnesses, judge
from harness.drills.plan.outputs import SeriesKey
from harness.drills.plan.sections import Fault

IDS = {f"cart-5-drill0-{n}" for n in range(12)}
CART = Fault(directive="abort:UNAVAILABLE", ratio=50, target="cart")
URL = "http://127.0.0.1:9464/metrics"


def gates(**by_url: Gates) -> dict[str, Gates | None]:
    return {f"http://127.0.0.1:{port.removeprefix('p')}/metrics": g for port, g in by_url.items()}


def test_a_trial_that_predicted_nothing_is_not_judged():
    assert judge(Witnesses(set(), marked=set()), CART, seed=5, hops=["cart"]) == (None, None)


def test_the_predicted_ids_marked_are_as_planned():
    assert judge(Witnesses(IDS, marked=set(IDS), injected=12), CART, seed=5, hops=["cart"]) == (True, None)


def test_a_target_behind_the_edge_lands_by_the_audit_though_the_edge_saw_no_marker():
    ledger = Fault(directive="abort:UNAVAILABLE", target="ledger")
    w = Witnesses(IDS, audited=set(IDS), marked=set())  # the marker is not relayed by the gateway
    assert judge(w, ledger, seed=5, hops=["gateway", "ledger"]) == (True, None)
    # no audit (a running stack): the ledger's own counter says it injected
    assert judge(Witnesses(IDS, marked=set(), injected=40.0), ledger, seed=5, hops=["gateway", "ledger"]) == (
        True, None)  # fmt: skip


def test_a_delay_that_outlasts_the_deadline_lands_by_the_counter_though_nothing_is_marked():
    slow = Fault(directive="delay:5000", target="cart")
    assert judge(Witnesses(IDS, marked=set(), injected=12.0), slow, seed=5, hops=["cart"]) == (True, None)


def test_nothing_landed_and_no_metrics_read_names_every_likely_cause():
    ok, line = judge(Witnesses(IDS, marked=set(), injected=0.0), CART, seed=5, hops=["cart"])
    assert ok is False
    assert line.startswith("cart: 0 of 12 predicted hits marked — ")
    for needle in ("does not call itself 'cart' (set DRILL_SERVICE=cart)", "DRILL_FAULT_ENABLED=1", "tenant-drill"):
        assert needle in line, line
    behind = Fault(directive="abort:UNAVAILABLE", target="ledger")
    _, line = judge(Witnesses(IDS, audited=set()), behind, seed=5, hops=["gateway", "ledger"])
    assert line.startswith("ledger: 0 of 12 predicted hits audited") and "forward the drill keys" in line
    # no target: the first hop injects whatever its name, so the name is not a cause
    _, line = judge(Witnesses(IDS, marked=set()), Fault(directive="abort:UNAVAILABLE"), seed=5, hops=["cart"])
    assert "DRILL_SERVICE" not in line and "DRILL_FAULT_ENABLED=1" in line


@pytest.mark.parametrize(
    "gate, needles",
    [
        (Gates(switch={"drill": 1}, skipped={("drill", "target"): 12}),
         ("calls itself 'drill', not 'cart'", "set DRILL_SERVICE=cart")),
        (Gates(switch={"cart": 0}, skipped={("cart", "switch"): 12}), ("injection is off in 'cart'",)),
        (Gates(), ("exports no drill_fault_* series", "DRILL_FAULT_ENABLED=1")),
        (Gates(switch={"cart": 1}, skipped={("cart", "tenant"): 12}), ("does not allowlist tenant-drill",)),
        (Gates(switch={"cart": 1}, skipped={("cart", "token"): 12}), ("DRILL_FAULT_SECRET", "x-drill-token")),
        (Gates(switch={"cart": 1}, rejected={("cart", "over_max"): 12}), ("refuses the directive", "MAX_DELAY_MS")),
        (Gates(switch={"cart": 1}, skipped={("cart", "max_active"): 12}), ("DRILL_FAULT_MAX_ACTIVE",)),
        (Gates(switch={"cart": 1}), ("no drill call reached the service at", "did not move")),
    ],
)  # fmt: skip
def test_the_targets_own_counters_say_which_gate_refused(gate, needles):
    ok, line = judge(Witnesses(IDS, marked=set(), injected=0.0, gates={URL: gate}), CART, seed=5, hops=["cart"])
    assert ok is False and line.startswith("cart: 0 of 12 predicted hits marked — "), line
    for needle in needles:
        assert needle in line, (needle, line)


def test_a_process_that_also_serves_the_target_is_not_misnamed_by_its_other_services():
    # one /metrics for two servers: `inventory` passes on calls meant for `cart` (reason target), `cart` is there
    both = Gates(switch={"cart": 1, "inventory": 1}, skipped={("inventory", "target"): 12})
    _, line = judge(Witnesses(IDS, marked=set(), gates={URL: both}), CART, seed=5, hops=["cart"])
    assert "calls itself" not in line


def test_one_misnamed_replica_fails_the_drill_though_the_other_landed_its_share():
    half = set(sorted(IDS)[:6])
    w = Witnesses(IDS, marked=half, injected=6.0, gates=gates(
        p9464=Gates(switch={"cart": 1}, hits={"cart": 6}),
        p9465=Gates(switch={"drill": 1}, skipped={("drill", "target"): 6}),
    ))  # fmt: skip
    ok, line = judge(w, CART, seed=5, hops=["cart"])
    assert ok is False and line.startswith("cart: 6 of 12 predicted hits marked — the service at "), line
    assert ":9465/metrics calls itself 'drill'" in line


def test_ids_the_plans_seed_does_not_predict_mean_the_service_has_another_seed():
    stray = {"cart-5-drill0-99", "cart-5-drill0-98"}
    ok, line = judge(Witnesses(IDS, marked=set(sorted(IDS)[:4]) | stray), CART, seed=5, hops=["cart"])
    assert ok is False and line.startswith("cart: 4 of 12 predicted hits marked and 2 the seed does not predict")
    assert line.endswith("set DRILL_FAULT_SEED=5")
    # attempt scope: a retry draws again, so a hit on an id attempt 0 missed is the plan, not a stray seed
    again = Fault(directive="abort:UNAVAILABLE", ratio=50, target="cart", scope="attempt")
    assert judge(Witnesses(IDS, marked=set(IDS) | stray), again, seed=5, hops=["cart"]) == (True, None)


def test_fewer_than_predicted_with_nothing_refused_is_a_note_not_a_failure():
    some = set(sorted(IDS)[:9])
    g = {URL: Gates(switch={"cart": 1}, skipped={("cart", "max_active"): 3}, hits={"cart": 9})}
    ok, line = judge(Witnesses(IDS, marked=some, gates=g), CART, seed=5, hops=["cart"])
    assert ok is True and line == "cart: 9 of 12 predicted hits marked — 3 passed untouched over DRILL_FAULT_MAX_ACTIVE"
    ok, line = judge(Witnesses(IDS, marked=some), CART, seed=5, hops=["cart"])
    assert ok is True and "shed or expired" in line
    # replicas left out by the plan's own x-fault-instances: nothing may land, and that is the plan
    share = Fault(directive="abort:UNAVAILABLE", target="cart", instances=50)
    ok, line = judge(Witnesses(IDS, marked=set()), share, seed=5, hops=["cart"])
    assert ok is True and "x-fault-instances 50" in line


def test_gates_parse_a_real_exposition_and_count_what_moved_in_the_trial():
    reg = CollectorRegistry()
    skipped = Counter(m.FAULT_SKIPPED._name, "skips", ["service", "grpc_method", "reason"], registry=reg)
    switch = Gauge(m.FAULT_SWITCH._name, "switch", ["service"], registry=reg)
    switch.labels("drill").set(1)
    skipped.labels("drill", "shop.v1.Cart/Add", "target").inc(5)
    before = Gates.parse(generate_latest(reg).decode())
    skipped.labels("drill", "shop.v1.Cart/Add", "target").inc(7)
    skipped.labels("drill", "shop.v1.Cart/Get", "target").inc(1)
    during = Gates.parse(generate_latest(reg).decode()).since(before)
    assert during.switch == {"drill": 1.0} and during.skipped == {("drill", "target"): 8.0}
    # a restarted service's counter starts again from 0: what it shows is what moved
    assert Gates(skipped={("drill", "target"): 2}).since(before).skipped == {("drill", "target"): 2}


def test_the_hops_injected_faults_are_summed_from_the_series():
    assert landing.injected({SeriesKey("hits", "cart"): [0.0, 2.0, None, 3.0], SeriesKey("srv", "cart"): [9.0]}) == 5
    assert landing.injected({SeriesKey("srv", "cart"): [9.0]}) is None


def test_notes_group_trials_and_only_a_failure_is_the_exit_line():
    bad = {"as_planned": False, "note": "cart: 0 of 12 predicted hits marked — x"}
    short = {"as_planned": True, "note": "cart: 9 of 12 predicted hits marked — y"}
    configs = {"a": {"trials": [{"trial": 1, "hits": bad}, {"trial": 2, "hits": bad}]},
               "b": {"trials": [{"trial": 1, "hits": short}, {"trial": 2, "hits": {"as_planned": True}}]}}  # fmt: skip
    assert landing.summary(configs) == [
        "the fault did not land as planned (a #1, a #2): cart: 0 of 12 predicted hits marked — x",
        "hits (b #1): cart: 9 of 12 predicted hits marked — y",
    ]
    assert landing.problem({"configs": configs}) == landing.summary(configs)[0]
    assert landing.problem({"configs": {"b": configs["b"]}}) is None


# -- how a service names itself ------------------------------------------------------------------------------


def test_drill_service_names_the_service_and_a_constructor_argument_wins():
    assert FaultSettings.from_env({"DRILL_SERVICE": " cart "}).service == "cart"
    assert FaultSettings.from_env({"DRILL_SERVICE": "cart"}, service="payments").service == "payments"
    assert FaultSettings.from_env({}).service == "drill"


@pytest.mark.parametrize("value", ["", "  ", "my cart", "x" * 257, "cärt"])
def test_a_drill_service_that_cannot_be_targeted_is_refused_naming_the_variable(value):
    with pytest.raises(SettingsError, match="DRILL_SERVICE must be 1..256 printable ASCII"):
        FaultSettings.from_env({"DRILL_SERVICE": value})


def test_injection_on_under_the_default_name_is_said_once_at_start(monkeypatch, caplog):
    monkeypatch.setattr(settings_module, "_warned_default_name", False)
    with caplog.at_level(logging.WARNING, logger="harness.settings"):
        FaultSettings.from_env({"DRILL_FAULT_ENABLED": "1", "DRILL_SERVICE": "cart"})
        FaultSettings.from_env({})  # off: nothing to say
        assert not caplog.records
        FaultSettings.from_env({"DRILL_FAULT_ENABLED": "1"})
        FaultSettings.from_env({"DRILL_FAULT_ENABLED": "1"})
    (record,) = caplog.records
    assert "calls itself 'drill' (the default)" in record.getMessage() and "DRILL_SERVICE=NAME" in record.getMessage()
