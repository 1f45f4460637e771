"""The tree stays ruff-clean (STYLE.md house habit), checked where every change is: CI."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

from tests.conftest import ROOT


def test_ruff_check_is_clean():
    beside = pathlib.Path(sys.executable).parent / "ruff"  # the venv's ruff, the version dev pins
    ruff = str(beside) if beside.exists() else shutil.which("ruff")
    assert ruff, "ruff is not installed (pip install -e '.[dev]')"
    out = subprocess.run(
        [ruff, "check", "harness", "tests", "benchmarks", "loadtests"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]


def test_the_package_imports_without_optional_extras():
    # `drill hits` and the interceptors must not need Locust, rich or the Grafana SDK.
    code = "import harness.interceptors, harness.drills.cli.hits, harness.core.faults, harness.core.gate; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr
    heavy = "{'locust', 'gevent', 'grafana_foundation_sdk', 'rich'}"
    code = f"import sys, harness.interceptors, harness.drills.cli.hits; print(sorted({heavy} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
