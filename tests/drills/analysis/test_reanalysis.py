"""`drill analyze` never destroys what it re-reads: a run's results, report and series stay as the run wrote them.

The run here is what `drill run` writes (`report.write_outputs` of `results.assemble`, no `source`), from
synthetic series; the re-analysis is the real command, in this process.
"""

from __future__ import annotations

import json
import pathlib

from harness.drills.analysis.results import assemble
from harness.drills.plan.sections import Slo
from harness.drills.report.page import write_outputs
from harness.procs.ports import refused_port
from tests.conftest import drill_inprocess as drill
from tests.drills.synth import make_series
from tests.test_cli_errors import assert_one_line

OUTPUTS = ("results.json", "series.json", "report.html")


def _a_run(out: pathlib.Path, max_error_rate: float = 0.05) -> dict[str, bytes]:
    """A drill run's outputs in `out` (as the runner writes them); returns their bytes."""
    rates = [0.0] * 10 + [0.5] * 10 + [0.0] * 10  # breached while the fault is on (seconds 10-20)
    series = {n: [make_series(rates, config=n)] for n in ("naive", "resilient")}
    results = assemble(series, Slo(max_error_rate=max_error_rate), ["gateway", "ledger"], plan_name="the-run")
    write_outputs(out, results.model_dump(), series)
    return {name: (out / name).read_bytes() for name in OUTPUTS}


def test_reanalysis_by_default_writes_beside_the_run_and_leaves_it_as_it_was(tmp_path):
    run = tmp_path / "drill-out"
    before = _a_run(run)
    proc = drill("analyze", "--series", str(run / "series.json"), "--max-error-rate", "0.6")  # the README's form
    assert proc.returncode == 0, proc.stderr
    assert {name: (run / name).read_bytes() for name in OUTPUTS} == before, "the run was overwritten"
    again = json.loads((run / "analysis" / "results.json").read_text())
    assert again["slo"]["max_error_rate"] == 0.6 and json.loads(before["results.json"])["slo"]["max_error_rate"] == 0.05
    assert again["source"]["series"] == str(run / "series.json")
    assert not any(c["breached"] for c in again["configs"].values())  # 50 % errors are within a 60 % SLO
    assert f"wrote {run / 'analysis' / 'results.json'}" in proc.stdout
    # the same command again replaces its own analysis (re-made from the run at will), still not the run
    assert drill("analyze", "--series", str(run / "series.json"), "--max-error-rate", "0.4").returncode == 0
    assert json.loads((run / "analysis" / "results.json").read_text())["slo"]["max_error_rate"] == 0.4
    assert {name: (run / name).read_bytes() for name in OUTPUTS} == before


def test_an_out_that_would_replace_the_series_it_reads_is_refused_even_with_force(tmp_path):
    run = tmp_path / "drill-out"
    before = _a_run(run)
    for force in ([], ["--force"]):
        proc = drill("analyze", "--series", str(run / "series.json"), "--out", str(run), *force)
        assert_one_line(proc, 2, f"--out {run} would replace the --series file it re-reads", str(run / "analysis"))
    assert {name: (run / name).read_bytes() for name in OUTPUTS} == before


