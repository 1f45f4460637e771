"""`drill run PLAN --dry-run` on every shipped plan: the local topology starts nothing, writes nothing, and the
expected hits it prints are what `drill hits` says for the ids it names (a live run's equality with them is in
tests/drills/test_guard_live.py; the stack files' dry runs in tests/stacks/test_guard_stack.py)."""

from __future__ import annotations

import io
import json
import re
import sys

import pytest

from harness.drills.plan.files import load_plan, shipped_plans
from harness.procs import spawn
from tests.conftest import drill_inprocess


def hits_of(ids: list[str], *args: str) -> str:
    """`drill hits ARGS --summary` with `ids` on stdin: its summary line."""
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO("".join(i + "\n" for i in ids).encode()))  # drill hits reads bytes
    try:
        proc = drill_inprocess("hits", *args, "--summary")
    finally:
        sys.stdin = saved
    assert proc.returncode == 0, proc.stderr
    return proc.stderr.strip()


@pytest.mark.parametrize(("plan", "quick"), [(p, False) for p in shipped_plans()] + [("retry-storm", True)])
def test_a_dry_run_of_a_shipped_plan_starts_nothing_and_predicts_what_drill_hits_says(plan, quick, tmp_path):
    children = dict(spawn._LIVE)
    out = tmp_path / "out"
    proc = drill_inprocess("run", plan, "--out", str(out), "--dry-run", *(["--quick"] if quick else []))
    assert proc.returncode == 0, proc.stderr
    assert spawn._LIVE == children and not out.exists()  # no process started, nothing written
    text = proc.stdout
    loaded = load_plan(plan, quick=quick)
    ph = loaded.phases
    assert f"timeline  seconds from a trial's first call: warmup 0–{ph.warmup:g} · fault {ph.warmup:g}–" in text
    rows = re.findall(r"^  (\d+)  +(\S+) +(\d+) +\+\d+:\d\d +\+\d+:\d\d–\d+:\d\d +(\S+) +(\S+)$", text, re.M)
    order = [(v.name, str(k)) for k in range(1, loaded.trials + 1) for v in loaded.variants]
    assert [(name, trial) for _, name, trial, _, _ in rows] == order, text
    assert re.search(r"^duration  about \d+ (min \d+ s|s): ", text, re.M)
    # each configuration's expected hits are `drill hits`' for the ids the dry run names
    for v in loaded.variants:
        line = re.search(rf"^  {re.escape(v.name)}: (\d+) of (\d+) tagged ids \(digest \w+\): ids \S+ for (.+)$",
                         text, re.M)  # fmt: skip
        if not v.fault.directive or not v.traffic.drill_users:
            assert line is None and f"  {v.name}: none" in text
            continue
        expected, tagged = int(line[1]), int(line[2])
        ids = [f"{loaded.name}-{loaded.seed}-{user}-{n}" for user, lo, hi in re.findall(r"(\w+) (\d+)–(\d+)", line[3])
               for n in range(int(lo), int(hi) + 1)]  # fmt: skip
        assert len(ids) == tagged
        said = hits_of(ids, "--seed", str(loaded.seed), "--directive", v.fault.directive, "--ratio", str(v.fault.ratio))
        assert said.startswith(f"{expected}/{tagged} hit"), (v.name, said)


def test_a_dry_run_says_how_each_guard_would_act(tmp_path):
    plan = tmp_path / "guarded.yaml"
    plan.write_text(json.dumps({
        "topology": {"hops": [{"name": "gateway"}]}, "phases": {"warmup": 5, "fault": 10, "recovery": 5},
        "guard": {"stop_when": [{"kind": "error_rate", "above": 0.2, "for_s": 3},
                                {"kind": "burn_rate", "above": 14.4, "long_s": 36, "short_s": 3},
                                {"kind": "wall_clock", "name": "cap", "after_s": 12}], "after_trip": "run"},
    }))  # fmt: skip
    proc = drill_inprocess("run", str(plan), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "  error_rate: organic error rate > 20% in 3 s in a row\n" in proc.stdout
    assert "  burn_rate: organic error budget burning > 14.4× over 36 s and 3 s (72.0% of calls failing)" in proc.stdout
    assert "  cap: the trial has run 12 s (trips in every trial, 12 s in: 3 s of fault cut)" in proc.stdout
    assert "  after a trip: the configuration's later trials still run" in proc.stdout
    assert "SIGUSR1 to the trial's hops" in proc.stdout


def test_a_dry_run_fails_with_the_line_a_run_would_give(tmp_path):
    plan = tmp_path / "p.yaml"
    plan.write_text(json.dumps({"topology": {"hops": [{"name": "gateway"}]},
                                "guard": {"stop_when": [{"kind": "prometheus", "expr": "up == 0"}]}}))  # fmt: skip
    for args in ([], ["--no-live"]):  # the same line from the dry run and from the run, before anything starts
        proc = drill_inprocess("run", str(plan), "--out", str(tmp_path / "out"), *args,
                               *(["--dry-run"] if not args else []))  # fmt: skip
        assert proc.returncode == 2 and proc.stderr.strip() == (
            "drill: guard 'prometheus': a prometheus guard needs a Prometheus to ask: its url, stack.prometheus, "
            "or --prometheus auto|URL"), proc.stderr  # fmt: skip
    assert not (tmp_path / "out").exists()
    proc = drill_inprocess("run", str(plan), "--dry-run", "--prometheus", "http://127.0.0.1:9")  # nothing there
    assert proc.returncode == 1 and proc.stderr.startswith("drill: cannot reach Prometheus at http://127.0.0.1:9")
    proc = drill_inprocess("run", str(plan), "--dry-run", "--out", str(plan))
    assert proc.returncode == 2 and "exists and is not a directory" in proc.stderr
