"""`drill client --spawn`: a real `drill serve` subprocess, tagged and untagged calls, a summary."""

from __future__ import annotations

import subprocess
import sys

from harness.core.environ import environ_now
from tests.conftest import ROOT


def test_client_spawn_reports_hits_by_mode_and_error_rate_without_cancelled():
    env = {**environ_now(), "PYTHONPATH": str(ROOT), "COLUMNS": "160"}
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "client", "--spawn", "--calls", "150", "--ratio", "100",
         "--directive", "abort:UNAVAILABLE", "--directive", "delay:300", "--cancel-ms", "50", "--timeout", "30"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 7 and cells[0] in ("drill", "organic"):
            rows[(cells[0], cells[1])] = cells
    # 150 organic calls all OK; 75 aborted drill calls all errors; 75 delayed calls all cancelled.
    assert rows[("organic", "none")][2:4] == ["150", "150"]
    assert rows[("drill", "abort")][2] == "75" and rows[("drill", "abort")][5] == "75"
    assert rows[("drill", "abort")][6] == "100.0%"
    assert rows[("drill", "delay")][4] == "75"  # all CANCELLED...
    assert rows[("drill", "delay")][6] == "-"  # ...so no error rate at all, not 100%
    # the server counts a hit when the call reaches it: every abort does; a delayed call cancelled by the client
    # after 50 ms may be cancelled before a starved server got to it, so at most 75 delay hits, never more
    # (a mode with no hit at all is not listed: on a starved box every delayed call may be cancelled first)
    listed = out.stdout.split("server-side hits by mode: ")[1].splitlines()[0]
    hits = {k.strip(): int(v) for k, v in (kv.split("=") for kv in listed.replace(",", " ").split() if "=" in kv)}
    assert hits["abort"] == 75 and 0 <= hits.get("delay", 0) <= 75, (hits, listed)
