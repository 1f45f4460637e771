"""The one build step: a second call builds nothing; a missing tool is one line, exit 1."""

from __future__ import annotations

import subprocess
import sys

from harness.fleet import build
from tests.conftest import ROOT


def test_a_second_build_is_a_no_op(built):
    before = built.gohop.stat().st_mtime_ns, (build.NODE_SOURCE / "node_modules" / ".drill-stamp").stat().st_mtime_ns
    again = build.ensure()
    after = again.gohop.stat().st_mtime_ns, (build.NODE_SOURCE / "node_modules" / ".drill-stamp").stat().st_mtime_ns
    assert again == built and after == before


def test_without_go_the_build_says_so_in_one_line(tmp_path):
    env = {"PATH": str(tmp_path), "DRILL_FLEET_BIN": str(tmp_path / "bin"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "harness.fleet.build"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "drill: go is not installed: the fleet's services need it (scripts/system-deps installs golang-go)"
    ]
