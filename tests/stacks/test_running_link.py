"""`stack.links[].admin`: a `drill link` already running (as in compose/blackhole.yml), driven through its admin API.

The stack: ledger-0 and ledger-1 (`drill serve`), a `drill link` process in front of ledger-1 started here (not by
the runner), and account calling `LEDGER0,LINK` (2-s deadline, round robin per replica) without keepalive or with
keepalive that detects (1 s / 1 s, ping timeout 1 s). `drill run` sets the plan's blackhole on that link when the
fault starts and removes it when it ends; the runner reads what it touched from the link's own record (its admin
API) into results.json's `link` summary, and judges `fault.link.expect` on it: without keepalive nothing closes the
held connection (not met), with it account closes it within time + ping timeout (met). The link's own /metrics
count the same connections, and no toxic is left on the link after the run. The plan's model refuses the mixed
forms. The two configurations' runs go side by side (the `link_runs` fixture), each on its own stack.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest
import yaml

from harness.core.environ import environ_now
from harness.drills.plan.links import StackLink
from harness.procs.spawn import start_serve, stop_processes
from tests.conftest import ROOT, side_by_side


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def _faulted(metrics_url: str) -> float:
    """drill_link_connections_faulted_total{link="ledger-1",toxic="timeout"} from the link's /metrics (0 if absent)."""
    for line in _get(metrics_url).splitlines():
        if line.startswith('drill_link_connections_faulted_total{link="ledger-1",toxic="timeout"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"admin": "http://127.0.0.1:8474", "port": 50052}, "its upstream and port are its own"),
        ({"upstream": "127.0.0.1:50051"}, "give upstream and port"),
        ({"admin": "127.0.0.1:8474"}, "should match pattern"),
    ],
)
def test_a_stack_link_is_either_started_or_running(spec, words):
    with pytest.raises(ValueError, match=words):
        StackLink(name="ledger-1", hop="ledger", replica=1, **spec)


#: keepalive time 1 s + ping timeout 1 s, and the link's loop and account's timers their slack (as the blackhole
#: plan's own expect: harness/plans/blackhole.yaml)
DETECT_S = 2.5


def _run_on_running_link(tmp_path, config: str) -> dict:
    """The stack with account on `config`, `drill run` on it; what the run said and wrote, and what the link's admin
    API and /metrics hold after it (read before the stack stops)."""
    serve = ["--port", "0", "--metrics-port", "-1", "--work-ms", "1"]
    procs = []
    try:
        ledgers = [start_serve(f"ledger-{i}", [*serve, "--service", "ledger", "--instance-id", f"ledger-{i}"],
                               tmp_path) for i in range(2)]  # fmt: skip
        procs += [r.proc for r in ledgers]
        link = start_serve("link", ["--upstream", ledgers[1].address, "--port", "0", "--name", "ledger-1",
                                    "--admin-port", "0", "--metrics-port", "-1"], tmp_path, command="link")  # fmt: skip
        procs.append(link.proc)
        ready = json.loads(link.ready_file.read_text())
        admin = f"http://127.0.0.1:{ready['admin_port']}"
        metrics = f"http://127.0.0.1:{ready['metrics_port']}/metrics"
        account = start_serve("account", [
            *serve, "--service", "account", "--instance-id", "account-0",
            "--downstream", f"{ledgers[0].address},127.0.0.1:{ready['link_port']}",
            "--config", str(ROOT / f"harness/configs/{config}.yaml"),
        ], tmp_path)  # fmt: skip
        procs.append(account.proc)
        plan = {
            "name": "running-link",
            "stack": {
                "edge": {"address": account.address, "method": "drill.v1.Demo/Call"},
                "hops": [{"name": "account", "metrics": [account.metrics_url]},
                         {"name": "ledger", "metrics": [r.metrics_url for r in ledgers]}],
                "links": [{"name": "ledger-1", "hop": "ledger", "replica": 1, "admin": admin}],
            },  # fmt: skip
            "traffic": {"organic_users": 2, "organic_rate": 10, "drill_users": 0, "timeout_s": 3},
            "fault": {"link": {"link": "ledger-1", "toxic": "timeout", "attributes": {"timeout": 0},
                               "expect": {"detect_within_s": DETECT_S}}},  # fmt: skip
            "phases": {"warmup": 3, "fault": 5, "recovery": 2},
            "slo": {"max_error_rate": 0.05, "hold_s": 2},
        }
        path = tmp_path / "running-link.yaml"
        path.write_text(yaml.safe_dump(plan))
        out = tmp_path / "out"
        proc = subprocess.run(
            [sys.executable, "-m", "harness.cli", "run", str(path), "--out", str(out), "--no-live"],
            cwd=ROOT, env=environ_now(PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
        return {"proc": proc, "admin": admin, "results": results, "faulted": _faulted(metrics),
                "toxics": json.loads(_get(f"{admin}/proxies/ledger-1"))["toxics"]}  # fmt: skip
    finally:
        stop_processes(procs)


CONFIGS = ("keepalive-none", "keepalive-detect")


@pytest.fixture(scope="module")
def link_runs(tmp_path_factory):
    """Both configurations' runs, side by side: each its own stack, link and ports (2 x ~20 s of wall-clock phases
    waited once). Each test takes its own run's result (or its exception)."""
    tmp = {c: tmp_path_factory.mktemp(c) for c in CONFIGS}  # made here: the base directory is made once, not raced
    runs = {c: (lambda c=c: _run_on_running_link(tmp[c], c)) for c in CONFIGS}
    with side_by_side(**runs) as results:
        yield results


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS)
def test_a_running_link_is_driven_through_its_admin_api_and_counted_from_its_own_record(link_runs, config):
    run = link_runs[config]()
    proc, admin, r = run["proc"], run["admin"], run["results"]
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-3000:]
    assert "link ledger-1: timeout {timeout: 0} downstream set through " + admin in said, said[-3000:]
    assert "link ledger-1: toxic removed through " + admin in said, said[-3000:]
    # the toxic is gone: the link relays again after the run
    assert run["toxics"] == []
    (result,) = r["configs"].values()
    link = result["trials"][0]["link"]
    # account's one connection through the link was open when the toxic was set; the link's own /metrics
    # counted the connections the toxic acted on, as its record did (the run's toxic is the link's only one)
    assert link["set"] and link["connections_held_at_start"] == 1
    assert link["connections_faulted"] == run["faulted"] >= 1
    # organic calls only (drill_users 0): 10 calls/s at account, half of them to ledger-1 (round robin), for the
    # 5-s fault: ~25 on the held connection until it closed; at least one however late a busy box runs the load
    assert link["calls_touched"]["drill"] == 0 and link["calls_touched"]["organic"] >= 1
    if config == "keepalive-none":
        assert link["detected_s"] is None and link["expect"] == {"detect_within_s": DETECT_S, "met": False}
    else:
        assert 0 < link["detected_s"] <= DETECT_S and link["expect"]["met"] is True
        assert link["closed_s"] == [link["detected_s"]]
    assert any("link ledger-1 timeout {timeout: 0} downstream (user space)" in n for n in r["notes"]), r["notes"]