def test_an_out_holding_another_run_is_refused_without_force(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    _a_run(first)
    kept = _a_run(second, max_error_rate=0.01)
    proc = drill("analyze", "--series", str(first / "series.json"), "--out", str(second))
    assert_one_line(proc, 2, f"--out {second} holds a drill run (the results of plan the-run)", "--force")
    assert {name: (second / name).read_bytes() for name in OUTPUTS} == kept
    proc = drill("analyze", "--series", str(first / "series.json"), "--out", str(second), "--force")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((second / "results.json").read_text())["source"]["series"] == str(first / "series.json")


def test_prometheus_reanalysis_never_writes_over_the_results_it_reads(tmp_path):
    """Refused before Prometheus is asked (an unreachable one would be exit 1, 'cannot reach')."""
    run = tmp_path / "drill-out"
    before = _a_run(run)
    with refused_port() as port:
        proc = drill("analyze", "--prometheus", f"http://127.0.0.1:{port}", "--last", "5m",
                     "--results", str(run / "results.json"), "--out", str(run))  # fmt: skip
    assert_one_line(proc, 2, f"--out {run} would replace the --results file it re-reads")
    assert {name: (run / name).read_bytes() for name in OUTPUTS} == before


def test_prometheus_reanalysis_by_default_refuses_nothing_and_goes_beside_its_results(tmp_path):
    run = tmp_path / "drill-out"
    _a_run(run)
    with refused_port() as port:
        proc = drill("analyze", "--prometheus", f"http://127.0.0.1:{port}", "--last", "5m",
                     "--results", str(run / "results.json"))  # fmt: skip
    assert_one_line(proc, 1, "cannot reach Prometheus")  # got as far as reading: the default --out was fine
    assert (run / "analysis").is_dir()


def test_a_results_json_given_as_the_series_is_named_in_words(tmp_path):
    run = tmp_path / "drill-out"
    _a_run(run)
    proc = drill("analyze", "--series", str(run / "results.json"))
    line = assert_one_line(proc, 2, "not a series.json: it is a results.json; give the series.json beside it")
    assert "Error" not in line and not (run / "analysis").exists()


def test_a_file_that_is_not_json_is_named_in_words(tmp_path):
    (tmp_path / "s.json").write_text('{"format": 2, "configs": ')
    line = assert_one_line(drill("analyze", "--series", str(tmp_path / "s.json")), 2, "not a series.json: not JSON",
                           "line 1")  # fmt: skip
    assert "Error" not in line
    (tmp_path / "t.json").write_text('{"a": "b"}')  # was "TypeError: string indices must be integers"
    line = assert_one_line(drill("analyze", "--series", str(tmp_path / "t.json")), 2, "not a series.json")
    assert "Error" not in line and "indices" not in line
    line = assert_one_line(drill("analyze", "--series", "/bin/ls"), 2, "/bin/ls: not a series.json: not text")


def _link_record(detected_s: float | None, within: float = 3.0) -> dict:
    """A trial's `link` record as the runner writes it (`stack.links.TrialLinks.summary`)."""
    return {"link": "ledger-1", "toxic": "timeout downstream (timeout 0)", "mode": "user space", "set": True,
            "connections_faulted": 2, "connections_held_at_start": 2, "calls_touched": {"organic": 5, "drill": 7},
            "closed_s": [] if detected_s is None else [detected_s], "detected_s": detected_s, "resolution_s": 0.05,
            "acted_s": 10.0, "stopped": False,
            "expect": {"detect_within_s": within, "met": detected_s is not None and detected_s <= within}}  # fmt: skip


def test_a_link_faults_records_survive_the_reanalysis_of_its_series(tmp_path):
    """The relay's record of each trial (connections held, when callers closed them, `expect`) is in no series:
    series.json keeps it, so `drill analyze --series` says the same of it as the run did, and `--fail-on expect`
    holds there too (exit 3). Before, the re-analysis dropped it: no link note, and `expect` never failed."""
    run = tmp_path / "drill-out"
    rates = [0.0] * 10 + [0.5] * 10 + [0.0] * 10
    series = {n: [make_series(rates, config=n), make_series(rates, config=n)] for n in ("naive", "detects")}
    extras = {"naive": [{"link": _link_record(None)}, {"link": _link_record(None)}],
              "detects": [{"link": _link_record(2.1)}, {"link": _link_record(2.4)}]}  # fmt: skip
    results = assemble(series, Slo(), ["gateway", "ledger"], plan_name="blackhole", extras=extras).model_dump()
    write_outputs(run, results, series)
    saved = json.loads((run / "series.json").read_text())
    assert saved["links"]["detects"] == [extras["detects"][0]["link"], extras["detects"][1]["link"]]

    proc = drill("analyze", "--series", str(run / "series.json"), "--fail-on", "expect")
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "naive did not detect within 3 s in 2 of 2 trials (never, never)" in proc.stderr
    again = json.loads((run / "analysis" / "results.json").read_text())
    for name in ("naive", "detects"):
        assert [t["link"] for t in again["configs"][name]["trials"]] == [e["link"] for e in extras[name]]
    assert again["notes"] == results["notes"] and any("ledger-1" in n for n in again["notes"]), again["notes"]


def test_a_series_without_link_faults_keeps_its_old_shape(tmp_path):
    run = tmp_path / "drill-out"
    _a_run(run)
    assert "links" not in json.loads((run / "series.json").read_text())
