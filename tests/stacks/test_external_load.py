"""A stack whose load is started by a command (`stack.load`): here Locust on this machine, as a cluster's would be.

The runner hands the trial to the command in `LOCUST_DRILL_*` variables (the profile's own settings are
overridden by them, as Locust ranks environment over config file), starts the trial when the load's
timeline exports its phase times, and reads the load's counters from its /metrics. Asserted: the load ran
the plan's trial (its phases, config, rates and directive as the runner passed them), the runner's series
have its calls, and the hits the service audited are only drill calls of the fault window.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import yaml

from harness.core.environ import environ_now
from harness.procs.spawn import spawn_serve, stop_processes, wait_serving
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

EDGE, LOAD = "127.77.1.1", "127.77.1.2"  # their own loopback addresses: a deployment's fixed ports


def test_a_load_started_by_a_command_runs_the_runners_trial(tmp_path):
    serve = spawn_serve("cart", ["--host", EDGE, "--port", "50051", "--metrics-port", "9464", "--service", "cart",
                                 "--enable-faults", "--seed", "9"], tmp_path)  # fmt: skip
    locust = pathlib.Path(sys.executable).with_name("locust")
    plan = {
        "name": "external-load",
        "seed": 9,
        "stack": {
            "edge": {"address": f"{EDGE}:50051", "method": "drill.v1.Demo/Call"},
            "hops": [{"name": "cart", "metrics": [f"http://{EDGE}:9464/metrics"]}],
            "load": {
                "command": f"{locust} --config loadtests/profiles/smoke.conf --host {EDGE}:50051 --headless "
                           f"--drill-metrics-port 9646 --drill-metrics-host {LOAD} --drill-metrics-fixed",
                "metrics": [f"http://{LOAD}:9646/metrics"],
                "start_timeout_s": 60,
            },  # fmt: skip
            "audit": {"files": [str(tmp_path / "cart.log")]},
            # the edge serves before the run: its three health checks pass at once, 0.2 s apart as 1 s apart
            "configs": [{"name": "as-is", "ready": {"checks": 3, "interval_s": 0.2}}],
        },
        "traffic": {"organic_users": 2, "organic_rate": 10, "drill_users": 1, "drill_rate": 10, "timeout_s": 2.0},
        "fault": {"directive": "abort:UNAVAILABLE", "ratio": 100, "target": "cart"},
        "phases": {"warmup": 2, "fault": 3, "recovery": 2},
        "slo": {"max_error_rate": 0.05, "hold_s": 2, "traffic": "organic"},
    }
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(plan))
    try:
        wait_serving([serve])
        proc = subprocess.run(
            [sys.executable, "-m", "harness.cli", "run", str(path), "--out", str(tmp_path / "out"), "--no-live"],
            cwd=ROOT, env=environ_now(PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    finally:
        stop_processes([serve.proc])
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((tmp_path / "out" / "results.json").read_text())
    t = r["configs"]["as-is"]["trials"][0]
    # the runner reads only client series labelled with the configuration it passed (LOCUST_DRILL_CONFIG)
    assert t["driver"] == "external" and t["requests"] > 0
    assert {tr: o["planned"] for tr, o in t["offered_rps"].items()} == {"organic": 20.0, "drill": 10.0}
    assert t["requests_by_traffic"]["organic"] > 0 and t["requests_by_traffic"]["drill"] > 0
    assert t["blast_radius"] == 0.0 and t["drill_error_rate_during_fault"] > 0  # only drill calls were hit
    # every id the service audited is a drill call (id form PLAN-SEED-drillN…) sent in the fault window
    audited = [json.loads(line[line.index("{"):]) for line in (tmp_path / "cart.log").read_text().splitlines()
               if '"fault_hit"' in line]  # fmt: skip
    assert audited and all(a["request_id"].startswith("external-load-9-drill") for a in audited)
    fault_on = t["started_unix"]  # the trial's first whole second follows it
    assert all(fault_on < a["time"] for a in audited)
    assert t["hits"]["observed"] == len({a["request_id"] for a in audited})
