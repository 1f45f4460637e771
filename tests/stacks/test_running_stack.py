"""`drill run` on a stack it did not start: the 4-hop demo chain as separate processes
(harness/testing/external_chain.py), switched between configurations by the stack file's commands,
2 trials per configuration.

What the wiring guarantees, whatever the machine is doing: the switch commands ran in A B A B order; every
trial has calls at every hop (scraped from the hops' own /metrics URLs); the hits the services audited are
exactly the ids the load tagged and the hit function picks (`drill hits`). The story (naive storms, budget
holds) is a saved run in benchmarks/results/, not an assertion.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from harness.core.environ import environ_now
from harness.drills.plan.outputs import SeriesKey
from harness.drills.readings.series import read_series_document
from tests.conftest import ROOT, drill_process

pytestmark = pytest.mark.slow

NET = "127.77.0"  # a loopback block of its own: each hop keeps a deployment's fixed ports on its own address
HOPS = ("gateway", "order", "account", "ledger")


drill = drill_process


def stack_plan(chain_dir, configs=("naive", "budget")) -> dict:
    switch = f"{sys.executable} -m harness.testing.external_chain up {{config}} --dir {chain_dir} --net {NET}"
    return {
        "name": "external-chain",
        "seed": 7,
        "stack": {
            "edge": {"address": f"{NET}.1:50051", "method": "drill.v1.Demo/Call", "request": {"payload": "x"}},
            "hops": [{"name": h, "metrics": [f"http://{NET}.{i + 1}:9464/metrics"]} for i, h in enumerate(HOPS)],
            "audit": {"files": [f"{chain_dir}/*.log"]},
            # the switch returns once every hop wrote its ready file: the edge's health checks pass at once, so
            # three in a row 0.2 s apart (not the default 1 s: 1.6 s less per trial) say what three 1 s apart say
            "configs": [{"name": c, "switch": switch.format(config=c), "switch_timeout_s": 90,
                         "ready": {"checks": 3, "interval_s": 0.2}} for c in configs],  # fmt: skip
        },
        "traffic": {"organic_users": 2, "organic_rate": 10, "drill_users": 1, "drill_rate": 10, "timeout_s": 2.0},
        "fault": {"directive": "abort:UNAVAILABLE", "ratio": 50, "target": "ledger"},
        "phases": {"warmup": 1, "fault": 2, "recovery": 2},  # ~10 hit ids a trial: what the wiring needs
        "slo": {"max_error_rate": 0.05, "hold_s": 2, "traffic": "organic", "window_s": 2},
        "trials": 2,
    }


@pytest.fixture(scope="module")
def chain_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stack")
    chain_dir = tmp / "chain"
    plan = tmp / "stack.yaml"
    plan.write_text(yaml.safe_dump(stack_plan(chain_dir)))
    out = tmp / "out"
    try:
        proc = drill("run", str(plan), "--out", str(out), "--no-live")
    finally:
        down = [sys.executable, "-m", "harness.testing.external_chain", "down", "--dir", str(chain_dir)]
        subprocess.run(down, cwd=ROOT, timeout=60, env=environ_now(PYTHONPATH=str(ROOT)))
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
    return proc, results, out, chain_dir


def test_the_switch_commands_ran_in_interleaved_order(chain_run):
    proc, results, _, chain_dir = chain_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (chain_dir / "switches.log").read_text().split() == ["naive", "budget", "naive", "budget"]
    trials = sorted((t["started_unix"], name) for name, c in results["configs"].items() for t in c["trials"])
    assert [name for _, name in trials] == ["naive", "budget", "naive", "budget"]


def test_every_trial_has_calls_at_every_hop(chain_run):
    _, results, out, _ = chain_run
    _, series = read_series_document(json.loads((out / "series.json").read_text()))
    for name, trials in series.items():
        assert len(trials) == 2
        for s in trials:
            for hop in HOPS:
                assert sum(v or 0.0 for v in s.values.get(SeriesKey("srv", hop), [])) > 0, (name, hop)
    assert results["hops"] == list(HOPS)


def test_the_audited_hits_are_exactly_the_predicted_ones(chain_run):
    _, results, _, _ = chain_run
    for name, c in results["configs"].items():
        for t in c["trials"]:
            h = t["hits"]
            # the ledger's audit lines in the trial's time range: the services' own word on what they hit
            assert h["expected"] > 0 and (h["observed"], h["observed_digest"]) == (h["expected"],
                                                                                  h["expected_digest"]), (name, h)


def test_a_failing_switch_stops_the_run_with_its_last_line(tmp_path):
    plan = stack_plan(tmp_path / "chain", configs=("naive",))
    plan["stack"]["configs"][0]["switch"] = "echo switching; echo 'no such overlay: naive' >&2; exit 4"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(plan))
    proc = drill("run", str(path), "--out", str(tmp_path / "out"), "--no-live")
    lines = [line for line in proc.stderr.splitlines() if line.startswith("drill:")]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "switch to naive failed (exit 4): no such overlay: naive" in lines[0]
    assert "may be partly switched" in lines[0] and "Traceback" not in proc.stderr
