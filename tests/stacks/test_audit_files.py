"""`stack.audit.files`: globs read from the plan file's folder (as `stack.edge` and `stack.proxy` paths are),
and a glob that matches no file refused before the first fault when a trial expects hits from the audit lines.

The service is the notes service (tests/stacks/notes_server.py), whose audit lines go to `notes.log` in its own
folder; each stack file here is saved in that folder and names the log relatively, while `drill` runs from the
repository (tests.conftest: cwd=ROOT), where no `notes.log` is.
"""

from __future__ import annotations

import json
import pathlib
import urllib.request

import pytest
import yaml

from harness.core.faults import is_hit
from harness.core.ids import request_id
from harness.drills.load.schedule import ids_digest
from harness.drills.plan.files import load_plan
from tests.conftest import drill_inprocess, drill_process
from tests.stacks.notes_server import notes_server
from tests.stacks.test_own_service import one_line

SEED = 5


@pytest.fixture(scope="module")
def notes(tmp_path_factory):
    with notes_server(tmp_path_factory.mktemp("notes"), SEED) as info:
        yield info


def plan(notes: dict, files: list[str], **stack) -> dict:
    return {
        "name": "notes",
        "seed": SEED,
        "stack": {
            "edge": {"address": f"127.0.0.1:{notes['port']}", "method": "notes.v1.Notes/Put", "request": {"text": "a"}},
            "hops": [{"name": "notes", "metrics": [f"http://127.0.0.1:{notes['metrics_port']}/metrics"]}],
            "audit": {"files": files},
            "configs": [{"name": "mine", "ready": {"checks": 2, "timeout_s": 20, "interval_s": 0.1}}],
            **stack,
        },
        "traffic": {"organic_users": 1, "organic_rate": 10, "drill_users": 1, "drill_rate": 10, "timeout_s": 2.0},
        "fault": {"directive": "abort:UNAVAILABLE", "ratio": 50, "target": "notes"},
        "phases": {"warmup": 1, "fault": 2, "recovery": 1},
        "slo": {"max_error_rate": 0.05, "hold_s": 1, "traffic": "drill"},
    }


def beside_the_log(notes: dict, data: dict, name: str) -> str:
    """The stack file saved in the service's folder (where notes.log is), its path."""
    path = pathlib.Path(notes["log"]).parent / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def drill_calls(notes: dict) -> float:
    """The service's drill_server_calls_total, summed: moved by any call that reached it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{notes['metrics_port']}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("drill_server_calls_total"))  # fmt: skip


def test_audit_globs_are_read_from_the_plan_files_folder_and_absolute_ones_stay(tmp_path, monkeypatch):
    folder = tmp_path / "plans"
    folder.mkdir()
    data = plan({"port": 1, "metrics_port": 2}, ["logs/*.log", "/var/log/shop/*.log", "*/../x.log"])
    (folder / "stack.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)  # the current folder is not the plan's
    files = load_plan("plans/stack.yaml").stack.audit.files
    # joined to the plan's folder, the glob itself untouched (`*/..` is not collapsed: it is the user's pattern)
    assert files == [f"{folder.resolve()}/logs/*.log", "/var/log/shop/*.log", f"{folder.resolve()}/*/../x.log"]


@pytest.mark.slow
def test_a_relative_glob_finds_the_services_log_whatever_the_current_folder_and_a_switch_may_create_one(notes):
    """The hits the run reports are the service's own audit lines, read through `notes.log` relative to the plan
    file. A second glob matches only what the configuration's switch creates: the check runs after the switch
    (and the edge's ready probe), so that setup is not refused by the run; the dry run, which runs no switch,
    warns about it instead."""
    folder = pathlib.Path(notes["log"]).parent
    made = folder / "switched"
    data = plan(notes, ["notes.log", "switched/*.log"])
    data["stack"]["configs"][0]["switch"] = f"mkdir -p {made} && touch {made}/started.log"
    path = beside_the_log(notes, data, "relative.yaml")
    dry = drill_inprocess("run", path, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"  ok  stack.audit.files[0] {folder}/notes.log: 1 file ({folder}/notes.log)" in dry.stdout, dry.stdout
    assert f"  warn  stack.audit.files[1] matches no file: nothing at {folder}/switched/*.log" in dry.stdout
    assert not made.exists()  # the dry run ran no switch
    out = folder / "out-relative"
    run = drill_process("run", path, "--out", str(out), "--no-live")
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"preflight ok  stack.audit.files[1] {made}/*.log: 1 file" in run.stderr, run.stderr[-3000:]
    r = json.loads((out / "results.json").read_text())
    (t,) = r["configs"]["mine"]["trials"]
    # the drill user (2nd of 2 users, offset 1/2 of its period) sends call N at N/10 + 1/20 s after the trial's
    # first second (id notes-5-drill0-N-MIX of configuration mine, trial 1); those in the fault window [1 s, 3 s)
    # carry the directive
    tagged = [request_id("notes", SEED, "mine", 1, "drill0", n) for n in range(40) if 1 <= n / 10 + 1 / 20 < 3]
    hit = {i for i in tagged if is_hit(SEED, i, "abort:UNAVAILABLE", 50)}
    h = t["hits"]
    assert hit and (h["observed"], h["observed_digest"]) == (len(hit), ids_digest(hit)), h  # its audit lines
    assert h["as_planned"] is True and r["notes"] == [], (h, r["notes"])


def test_a_glob_that_matches_no_file_is_refused_before_any_call_when_hits_are_expected(notes):
    """Exit 2 on one line that says which glob and where it looked, in the dry run and in the run: no call was
    sent (the service's counters did not move) and no trial ran."""
    folder = pathlib.Path(notes["log"]).parent
    path = beside_the_log(notes, plan(notes, ["notes.log", "logs/*.log"]), "typo.yaml")
    before = drill_calls(notes)
    needles = (f"stack.audit.files[1] matches no file: nothing at {folder}/logs/*.log",
               f"(a relative glob is read from the plan file's folder, {folder})", "mine expects hits",
               "nothing was sent")  # fmt: skip
    dry = drill_inprocess("run", path, "--dry-run")
    one_line(dry, 2, *needles)
    assert f"  fail  stack.audit.files[1] matches no file: nothing at {folder}/logs/*.log" in dry.stdout
    run = drill_inprocess("run", path, "--out", str(folder / "out-typo"), "--no-live")
    one_line(run, 2, *needles)
    assert drill_calls(notes) == before and not (folder / "out-typo" / "results.json").exists()


def test_a_glob_that_matches_no_file_only_warns_when_no_trial_expects_hits(notes):
    """ratio 0: the seed picks no id, so no audit line is awaited; the dry run says so and goes on."""
    data = plan(notes, ["logs/*.log"])
    data["fault"]["ratio"] = 0
    dry = drill_inprocess("run", beside_the_log(notes, data, "none.yaml"), "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "  warn  stack.audit.files[0] matches no file: " in dry.stdout and "no trial expects hits" in dry.stdout