def test_a_guards_trip_removes_the_toxic_on_a_running_link_and_none_is_set_again(tmp_path):
    """A toxic of the plan's name left on the link (an earlier run that died mid-fault) is removed when the trial
    starts; the guard's one-way stop removes the one the trial set, and the fault is not set again that trial."""
    import asyncio

    from harness.drills.plan.links import LinkFault
    from harness.drills.stack.links import TrialLinks

    procs = []
    try:
        ledger = start_serve("ledger-1", ["--port", "0", "--metrics-port", "0", "--service", "ledger"], tmp_path)
        procs.append(ledger.proc)
        link = start_serve("link", ["--upstream", ledger.address, "--port", "0", "--name", "ledger-1",
                                    "--admin-port", "0"], tmp_path, command="link")  # fmt: skip
        procs.append(link.proc)
        admin = f"http://127.0.0.1:{json.loads(link.ready_file.read_text())['admin_port']}"
        fault = LinkFault(link="ledger-1", toxic="timeout", attributes={"timeout": 0})
        toxics = f"{admin}/proxies/ledger-1/toxics"
        left = urllib.request.Request(toxics, data=json.dumps(fault.toxic_json()).encode(), method="POST")
        urllib.request.urlopen(left, timeout=5).close()
        assert [t["name"] for t in json.loads(_get(toxics))] == [fault.toxic_json()["name"]]
        said: list[str] = []

        async def trial() -> list[list[str]]:
            links = TrialLinks((StackLink(name="ledger-1", hop="ledger", replica=1, admin=admin),), fault,
                               seed=1, tenant="tenant-drill", log=said.append)  # fmt: skip
            seen = []
            await links.start_stack()
            seen.append([t["name"] for t in json.loads(_get(toxics))])  # the leftover is gone
            links.fault_on()
            seen.append([t["name"] for t in json.loads(_get(toxics))])
            links.stop("guard")
            seen.append([t["name"] for t in json.loads(_get(toxics))])
            links.fault_on()  # after the one-way stop: not set again
            seen.append([t["name"] for t in json.loads(_get(toxics))])
            await links.close()
            return seen

        name = fault.toxic_json()["name"]
        assert asyncio.run(trial()) == [[], [name], [], []], said
    finally:
        stop_processes(procs)
