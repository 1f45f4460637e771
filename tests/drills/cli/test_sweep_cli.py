"""`drill sweep` as a user runs it: bad input in one line (exit 2), and one live sweep through the real runner."""

from __future__ import annotations

import json
import pathlib

import pytest

from tests.conftest import drill_inprocess, drill_process


@pytest.mark.parametrize(("args", "says"), [
    (["metastable"], "give the axis: --vary KEY=LO..HI"),
    (["metastable", "--vary", "nope=1..3"], "the plan has no key 'nope'"),
    (["metastable", "--vary", "phases.fault=3..1"], "an empty range"),
    (["metastable", "--vary", "phases.fault=1..3", "--vary", "fault.ratio=1..2", "--vary", "traffic.drill_rate=1..2"],
     "at most 2 --vary axes"),
    (["metastable", "--vary", "phases.fault=1..3", "--vary", "phases.fault=1..2"], "phases.fault given twice"),
    (["metastable", "--vary", "phases.fault=1..3", "--vary", "fault.ratio=1..200"], "fault.ratio: Input should be"),
    (["metastable", "--vary", "phases.fault=1..3", "--vary", "fault.ratio=1..2", "--at", "2"], "--at takes one"),
    (["metastable", "--vary", "phases.fault=1..99999"], "phases.fault: Input should be less than or equal to"),
    (["metastable", "--vary", "slo.traffic=1..2"], "not a number in the plan ('organic')"),
    (["metastable", "--vary", "phases.fault"], "expected KEY=LO..HI with numbers"),
    (["metastable", "--vary", "fault.ratio=1.5..20"], "a whole number in the plan"),
    (["retry-storm", "--vary", "fault.delay=1..20"], "is not delay:MS"),
    (["metastable", "--vary", "phases.fault=1..3", "--budget-min", "0"], "--budget-min 0: must be above 0"),
    (["--vary", "phases.fault=1..3"], "name a plan"),
    (["nope-plan", "--vary", "phases.fault=1..3"], "nope-plan"),
    (["metastable", "--vary", "phases.fault=1..20", "--at", "2.5"], "--at 2.5: not a value of the axis (1, 2, 3"),
    (["metastable", "--vary", "phases.fault=1..3", "--at", "2", "--render", "k8s"], "--at and --render do not go"),
    (["--collect", "/nonexistent-sweep"], "--collect /nonexistent-sweep: no sweep.json there"),
])  # fmt: skip
def test_bad_input_is_one_line_exit_2(args: list[str], says: str, tmp_path: pathlib.Path) -> None:
    r = drill_inprocess("sweep", *args, "--out", str(tmp_path / "out"))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("drill: "), r.stderr
    assert says in lines[0], lines[0]
    assert not (tmp_path / "out" / "sweep.json").exists()


def test_resume_takes_everything_from_its_sweep_json(tmp_path: pathlib.Path) -> None:
    r = drill_inprocess("sweep", "--resume", str(tmp_path))
    assert r.returncode == 2 and "no sweep.json there" in r.stderr
    (tmp_path / "sweep.json").write_text("{}")
    r = drill_inprocess("sweep", "metastable", "--vary", "phases.fault=1..3", "--resume", str(tmp_path))
    assert r.returncode == 2 and "drop PLAN, --vary" in r.stderr, r.stderr
    r = drill_inprocess("sweep", "metastable", "--vary", "phases.fault=1..3", "--out", str(tmp_path))
    assert r.returncode == 2 and f"--resume {tmp_path} goes on with it" in r.stderr, r.stderr


@pytest.mark.slow
def test_a_live_sweep_runs_the_runners_trials_saves_each_and_resumes_without_repeating(tmp_path) -> None:
    """The metastable plan (quick phases), naive only, the fault's length at 1 s and 3 s, one trial each: the
    two ends of the axis, each the runner's ordinary trial in its own point directory."""
    out = tmp_path / "sweep"
    r = drill_process("sweep", "metastable", "--quick", "--vary", "phases.fault=1..3", "--step", "2",
                      "--max-trials", "1", "--configs", "naive", "--out", str(out), timeout=180)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    saved = json.loads((out / "sweep.json").read_text())
    assert [(t["config"], t["value"]) for t in saved["trials"]] == [("naive", 1), ("naive", 3)]
    for t in saved["trials"]:  # each record is what the runner wrote for that trial
        (trial,) = json.loads((out / t["point"] / "results.json").read_text())["configs"]["naive"]["trials"]
        assert trial["breached"] == t["breached"] and trial.get("mttr_s") == t["mttr_s"], (t, trial)
        assert t["never_restored"] == (trial["breached"] and trial.get("mttr_s") is None)
        assert json.loads((out / t["point"] / "results.json").read_text())["plan"] == "metastable"
    assert saved["complete"] and r.stdout.splitlines()[0] == saved["verdict"]
    assert saved["verdict"].startswith("naive ")
    assert "sweep: phases.fault=1 for naive (0 points, 0 trials done; at most about" in r.stderr
    page = (out / "sweep.html").read_text()
    assert page.count("<circle ") == 2 and saved["verdict"].split(" (")[0] in page
    again = drill_process("sweep", "--resume", str(out), timeout=60)
    assert again.returncode == 0 and "resuming" in again.stderr and "trials done" not in again.stderr, again.stderr
    assert json.loads((out / "sweep.json").read_text())["trials"] == saved["trials"]
