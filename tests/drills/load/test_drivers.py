"""The load drivers behind one interface (`schedule.LoadDriver`): the plan chooses the driver (`drivers.driver_for`),
and each driver answers every question the runner asks for itself, None where it does not know, so the runner
only asks (no driver's type is tested in harness/drills/trials/)."""

from __future__ import annotations

import inspect
import pathlib

import pytest

from harness.core.snapshots import EdgeCounts
from harness.drills.load.aio import AioLoad
from harness.drills.load.command import CommandLoad
from harness.drills.load.drivers import driver_for
from harness.drills.load.locust import LocustLoad
from harness.drills.load.schedule import LoadDriver
from harness.drills.plan.files import from_dict
from harness.drills.stack.targets import target_for
from tests.conftest import ROOT

DRIVERS = (AioLoad, LocustLoad, CommandLoad)
QUESTIONS = sorted(n for n, v in vars(LoadDriver).items() if not n.startswith("_") and callable(v))
BASE = {"topology": {"hops": [{"name": "gateway"}]}, "phases": {"warmup": 1, "fault": 2, "recovery": 1},
        "fault": {"directive": "abort:UNAVAILABLE", "ratio": 50}}  # fmt: skip
STACK = {
    "stack": {
        "edge": {"address": "127.0.0.1:50051", "method": "drill.v1.Demo/Call"},
        "hops": [{"name": "cart", "metrics": ["http://127.0.0.1:9464/metrics"]}],
        "prometheus": "http://127.0.0.1:9090",
        "load": {"command": "true", "selector": '{job="loadgen"}'},
        "configs": [{"name": "as-is"}],
    },
    "phases": BASE["phases"], "fault": BASE["fault"],
}  # fmt: skip


@pytest.mark.parametrize("driver", DRIVERS, ids=[d.__name__ for d in DRIVERS])
def test_every_driver_answers_every_question_the_runner_asks_in_the_interfaces_words(driver):
    assert {"start", "stop", "wait", "exact_counts", "edge_selector", "observed_hits", "message_counts"} <= set(
        QUESTIONS)  # fmt: skip
    for name in QUESTIONS:
        want, got = inspect.signature(getattr(LoadDriver, name)), inspect.signature(getattr(driver, name))
        assert list(got.parameters) == list(want.parameters), (driver.__name__, name, got)
        assert inspect.iscoroutinefunction(getattr(driver, name)) == inspect.iscoroutinefunction(
            getattr(LoadDriver, name)), (driver.__name__, name)  # fmt: skip
    assert isinstance(driver.name, str) and driver.name


def choose(data: dict, tmp_path: pathlib.Path, counts: EdgeCounts):
    plan = from_dict(data)
    variant = plan.variants[0]
    return driver_for(plan, variant, 2, tmp_path, target_for(plan, lambda _: None), counts=counts,
                      metrics_url="http://127.0.0.1:1/metrics")  # fmt: skip


def test_the_runners_own_load_keeps_the_edges_exact_counts_and_knows_its_hits(tmp_path):
    counts = EdgeCounts("loadgen")
    load = choose(BASE, tmp_path, counts)
    assert isinstance(load, AioLoad) and (load.trial, load.config_label) == (2, "plain")
    assert load.exact_counts() is counts and load.edge_selector() is None
    assert load.metrics_endpoints() == [(None, "http://127.0.0.1:1/metrics")]
    assert load.observed_hits() == [] and load.expected_hits() == []  # nothing sent yet: known, and empty
    assert load.message_counts() is None  # the demo's unary Call: one message each way per call


def test_a_locust_load_reads_its_edge_from_its_processes_and_knows_only_the_ids_it_logged(tmp_path):
    profile = {"driver": "locust", "profile": "smoke"}
    assert (ROOT / "loadtests" / "profiles" / "smoke.conf").exists()
    load = choose({**BASE, "traffic": profile}, tmp_path, EdgeCounts("loadgen"))
    assert isinstance(load, LocustLoad) and load.trial == 2
    assert (load.exact_counts(), load.edge_selector(), load.observed_hits(), load.message_counts()) == (None,) * 4
    assert load.expected_hits() == [] and load.stop_tagging() is None


def test_a_stacks_own_load_is_read_back_from_prometheus_by_its_selector(tmp_path):
    load = choose(STACK, tmp_path, EdgeCounts("loadgen"))
    assert isinstance(load, CommandLoad) and load.trial == 2
    assert load.edge_selector() == '{job="loadgen"}'
    assert (load.exact_counts(), load.expected_hits(), load.observed_hits(), load.message_counts()) == (None,) * 4
    scraped = {**STACK, "stack": {**STACK["stack"], "load": {"command": "true", "metrics": ["http://127.0.0.1:9646/m"]}}}
    load = choose(scraped, tmp_path, EdgeCounts("loadgen"))
    assert load.edge_selector() is None and load.metrics_endpoints() == [("loadgen", "http://127.0.0.1:9646/m")]


def test_the_trials_stage_never_asks_which_driver_it_has():
    """The runner asks the interface; a test of a driver's type in trials/ is what this interface replaced."""
    trials = ROOT / "harness" / "drills" / "trials"
    for path in trials.glob("*.py"):
        text = path.read_text()
        for driver in DRIVERS:
            assert driver.__name__ not in text, (path.name, driver.__name__)
