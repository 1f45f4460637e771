"""`stack.links` end to end: services already running, one ledger replica reached through a port the runner
starts a link on for each trial; `drill run PLAN --fail-on expect` with the plan's link fault.

The stack: ledger-0 and ledger-1 (`drill serve`), and account calling `127.0.0.1:LEDGER0,127.0.0.1:LINK` with
keepalive-balanced (keepalive 1 s, ping timeout 1 s, gRPC's round robin over both). Nothing listens on LINK
until the runner starts the link, so account's calls go to ledger-0 until then; its channel then connects
through the link, the toxic silences it at the fault's start, keepalive closes that connection within 2 s.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
import yaml

from harness.core.environ import environ_now
from harness.procs.spawn import start_serve, stop_processes
from tests.conftest import ROOT
from tests.ports import free_port

#: The plan's `expect.detect_within_s`: keepalive time 1 s (a PING at most 1 s after the connection's last read)
#: + ping timeout 1 s, in account's process; the runner sees the close within its 20-ms poll of the relay. The
#: rest is lateness of account's grpc timer and of the runner's loop on a loaded CI box, which stalls for 1-2 s
#: at any point: 3 s of slack (the blackhole plan's own 2.5 s is meant for a quiet box). Keepalive without the
#: ping timeout closes it only at grpc's default ping timeout, 60 s: far above.
DETECT_WITHIN_S = 1.0 + 1.0 + 3.0


@pytest.mark.slow
def test_a_stack_link_is_started_per_trial_and_its_fault_judged(tmp_path):
    link_port = free_port()
    serve = ["--port", "0", "--metrics-port", "-1", "--work-ms", "1", "--enable-faults"]
    ledgers = [start_serve(f"ledger-{i}", [*serve, "--service", "ledger", "--instance-id", f"ledger-{i}"], tmp_path)
               for i in range(2)]  # fmt: skip
    account = None
    try:
        account = start_serve("account", [
            *serve, "--service", "account", "--instance-id", "account-0",
            "--downstream", f"{ledgers[0].address},127.0.0.1:{link_port}",
            "--config", str(ROOT / "harness/configs/keepalive-balanced.yaml"),
        ], tmp_path)  # fmt: skip
        plan = {
            "name": "stack-link",
            "stack": {
                "edge": {"address": account.address, "method": "drill.v1.Demo/Call"},
                "hops": [{"name": "account", "metrics": [account.metrics_url]},
                         {"name": "ledger", "metrics": [r.metrics_url for r in ledgers]}],
                "links": [{"name": "ledger-1", "hop": "ledger", "replica": 1, "upstream": ledgers[1].address,
                           "port": link_port}],
            },  # fmt: skip
            "traffic": {"organic_users": 2, "organic_rate": 10, "drill_users": 0, "timeout_s": 3},
            "fault": {"link": {"link": "ledger-1", "toxic": "timeout", "attributes": {"timeout": 0},
                               "expect": {"detect_within_s": DETECT_WITHIN_S}}},  # fmt: skip
            # a warm-up long enough for account's channel to reach the link once it listens (gRPC reconnects
            # after a backoff of at most 1 s + 20 % jitter at first); a fault phase 3 s past the bound, so that a
            # late close is still measured (detected_s above the bound, not none)
            "phases": {"warmup": 5, "fault": DETECT_WITHIN_S + 3, "recovery": 2},
            "slo": {"max_error_rate": 0.05, "hold_s": 2},
        }
        path = tmp_path / "stack-link.yaml"
        path.write_text(yaml.safe_dump(plan))
        out = tmp_path / "out"
        proc = subprocess.run(
            [sys.executable, "-m", "harness.cli", "run", str(path), "--fail-on", "expect", "--out", str(out),
             "--no-live"],
            cwd=ROOT, env=environ_now(PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]  # expect met: --fail-on expect holds nothing
        r = json.loads((out / "results.json").read_text())
        (config,) = r["configs"].values()
        link = config["trials"][0]["link"]
        assert link["set"] and link["connections_held_at_start"] == 1
        # time 1 s + ping timeout 1 s + the relay's 20-ms poll and the runner's loop (the plan's own bound)
        assert link["detected_s"] is not None and link["detected_s"] <= DETECT_WITHIN_S, link
        assert link["expect"] == {"detect_within_s": DETECT_WITHIN_S, "met": True}
        assert link["calls_touched"]["organic"] > 0
        # between trials nothing listens on the link's port: the runner stopped it with the trial
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", link_port)) != 0
    finally:
        stop_processes([r.proc for r in ledgers] + ([account.proc] if account else []))
