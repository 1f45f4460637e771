"""`--fail-on` and `drill analyze --series`: exit 3 with one line when a condition holds, offline re-analysis."""

from __future__ import annotations

import json

import pytest

from harness.core.errors import BadInput, ConditionFailed
from harness.drills.analysis import gate
from harness.drills.analysis.results import assemble
from harness.drills.plan.sections import Slo
from harness.drills.report import page as report
from tests.conftest import drill_inprocess
from tests.drills.synth import make_series, read_back


def _rates(bad: tuple[int, int] | None, n: int = 40) -> list[float]:
    out = [0.0] * n
    if bad:
        for t in range(bad[0], bad[1] + 1):
            out[t - 1] = 0.5
    return out


def _saved_run(tmp_path, naive_bad=(11, 25), resilient_bad=None, trials=3, name="run", edge=None):
    """A saved run (results.json, series.json, report.html) from synthetic series (read back at ± `edge` s)."""
    series = {
        "naive": [make_series(_rates(naive_bad), config="naive") for _ in range(trials)],
        "resilient": [make_series(_rates(resilient_bad), config="resilient") for _ in range(trials)],
    }
    if edge is not None:
        series = {n: [read_back(s, edge) for s in runs] for n, runs in series.items()}
    results = assemble(series, Slo(), ["gateway", "ledger"], plan_name="synthetic").model_dump()
    out = tmp_path / name
    report.write_outputs(out, results, series)
    return out, results


_drill = drill_inprocess  # `drill analyze --series` reads files only: no process of its own needed


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
    [
        ("mttr>soon", "needs a number"),
        ("regression:/nonexistent.json", "cannot read"),
        ("flaky", "expected breach"),
        ("budget>lots", "budget>X needs a number"),
        ("budget>-1", "must be ≥ 0"),
    ],
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
    for name in ("naive", "resilient"):  # the impact numbers come back from the series too
        for field in ("budget_burn", "bad_s", "outage_s"):
            assert [t[field] for t in redo["configs"][name]["trials"]] == [
                t[field] for t in results["configs"][name]["trials"]
            ]
    assert redo["configs"]["naive"]["summary"]["budget_burn"]["median"] == pytest.approx(750 / 150)
    # the terminal: no "(seed None)" when the seed is unknown, and the last line names every file written
    out_lines = proc.stdout.strip().splitlines()
    assert "seed None" not in proc.stdout and "drill synthetic (3 trials each)" in proc.stdout
    assert out_lines[-1] == f"wrote {again / 'results.json'}, {again / 'series.json'} and {again / 'report.html'}"
    # an SLO flag changes the answer: at 60 % nothing breaches
    proc = _drill("analyze", "--series", str(out / "series.json"), "--out", str(again), "--max-error-rate", "0.6",
                  "--fail-on", "breach")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    proc = _drill("analyze", "--series", str(out / "series.json"), "--out", str(again), "--fail-on", "breach",
                  "--fail-on", "budget>1")  # fmt: skip
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("drill: fail-on breach: naive breached"), proc.stderr
    assert lines[0].endswith(" | budget>1: naive median budget burn 5.00× > 1×"), proc.stderr


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


def test_fail_on_budget_compares_each_configurations_median_burn(tmp_path):
    _, results = _saved_run(tmp_path)  # naive: 15 s at 50 % of 100 calls/s = 750 bad calls; allowance 150
    with pytest.raises(ConditionFailed, match=r"^fail-on budget>2: naive median budget burn 5.00× > 2×$"):
        gate.check(gate.parse_conditions(["budget>2"]), results)
    gate.check(gate.parse_conditions(["budget>5"]), results)


def test_fail_on_mttr_trips_only_beyond_the_read_back_uncertainty(tmp_path):
    # naive's MTTR is 15 s; read back with every edge ± 3 s, so ± 6 s: it is sure only of 9 s
    _, results = _saved_run(tmp_path, edge=3.0)
    assert {t["uncertainty_s"]["mttr_s"] for t in results["configs"]["naive"]["trials"]} == {6.0}
    gate.check(gate.parse_conditions(["mttr>10"]), results)  # 15 − 6 = 9 ≤ 10: not sure it is longer
    with pytest.raises(ConditionFailed, match=r"naive median MTTR 9.0 s \(less its read-back ±\) > 8 s"):
        gate.check(gate.parse_conditions(["mttr>8"]), results)
    _, exact = _saved_run(tmp_path, name="exact")  # the runner's own series: no ±
    with pytest.raises(ConditionFailed, match=r"naive median MTTR 15.0 s > 10 s"):
        gate.check(gate.parse_conditions(["mttr>10"]), exact)


def test_regression_on_the_outage_needs_the_intervals_apart(tmp_path):
    base_dir, _ = _saved_run(tmp_path, naive_bad=(11, 13), trials=4, name="base")  # 3 s, exact (drill run)
    cond = gate.parse_conditions([f"regression:{base_dir / 'results.json'}"])
    # now 8 s: 5 s longer. Read back at ± 1 s per edge (± 2 s): 5 > 0 + 2, a regression beyond doubt
    _, near = _saved_run(tmp_path, naive_bad=(11, 18), trials=4, name="near", edge=1.0)
    with pytest.raises(ConditionFailed, match="beyond the read-back's ± 2.0 s"):
        gate.check(cond, near)
    # read back at ± 3 s per edge (± 6 s): the 5 s could be the read-back's alone — the outage does not trip
    _, coarse = _saved_run(tmp_path, naive_bad=(11, 18), trials=4, name="coarse", edge=3.0)
    reasons = gate.reasons(cond[0], coarse)
    assert not any("median outage" in r for r in reasons), reasons
