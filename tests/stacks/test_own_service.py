"""`drill run` on a service of the user's own (tests/stacks/own_service.py: its own proto, reflection on,
the interceptors added as the README says) — and every way a stack file can be wrong.

The load calls `shop.v1.Cart/Add` with a JSON request typed by the server's reflection; the service injects
itself, so the hits are what it says on the wire: the ids answered with the `x-drill-fault` trailer equal the
ids `drill hits` picks among those the load tagged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from harness.core.faults import is_hit
from harness.drills.load.schedule import ids_digest, request_id
from harness.procs.ports import refused_port
from harness.procs.spawn import spawn, stop_processes
from tests.conftest import ROOT, drill_inprocess, drill_process, side_by_side

SEED = 5


drill = drill_process


def start_cart(tmp, **environ: str | None):
    """The service in its own process, named and switched by its environment alone (a None drops a variable);
    (process, its ports)."""
    ready = tmp / "ready.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRILL_")}
    env.update(PYTHONPATH=str(ROOT), DRILL_SERVICE="cart", DRILL_FAULT_ENABLED="1", DRILL_FAULT_SEED=str(SEED))
    env.update(environ)
    env = {k: v for k, v in env.items() if v is not None}
    proc = spawn([sys.executable, "-m", "tests.stacks.own_service", "--ready-file", str(ready)], tmp / "cart.log", env)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_processes([proc])
            raise AssertionError((tmp / "cart.log").read_text()[-2000:])
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())


@pytest.fixture(scope="module")
def cart(tmp_path_factory):
    proc, ports = start_cart(tmp_path_factory.mktemp("cart"))
    try:
        yield ports
    finally:
        stop_processes([proc])


def plan(cart: dict, **edge) -> dict:
    return {
        "name": "cart",
        "seed": SEED,
        "stack": {
            "edge": {"address": f"127.0.0.1:{cart['port']}", "method": "shop.v1.Cart/Add",
                     "request": {"item": "book", "qty": 2}, **edge},  # fmt: skip
            "hops": [{"name": "cart", "metrics": [f"http://127.0.0.1:{cart['metrics_port']}/metrics"]}],
            "configs": [{"name": "mine", "ready": {"checks": 2, "timeout_s": 20, "interval_s": 0.2}}],
        },
        "traffic": {"organic_users": 1, "organic_rate": 10, "drill_users": 1, "drill_rate": 10, "timeout_s": 2.0},
        "fault": {"directive": "abort:UNAVAILABLE", "ratio": 50, "target": "cart"},
        "phases": {"warmup": 1, "fault": 3, "recovery": 2},
        "slo": {"max_error_rate": 0.05, "hold_s": 2, "traffic": "drill"},
    }


def write(tmp_path, data: dict, name: str = "stack.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def one_line(proc: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("drill:")]
    assert proc.returncode == code and len(lines) == 1, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def _run_on_a_cart(tmp_path, data: dict, *extra: str, **environ: str) -> subprocess.CompletedProcess:
    """`drill run` of the plan made from `data(ports)` on a cart of its own (started with `environ`)."""
    proc, ports = start_cart(tmp_path, **environ)
    try:
        return drill("run", write(tmp_path, data(ports)), "--out", str(tmp_path / "out"), "--no-live", *extra)
    finally:
        stop_processes([proc])


def _late_failure(ports: dict) -> dict:
    data = plan(ports)
    data["trials"] = 2
    data["stack"]["configs"][0]["switch"] = "test \"$DRILL_TRIAL\" != 2 || { echo 'overlay gone' >&2; exit 5; }"
    return data


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """This file's three drills, side by side, each on a cart of its own (so no run's calls or gates are in
    another's counts): each test takes its run's process and output directory's parent."""
    tmp = {name: tmp_path_factory.mktemp(name) for name in ("mine", "seed", "late")}
    with side_by_side(
        mine=lambda: (_run_on_a_cart(tmp["mine"], plan), tmp["mine"]),
        seed=lambda: (_run_on_a_cart(tmp["seed"], plan, "--fail-on", "breach", DRILL_FAULT_SEED="6"), tmp["seed"]),
        late=lambda: (_run_on_a_cart(tmp["late"], _late_failure), tmp["late"]),
    ) as results:
        yield results


@pytest.mark.slow
def test_a_run_on_your_own_service_reports_the_hits_it_marked(runs):
    proc, tmp_path = runs["mine"]()
    assert proc.returncode in (0, 3), proc.stderr[-3000:]
    r = json.loads((tmp_path / "out" / "results.json").read_text())
    t = r["configs"]["mine"]["trials"][0]
    # the drill user (2nd of 2 users, offset 1/2 of its period) sends cart-5-drill0-N-MIX at N/10 + 1/20 s after
    # the load's first second; those inside the fault window [1 s, 4 s) carry the directive
    tagged = [request_id("cart", SEED, "mine", 1, "drill0", n) for n in range(60) if 1 <= n / 10 + 1 / 20 < 4]
    predicted = {i for i in tagged if is_hit(SEED, i, "abort:UNAVAILABLE", 50)}
    h = t["hits"]
    assert (h["expected"], h["expected_digest"]) == (len(predicted), ids_digest(predicted)) and predicted
    # observed = the ids the service answered with the x-drill-fault marker: its word, not a recomputation
    assert (h["marked"], h["marked_digest"]) == (len(predicted), ids_digest(predicted)), h
    assert (h["observed"], h["observed_digest"]) == (h["marked"], h["marked_digest"])
    assert h["as_planned"] is True and h["note"] is None and r["notes"] == []
    assert r["hops"] == ["cart"] and t["requests"] == 2 * 10 * 6


