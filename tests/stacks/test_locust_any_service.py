"""A Locust-driven drill on a service of the user's own hits exactly the ids the runner's own load hits.

The service (tests/loadtests/notes_service.py: its own proto, compiled in the test, reflection on, the
interceptors added as the README says, its audit lines in a log) is drilled twice with the same plan and seed:
once by the runner's aio load, once by `stack.load`, a Locust process started per trial with this project's
locustfile and nothing about the method on its command line — the runner passes the stack's edge (method,
JSON request) in `LOCUST_DRILL_*` variables, and the Locust user for any service calls it by reflection.
Both drivers schedule call n of user `drill0` at the same time of the trial and tag it by that time, so the
ids the service audited are the same set: the digests results.json carries agree, and equal the set the
hit function predicts.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest
import yaml

from harness.core.faults import is_hit
from harness.drills.load.schedule import ids_digest, request_id
from harness.procs.ports import private_loopback
from tests.conftest import drill_process, side_by_side
from tests.stacks.notes_server import notes_server

pytestmark = pytest.mark.slow

SEED = 5
LOCUST = pathlib.Path(sys.executable).with_name("locust")


def plan(notes: dict, load: dict | None = None, **edge) -> dict:
    stack = {
        "edge": {"address": f"127.0.0.1:{notes['port']}", "method": "notes.v1.Notes/Put", "request": {"text": "a"},
                 **edge},  # fmt: skip
        "hops": [{"name": "notes", "metrics": [f"http://127.0.0.1:{notes['metrics_port']}/metrics"]}],
        "audit": {"files": [notes["log"]]},  # the service's own word on what it hit, for both drivers
        "configs": [{"name": "mine", "ready": {"checks": 2, "timeout_s": 20, "interval_s": 0.2}}],
    }
    if load is not None:
        stack["load"] = load
    return {
        "name": "notes",
        "seed": SEED,
        "stack": stack,
        "traffic": {"organic_users": 1, "organic_rate": 10, "drill_users": 1, "drill_rate": 10, "timeout_s": 2.0},
        "fault": {"directive": "abort:UNAVAILABLE", "ratio": 100, "target": "notes"},
        "phases": {"warmup": 1, "fault": 3, "recovery": 2},
        "slo": {"max_error_rate": 0.05, "hold_s": 2, "traffic": "drill"},
    }


def locust_load(notes: dict, port: int = 9646) -> dict:
    """The stack's load: this project's locustfile, no method or request on its command line. Its /metrics on a
    fixed `port` of an address of this test process's own: two runs of this process side by side take two ports."""
    here = private_loopback()  # no other process of ours listens there
    return {
        "command": f"{LOCUST} -f loadtests/locustfile.py --headless --exit-code-on-error 0 "
                   f"--host 127.0.0.1:{notes['port']} --drill-metrics-port {port} --drill-metrics-host {here} "
                   "--drill-metrics-fixed",
        "metrics": [f"http://{here}:{port}/metrics"],
        "start_timeout_s": 60,
    }  # fmt: skip


def run(tmp_path, data: dict, name: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / name
    proc = drill_process("run", str(path), "--out", str(out), "--no-live")
    return proc, out


def _run_on_a_notes_service_of_its_own(tmp_path, name: str, make_plan) -> tuple:
    """`drill run` of `make_plan(notes)` on a notes service of its own: (the process, its --out)."""
    (tmp_path / "notes").mkdir()
    with notes_server(tmp_path / "notes", SEED) as notes:
        return run(tmp_path, make_plan(notes), name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The file's three drills side by side, each on a notes service of its own: its audit log holds only that
    run's hits (the aio and Locust runs tag the same ids, so on one service either could stand for the other)."""
    plans = {
        "aio": plan,
        "locust": lambda notes: plan(notes, locust_load(notes)),
        "bad": lambda notes: plan(notes, locust_load(notes, port=9647), request={"text": 7}),
    }
    tmp = {name: tmp_path_factory.mktemp(name) for name in plans}
    with side_by_side(**{
        name: (lambda name=name: _run_on_a_notes_service_of_its_own(tmp[name], name, plans[name])) for name in plans
    }) as results:  # fmt: skip
        yield results


def test_a_locust_driven_drill_hits_the_same_ids_as_the_runners_load(runs):
    aio, aio_out = runs["aio"]()
    assert aio.returncode in (0, 3), aio.stderr[-3000:]
    loc, loc_out = runs["locust"]()
    assert loc.returncode in (0, 3), loc.stderr[-3000:]
    a = json.loads((aio_out / "results.json").read_text())["configs"]["mine"]["trials"][0]
    b = json.loads((loc_out / "results.json").read_text())["configs"]["mine"]["trials"][0]
    assert (a["driver"], b["driver"]) == ("aio", "external")
    # the drill user (2nd of 2 users, offset 1/2 of its period) sends notes-5-drill0-N-MIX at N/10 + 1/20 s after
    # the trial's first second; those inside the fault window [1 s, 4 s) carry the directive. At ratio 100
    # every one of them is hit, so a schedule shifted by a single call changes the set (at a lower ratio a
    # shift can keep it by chance: ids that enter and leave the window may all be misses)
    tagged = [request_id("notes", SEED, "mine", 1, "drill0", n) for n in range(60) if 1 <= n / 10 + 1 / 20 < 4]
    predicted = {i for i in tagged if is_hit(SEED, i, "abort:UNAVAILABLE", 100)}
    assert len(predicted) == 30
    digest = (len(predicted), ids_digest(predicted))
    assert (a["hits"]["expected"], a["hits"]["expected_digest"]) == digest, a["hits"]
    assert (a["hits"]["observed"], a["hits"]["observed_digest"]) == digest, a["hits"]  # the service's audit
    assert (b["hits"]["observed"], b["hits"]["observed_digest"]) == digest, b["hits"]  # the same, under Locust
    # Locust called the stack's method (the runner's read of its counters has both classes' calls)
    assert b["requests_by_traffic"]["organic"] > 0 and b["requests_by_traffic"]["drill"] > 0
    assert b["drill_error_rate_during_fault"] > 0 and b["blast_radius"] == 0.0


def test_a_stack_edge_locust_cannot_call_fails_the_run_with_locusts_one_line(runs):
    proc, _ = runs["bad"]()
    lines = [line for line in proc.stderr.splitlines() if line.startswith("drill:")]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "load command failed (exit 2): drill: locust: --drill-request does not fit notes.v1.Note" in lines[0]
