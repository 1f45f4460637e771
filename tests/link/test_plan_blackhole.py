"""`drill run blackhole --quick --fail-on expect` end to end, as a user runs it: one of two ledger replicas
silent behind a link the runner starts, three configurations, the expectation judged and gated.

What each configuration must show follows from how it is built (harness/plans/blackhole.yaml):
- naive (no keepalive): nothing closes the silent connection during the fault, so its `expect` is not met and
  `--fail-on expect` exits 3 naming it (and only the configurations that missed it);
- keepalive-detects: the connection is closed within time + ping timeout (1 + 1 s), but its round robin keeps
  sending calls to that replica's channel: detected, yet no better than naive on success;
- balanced: detected as fast, and gRPC's round robin then sends every call to the replica that answers: the
  best success of the three, first in the ranking.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.core.environ import environ_now
from tests.conftest import ROOT

#: time 1 s + ping timeout 1 s + the relay's poll (20 ms) and the runner's loop lateness (it runs the load too):
#: the plan's own expect (2.5 s)
DETECT_S = 2.5


@pytest.mark.slow
def test_blackhole_quick_detects_with_the_ping_timeout_and_only_balancing_routes_around(tmp_path):
    out = tmp_path / "blackhole"
    env = environ_now(PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "blackhole", "--quick", "--fail-on", "expect",
         "--out", str(out), "--no-live"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    # exit 3: the expectation gate held, on one line, naming naive and not the configurations that met it
    assert proc.returncode == 3, proc.stderr[-3000:]
    said = proc.stderr.strip().splitlines()[-1]  # the lines before it: the run's progress
    assert said.startswith("drill: fail-on expect: naive did not detect within 2.5 s in 1 of 1 trial (never)"), said
    assert "balanced" not in said and "keepalive-detects" not in said and "Traceback" not in proc.stderr
    r = json.loads((out / "results.json").read_text())
    trial = {name: c["trials"][0] for name, c in r["configs"].items()}
    assert set(trial) == {"naive", "keepalive-detects", "balanced"}
    naive, detects, balanced = trial["naive"]["link"], trial["keepalive-detects"]["link"], trial["balanced"]["link"]
    for link in (naive, detects, balanced):
        assert link["set"] and link["mode"] == "user space" and link["connections_held_at_start"] == 1
    assert naive["detected_s"] is None and naive["expect"]["met"] is False
    assert detects["detected_s"] <= DETECT_S and detects["expect"]["met"]
    assert balanced["detected_s"] <= DETECT_S and balanced["expect"]["met"]
    # every call on the faulted connection was touched: ~25 calls/s at account, half of them to ledger-1 (round
    # robin alternates exactly), for the 7-s fault = ~87 for naive, which never detects; at least half of that
    # however late a busy box runs the load
    assert sum(naive["calls_touched"].values()) >= 43
    # only balancing routes around: balanced's success beats both, which lose about half of the fault's calls
    success = {name: t["success_rate"] for name, t in trial.items()}
    assert success["balanced"] > max(success["naive"], success["keepalive-detects"]), success
    assert r["ranking"][0] == "balanced"
    assert any(n.startswith("naive: link ledger-1 timeout") and "NOT met" in n for n in r["notes"]), r["notes"]
