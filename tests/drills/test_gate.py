"""`--fail-on` and `drill analyze --series`: exit 3 with one line when a condition holds, offline re-analysis."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.core.errors import BadInput, ConditionFailed
from harness.drills import gate, report
from harness.drills.model import Slo
from harness.drills.results import assemble
from tests.conftest import ROOT
from tests.drills.synth import make_series


def _rates(bad: tuple[int, int] | None, n: int = 40) -> list[float]:
    out = [0.0] * n
    if bad:
        for t in range(bad[0], bad[1] + 1):
            out[t - 1] = 0.5
    return out


def _saved_run(tmp_path, naive_bad=(11, 25), resilient_bad=None, trials=3, name="run"):
    """A saved run (results.json, series.json, report.html) from synthetic series."""
    series = {
        "naive": [make_series(_rates(naive_bad), config="naive") for _ in range(trials)],
        "resilient": [make_series(_rates(resilient_bad), config="resilient") for _ in range(trials)],
    }
    results = assemble(series, Slo(), ["gateway", "ledger"], plan_name="synthetic").model_dump()
    out = tmp_path / name
    report.write_outputs(out, results, series)
    return out, results


def _drill(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_fail_on_breach_holds_when_a_configuration_breached(tmp_path):
    _, results = _saved_run(tmp_path)
    with pytest.raises(ConditionFailed, match=r"fail-on breach: naive breached the SLO in 3 of 3 trials"):
        gate.check(gate.parse_conditions(["breach"]), results)
    _, calm = _saved_run(tmp_path, naive_bad=None, name="calm")
    gate.check(gate.parse_conditions(["breach"]), calm)  # nothing breached: no exception


def test_fail_on_mttr_compares_the_median(tmp_path):
    _, results = _saved_run(tmp_path)  # naive: 11 -> 26 = 15 s
    with pytest.raises(ConditionFailed, match=r"naive median MTTR 15.0 s > 10 s"):
        gate.check(gate.parse_conditions(["mttr>10"]), results)
    gate.check(gate.parse_conditions(["mttr>15"]), results)
    _, never = _saved_run(tmp_path, naive_bad=(11, 40), name="never")
    with pytest.raises(ConditionFailed, match="never restored"):
        gate.check(gate.parse_conditions(["mttr>100"]), never)


def test_fail_on_regression_against_a_baseline(tmp_path):
    base_dir, _ = _saved_run(tmp_path, naive_bad=(11, 13), trials=4, name="base")  # naive 3 s
    _, worse = _saved_run(tmp_path, naive_bad=(11, 25), trials=4, name="worse")  # naive 15 s
    cond = gate.parse_conditions([f"regression:{base_dir / 'results.json'}"])
    with pytest.raises(ConditionFailed, match="naive regressed against the baseline: median outage"):
        gate.check(cond, worse)
    _, same = _saved_run(tmp_path, naive_bad=(11, 13), trials=4, name="same")
    gate.check(cond, same)


@pytest.mark.parametrize(
    "spec, message",
    [("mttr>soon", "needs a number"), ("regression:/nonexistent.json", "cannot read"), ("flaky", "expected breach")],
)
def test_a_bad_condition_is_bad_input(spec, message):
    with pytest.raises(BadInput, match=message):
        gate.parse_conditions([spec])


def test_analyze_series_recomputes_offline_and_gates_with_exit_3(tmp_path):
    out, results = _saved_run(tmp_path)
    again = tmp_path / "again"
    proc = _drill("analyze", "--series", str(out / "series.json"), "--out", str(again))
    assert proc.returncode == 0, proc.stderr
    redo = json.loads((again / "results.json").read_text())
    for name in ("naive", "resilient"):
        assert [t["mttr_s"] for t in redo["configs"][name]["trials"]] == [
            t["mttr_s"] for t in results["configs"][name]["trials"]
        ]
    assert redo["verdict"] == results["verdict"] and redo["plan"] == "synthetic"
    # an SLO flag changes the answer: at 60 % nothing breaches
    proc = _drill("analyze", "--series", str(out / "series.json"), "--out", str(again), "--max-error-rate", "0.6",
                  "--fail-on", "breach")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    proc = _drill("analyze", "--series", str(out / "series.json"), "--out", str(again), "--fail-on", "breach")
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("drill: fail-on breach: naive breached"), proc.stderr


def test_analyze_series_reads_the_one_trial_format(tmp_path):
    old = {"naive": make_series(_rates((11, 14)), config="naive").to_json()}
    path = tmp_path / "series.json"
    path.write_text(json.dumps(old))
    proc = _drill("analyze", "--series", str(path), "--out", str(tmp_path / "o"), "--hold", "3")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "o" / "results.json").read_text())["configs"]["naive"]["mttr_s"] == 4.0


def test_analyze_series_not_a_series_file_is_one_line_exit_2(tmp_path):
    path = tmp_path / "series.json"
    path.write_text("[1, 2]")
    proc = _drill("analyze", "--series", str(path), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
