"""End to end: a Locust-driven drill is open loop and knows its hits; a load that falls behind says so."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import pytest

from harness.core.environ import environ_now
from harness.drills.readings.series import read_series_document
from tests.conftest import ROOT, side_by_side

pytestmark = pytest.mark.slow  # a live run: scheduled first (tests/conftest.py)

#: one hop pair, the ledger uncapped: every tagged call and each of its retries reaches the ledger
STORM = {
    "name": "storm-locust",
    "seed": 13,
    "topology": {"hops": [{"name": "gateway", "work_ms": 1}, {"name": "ledger", "work_ms": 1}]},
    # a generous timeout: a tagged call reaches the ledger even on a starved machine (the hit set is exact)
    "traffic": {
        "organic_users": 2,
        "organic_rate": 10,
        "drill_users": 1,
        "drill_rate": 10,
        "timeout_s": 5.0,
        "driver": "locust",
        "profile": "smoke",
    },  # fmt: skip
    "fault": {"directive": "abort:UNAVAILABLE", "ratio": 100, "target": "ledger"},
    "phases": {"warmup": 2, "fault": 4, "recovery": 2},
    "slo": {"max_error_rate": 0.05, "hold_s": 2, "traffic": "organic"},
    "configs": ["naive"],
}


def _drill_run(tmp_path, plan: str | dict, *extra: str) -> dict:
    if isinstance(plan, dict):
        path = tmp_path / f"{plan['name']}.yaml"
        path.write_text(json.dumps(plan))
        plan = str(path)
    out = tmp_path / "out"
    env = environ_now(PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", plan, "--out", str(out), "--no-live", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


def _series(tmp_path, config: str):
    _, trials = read_series_document(json.loads((tmp_path / "out" / "series.json").read_text()))
    return trials[config][0]


#: one call in flight per drill user, each held 500 ms by the fault: at most 2 calls/s of the planned 10
#: (that the flag names only the class that fell behind is tests/drills/analysis/test_offered_load.py's, on series)
BEHIND = {
    **STORM, "name": "behind", "configs": ["plain"],
    "traffic": {**STORM["traffic"], "driver": "aio", "profile": None, "max_inflight": 1, "timeout_s": 1.0},
    "fault": {"directive": "delay:500", "ratio": 100},
    "phases": {"warmup": 1, "fault": 3, "recovery": 1},
    "slo": {"max_error_rate": 0.05, "hold_s": 2, "traffic": "drill"},
}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The two drills of this file, side by side (each its own topology, load and ports): each test takes its
    run's results.json and output directory's parent."""

    tmp = {plan["name"]: tmp_path_factory.mktemp(plan["name"]) for plan in (STORM, BEHIND)}  # not in a thread

    def run(plan: dict):
        return _drill_run(tmp[plan["name"]], plan), tmp[plan["name"]]

    with side_by_side(storm=lambda: run(STORM), behind=lambda: run(BEHIND)) as results:
        yield results


def test_a_locust_driven_naive_storm_keeps_its_arrival_rate_and_hits_exactly_the_predicted_ids(runs):
    """One Locust-driven trial of a naive chain whose ledger aborts every drill call in the fault: the ids the
    Locust processes tagged and the hit function picks are exactly the ids the ledger audited, and naive
    retried them — more injected hits than hit ids, never more than its 4 attempts per call. The load checks
    itself against the plan (offered_rps); that the schedule is open loop is tests/loadtests/test_openloop.py's,
    and whether a busy box kept it on time is what `load_fell_behind` reports, not something to assert."""
    r, tmp_path = runs["storm"]()
    t = r["configs"]["naive"]["trials"][0]
    assert t["driver"] == "locust"
    assert {tr: o["planned"] for tr, o in t["offered_rps"].items()} == {"organic": 20.0, "drill": 10.0}
    h = t["hits"]
    assert h["expected"] > 0 and h["observed_digest"] == h["expected_digest"], h
    # per id from the ledger's audit lines (exact; the scraped hits series is interpolated where a scrape was
    # missed): every hit id was injected on 1 to 4 attempts, and naive retried some of them
    per_id = collections.Counter()
    for log in (tmp_path / "out" / "logs").rglob("ledger-*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if '"fault_hit"' in line:
                per_id[json.loads(line[line.find("{") :])["request_id"]] += 1
    assert len(per_id) == h["expected"], (len(per_id), h)
    assert all(1 <= n <= 4 for n in per_id.values()), per_id
    assert sum(per_id.values()) > h["expected"], per_id


def test_a_load_that_cannot_keep_up_falls_behind_and_is_insufficient_data(runs):
    r, tmp_path = runs["behind"]()
    t = r["configs"]["plain"]["trials"][0]
    assert t["offered_rps"]["drill"]["fell_behind"]
    assert t["offered_rps"]["drill"]["achieved"] < 0.9 * t["offered_rps"]["drill"]["planned"] == 9.0
    assert t["load_fell_behind"] is True and t["insufficient_data"] is True
    assert r["configs"]["plain"]["summary"]["valid_trials"] == 0
    assert r["verdict"]["winner"] is None and "enough data" in r["verdict"]["text"]
    assert "load fell behind" in (tmp_path / "out" / "report.html").read_text()
