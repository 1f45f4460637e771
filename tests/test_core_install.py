"""The core install runs every drill: optional extras are imported only where a feature uses them.

`pip install drill-harness` (and the compose image, whose lock holds the `load` extra only) has no Grafana SDK
and no grafana-client. Each case runs `drill` as a real process tree with those packages made unimportable (a
`sitecustomize` on PYTHONPATH, which every child Python — the hops `drill run` starts — loads too), as on such
an install: a drill runs to its results, and a feature that needs an extra says which, on one line, exit 2.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from tests.conftest import drill_process

#: The `dashboards` extra's packages.
EXTRAS = ("grafana_foundation_sdk", "grafana_client")

BLOCKER = f"""
import sys

class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRAS!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
"""

PLAN = {
    "name": "core-install",
    "seed": 3,
    "topology": {"hops": [{"name": "gateway", "work_ms": 1}, {"name": "ledger", "work_ms": 1}]},
    "traffic": {"organic_users": 1, "organic_rate": 5, "drill_users": 1, "drill_rate": 5, "timeout_s": 2.0},
    "fault": {"directive": "abort:UNAVAILABLE", "ratio": 100, "target": "ledger"},
    "phases": {"warmup": 1, "fault": 2, "recovery": 1},
    "slo": {"max_error_rate": 0.05, "hold_s": 1, "traffic": "organic"},
}


@pytest.fixture
def core_only(tmp_path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    from tests.conftest import ROOT

    return {"PYTHONPATH": f"{ROOT}:{site}"}


def test_the_blocker_stands_for_a_missing_extra(core_only):
    proc = drill_process("dashboards", "build", "--help", env=core_only)  # argparse only: no SDK needed
    assert proc.returncode == 0, proc.stderr
    import subprocess
    import sys

    probe = subprocess.run([sys.executable, "-c", "import grafana_foundation_sdk"], env=core_only,
                           capture_output=True, text=True)  # fmt: skip
    assert probe.returncode == 1 and "ModuleNotFoundError" in probe.stderr


def test_drill_run_needs_no_optional_extra(core_only, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(json.dumps(PLAN))
    out = tmp_path / "out"
    proc = drill_process("run", str(plan), "--out", str(out), "--no-live", env=core_only, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    hits = results["configs"]["plain"]["hits"]
    # 2 s of fault at 5 drill calls/s, every one hit (ratio 100): 10 ids predicted, and the ledger's audit agrees
    assert hits["expected"] == 10 and hits["observed_digest"] == hits["expected_digest"], hits
    assert pathlib.Path(out / "report.html").stat().st_size > 0


@pytest.mark.parametrize(
    "args",
    [
        ("dashboards", "build", "--out", "{tmp}/dash"),
        ("dashboards", "push", "--grafana", "http://127.0.0.1:9"),
        ("run", "{plan}", "--grafana", "http://127.0.0.1:9", "--out", "{tmp}/out"),
    ],
    ids=["build", "push", "run-grafana"],
)
def test_a_feature_that_needs_the_dashboards_extra_says_so_on_one_line(core_only, tmp_path, args):
    plan = tmp_path / "plan.yaml"
    plan.write_text(json.dumps(PLAN))
    argv = [a.format(tmp=tmp_path, plan=plan) for a in args]
    proc = drill_process(*argv, env=core_only, timeout=60)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("drill: "), proc.stderr[-2000:]
    assert "pip install 'drill-harness[dashboards]'" in lines[0], lines[0]
    assert not (tmp_path / "out" / "results.json").exists()  # refused before anything ran
