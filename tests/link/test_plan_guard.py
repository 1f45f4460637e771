"""A guard's trip during a link fault removes the toxic at once (the one-way stop), says so among the trip's
actions, and the trial's link record shows how long it acted: `drill run` on a topology with a link."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from harness.core.environ import environ_now
from tests.conftest import ROOT

PLAN = {
    "name": "link-guard",
    "topology": {
        "hops": [{"name": "account", "work_ms": 1}, {"name": "ledger", "replicas": 2, "work_ms": 1}],
        "links": [{"name": "ledger-1", "hop": "ledger", "replica": 1}],
    },
    "traffic": {"organic_users": 2, "organic_rate": 10, "drill_users": 0, "timeout_s": 3},
    "fault": {"link": {"link": "ledger-1", "toxic": "timeout", "attributes": {"timeout": 0}}},
    # the fault starts at 3 s; the wall clock trips at 5 s, 2 s into it; 8 s of fault would follow without it
    "phases": {"warmup": 3, "fault": 8, "recovery": 1},
    "guard": {"stop_when": [{"kind": "wall_clock", "after_s": 5}]},
    "variants": [{"name": "naive", "config": str(ROOT / "harness/configs/keepalive-none.yaml")}],
}


@pytest.mark.slow
def test_a_guards_trip_removes_the_link_toxic_at_once(tmp_path):
    path = tmp_path / "link-guard.yaml"
    path.write_text(yaml.safe_dump(PLAN))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(path), "--out", str(out), "--no-live"],
        cwd=ROOT, env=environ_now(PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 5, proc.stderr[-3000:]  # a guard stopped the drill
    trial = json.loads((out / "results.json").read_text())["configs"]["naive"]["trials"][0]
    assert "every link toxic removed (1 link(s))" in trial["guard"]["actions"]["services"]
    link = trial["link"]
    assert link["set"] and link["stopped"] == "guard"
    # set at the fault's start (3 s), removed at the trip: the wall clock is checked once a second, so at most
    # one tick after 5 s; the tick itself may be late by a busy loop's second. Far below the 8 s it would act.
    assert 1.0 <= link["acted_s"] <= 4.0, link