@pytest.mark.slow
def test_a_service_on_another_seed_exits_4_before_any_fail_on_is_judged(runs):
    """Seed 6 in the service, 5 in the plan: hits land (the drill SLO breaches, so `--fail-on breach` holds),
    but on ids the plan's seed does not predict. The drill did not test what it planned: exit 4, not 3."""
    run, tmp_path = runs["seed"]()
    one_line(run, 4, "cart: ", "the seed does not predict", "set DRILL_FAULT_SEED=5", "(--fail-on breach not judged)")
    r = json.loads((tmp_path / "out" / "results.json").read_text())
    (t,) = r["configs"]["mine"]["trials"]
    assert t["breached"] and t["hits"]["as_planned"] is False, t["hits"]
    # the marked ids are the service's seed's, not the plan's: some outside the prediction
    assert t["hits"]["observed_subset_of_expected"] is False and t["hits"]["marked"] > 0


@pytest.mark.parametrize(
    "edge, code, needles",
    [
        ({"method": "shop.v1.Cart/Remove"}, 2, ("shop.v1.Cart has no method 'Remove'", "Add", "Watch")),
        ({"method": "shop.v1.Basket/Add"}, 2, ("no service 'shop.v1.Basket' by reflection", "shop.v1.Cart")),
        ({"request": [{"item": "book"}]}, 2, ("stack.edge.request: a unary method takes one message",)),
        ({"method": "shop.v1.Cart/Watch", "message_rate": 5}, 2, ("stack.edge.message_rate", "server-streaming")),
        ({"request": {"item": "book", "qty": "many"}}, 2, ("does not fit shop.v1.AddRequest",)),
    ],
)  # fmt: skip
def test_a_stack_edge_that_does_not_fit_the_service_is_one_line(cart, tmp_path, edge, code, needles):
    # refused before the load starts: in this process (no child to fork), no interpreter to pay for
    proc = drill_inprocess("run", write(tmp_path, plan(cart, **edge)), "--out", str(tmp_path / "out"), "--no-live")
    one_line(proc, code, *needles)


def test_bad_stack_files_are_refused_before_anything_starts(cart, tmp_path):
    drill = drill_inprocess  # nothing starts: the plan is refused at load
    bad = plan(cart)
    bad["stack"]["hops"][0]["metric"] = bad["stack"]["hops"][0].pop("metrics")
    one_line(drill("run", write(tmp_path, bad), "--out", str(tmp_path / "o")), 2, "stack.hops.0.metric: unknown key")
    both = {**plan(cart), "topology": {"hops": [{"name": "gateway"}]}}
    one_line(drill("run", write(tmp_path, both, "both.yaml"), "--out", str(tmp_path / "o")), 2, "not both")
    sel = plan(cart)
    sel["stack"]["hops"][0] = {"name": "cart", "selector": '{app="cart"}'}
    one_line(drill("run", write(tmp_path, sel, "sel.yaml"), "--out", str(tmp_path / "o")), 2, "stack.prometheus")
    assert not (tmp_path / "o").exists()


def test_an_unreachable_edge_fails_the_run_with_what_the_health_check_saw(cart, tmp_path):
    with refused_port() as port:
        data = plan(cart)
        data["stack"]["edge"]["address"] = f"127.0.0.1:{port}"
        data["stack"]["configs"][0]["ready"] = {"checks": 1, "timeout_s": 2, "interval_s": 0.5}
        proc = drill_inprocess("run", write(tmp_path, data), "--out", str(tmp_path / "out"), "--no-live")
    one_line(proc, 1, f"127.0.0.1:{port} did not pass 1 health checks", "UNAVAILABLE")


def test_a_switch_that_outlives_its_timeout_is_stopped_and_said(cart, tmp_path):
    data = plan(cart)
    data["stack"]["configs"][0].update({"switch": "sleep 30", "switch_timeout_s": 1})
    proc = drill_inprocess("run", write(tmp_path, data), "--out", str(tmp_path / "out"), "--no-live")
    one_line(proc, 1, "switch to mine did not finish in 1 s (stopped)", "may be partly switched")


@pytest.mark.slow
def test_a_failure_late_in_a_run_keeps_the_trials_that_finished(runs):
    proc, tmp_path = runs["late"]()
    out = tmp_path / "out"
    one_line(proc, 1, "switch to mine failed (exit 5): overlay gone", "(at mine trial 2)", "1 finished trial",
             f"drill analyze --series {out / 'series.json'}")  # fmt: skip
    r = json.loads((out / "results.json").read_text())
    assert r["failed"] == {"config": "mine", "trial": 2, "error": r["failed"]["error"]}
    assert len(r["configs"]["mine"]["trials"]) == 1 and (out / "report.html").exists()
    again = drill("analyze", "--series", str(out / "series.json"), "--out", str(tmp_path / "again"))
    assert again.returncode in (0, 3), again.stderr
