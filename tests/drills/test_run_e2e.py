"""End to end with real processes: same seed → same hits; Prometheus read-back; the demo's done criteria."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys

import pytest

from harness.core.faults import is_hit
from harness.drills.load import ids_digest
from harness.drills.plan import from_dict
from tests.conftest import ROOT

TINY = {
    "name": "tiny",
    "seed": 11,
    "topology": {"hops": [{"name": "gateway", "work_ms": 1}, {"name": "ledger", "work_ms": 1}]},
    "traffic": {"organic_users": 2, "organic_rate": 10, "drill_users": 1, "drill_rate": 10, "timeout_s": 1.0},
    "fault": {"directive": "abort:UNAVAILABLE", "ratio": 60, "target": "ledger"},
    "phases": {"warmup": 3, "fault": 5, "recovery": 6},
    "slo": {"max_error_rate": 0.05, "hold_s": 2, "traffic": "all"},
    "configs": ["plain"],
}


def _run(tmp_path, name: str, plan: dict = TINY, *extra: str, code: int = 0) -> dict:
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(plan))
    out = tmp_path / name
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(path), "--out", str(out), "--no-live", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == code, proc.stderr[-3000:]
    if code == 3:  # a --fail-on condition: one line, last, after the outputs are written (progress precedes it)
        lines = [line for line in proc.stderr.splitlines() if line.startswith("drill:")]
        assert len(lines) == 1 and lines[0].startswith("drill: fail-on breach: ") and "mttr>" not in lines[0]
        assert proc.stderr.strip().splitlines()[-1] == lines[0]
    assert (out / "report.html").exists()
    return json.loads((out / "results.json").read_text())


def test_trials_run_interleaved_and_the_same_seed_hits_the_same_request_ids(tmp_path, grafana):
    plan = {**{k: v for k, v in TINY.items() if k != "configs"}, "variants": [{"name": "a"}, {"name": "b"}]}
    # every trial breaches (60 % of drill calls abort, SLO on all traffic): --fail-on breach exits 3
    r = _run(tmp_path, "a", plan, "--trials", "2", "--fail-on", "breach", "--fail-on", "mttr>1000",
             "--grafana", grafana.url, code=3)  # fmt: skip
    # --grafana: every phase change of every trial as an event, each trial's fault window as a region
    posted = [body for method, path, _, body in grafana.requests if (method, path) == ("POST", "/api/annotations")]
    events = sorted(b["text"] for b in posted if b.get("timeEnd") is None)
    regions = [b for b in posted if b.get("timeEnd") is not None]
    assert events == sorted(f"{n} trial {k}: {p}" for n in "ab" for k in (1, 2)
                            for p in ("warmup", "fault", "recovery", "done")), events  # fmt: skip
    assert len(regions) == 4 and all("fault abort:UNAVAILABLE" in b["text"] for b in regions)
    for trial in (t for name in "ab" for t in r["configs"][name]["trials"]):
        assert any(abs(b["time"] / 1000 - trial["started_unix"] - 3) < 1.5 for b in regions), trial["started_unix"]
    assert all("drill" in b["tags"] and "plan:tiny" in b["tags"] for b in posted)
    assert set(r["configs"]) == {"a", "b"}
    trials = [(t["started_unix"], name, t["trial"]) for name in ("a", "b") for t in r["configs"][name]["trials"]]
    assert [(n, k) for _, n, k in sorted(trials)] == [("a", 1), ("b", 1), ("a", 2), ("b", 2)]  # A B A B
    # the drill user (3rd of 3 users, offset 2/3 of its period) sends ids tiny-11-drill0-N at
    # N/10 + 1/15 s; those scheduled inside the fault window [3 s, 8 s) carry the directive
    tagged = [f"tiny-11-drill0-{n}" for n in range(100) if 3 <= n / 10 + 1 / 15 < 8]
    predicted = [i for i in tagged if is_hit(11, i, "abort:UNAVAILABLE", 60)]
    for name in ("a", "b"):
        c = r["configs"][name]
        assert c["summary"]["trials"] == 2 and len(c["trials"]) == 2
        for t in c["trials"]:
            h = t["hits"]
            assert h["expected"] == len(predicted) > 0
            assert h["expected_digest"] == ids_digest(predicted)
            # what the ledger's audit log says it hit is exactly what the pure hit function predicted
            assert h["observed_digest"] == h["expected_digest"]
            assert set(t) >= {"ttd_s", "ttm_s", "ttr_s", "mttr_s", "amplification", "blast_radius",
                              "error_rate_during_fault", "requests", "success_rate", "attempts_per_success"}
            assert t["breached"] and t["mttr_s"] is not None and not t["insufficient_data"]
            assert t["blast_radius"] == 0.0  # organic traffic is never hit
            assert t["requests"] >= 0.9 * (3 * 10 * 14)
            assert 0.9 <= t["amplification"] <= 1.1  # no retries in a plain topology
    assert set(r["verdict"]) >= {"text", "winner", "conclusive", "comparisons"}
    assert r["verdict"]["winner"] is None  # two identical variants, two trials: nothing to separate


#: How far the runner's 1-s sample times stray from their grid (asyncio sleep and scheduling).
TICK_JITTER_S = 0.05


def _numbers(r: dict) -> str:
    return " ".join(f"{k}={r.get(k)}" for k in ("breached", "ttd_s", "ttr_s", "mttr_s", "amplification"))


@pytest.mark.scraped_here
def test_analyze_from_prometheus_agrees_with_the_runner_per_trial(tmp_path):
    """Issue 10: `drill analyze --prometheus` on the same run agrees with the runner within 1 s on
    TTD/TTR/MTTR and 0.05 on amplification, per trial; so does the runner's own read-back."""
    import argparse

    from harness.drills import cli_analyze
    from harness.drills.runner import Runner, runner_metrics_url
    from harness.procs.prometheus import LocalPrometheus

    prom = LocalPrometheus(tmp_path / "prom").start()
    analyzed = []
    try:
        prom.set_targets([(None, runner_metrics_url())])
        assert prom.wait_first_sample()
        runner = Runner(from_dict({**TINY, "trials": 2}), tmp_path / "run", prometheus=prom, log=lambda _: None)
        results = asyncio.run(runner.run())
        cross = results["prometheus"]
        assert "error" not in cross, cross
        assert set(cross["configs"]) == {"plain"}
        for i, (t0, t1, _, _) in enumerate(runner.trial_windows["plain"]):
            p = argparse.ArgumentParser()
            cli_analyze.add_arguments(p)
            out = tmp_path / f"analyzed-{i}"
            args = p.parse_args(
                ["--prometheus", prom.url, "--start", str(t0), "--end", str(t1),
                 "--hops", "gateway,ledger", "--hold", "2", "--out", str(out)]
            )  # fmt: skip
            assert cli_analyze.run(args) == 0  # the fault window from drill_fault_active, not given
            assert (out / "report.html").exists()
            analyzed.append(json.loads((out / "results.json").read_text())["configs"]["plain"])
    finally:
        prom.stop()
    trials = results["configs"]["plain"]["trials"]
    assert len(trials) == len(analyzed) == len(cross["configs"]["plain"]["trials"]) == 2
    for ours, theirs, inrun in zip(trials, analyzed, cross["configs"]["plain"]["trials"], strict=True):
        print(f"\nrunner  {_numbers(ours)}\nanalyze {_numbers(theirs)}\nin-run  {_numbers(inrun)}")
        assert theirs["breached"] is ours["breached"] is inrun["breached"] is True
        for other in (theirs, inrun):
            for key in ("ttd_s", "ttr_s", "mttr_s"):
                assert (other[key] is None) is (ours[key] is None), (key, other[key], ours[key])
                if ours[key] is not None:
                    # the 1 s, at 1-s resolution; + the runner's own tick jitter (its times are ms)
                    assert abs(other[key] - ours[key]) <= 1.0 + TICK_JITTER_S, (key, other[key], ours[key])
            assert abs(other["amplification"] - ours["amplification"]) <= 0.05
        assert math.isclose(ours["amplification"], 1.0, rel_tol=0.05)  # no retries in a plain topology


@pytest.mark.slow
def test_demo_quick_meets_the_done_criteria(tmp_path):
    out = tmp_path / "demo"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "demo", "--quick", "--out", str(out), "--no-live"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fork() handlers" not in proc.stderr + proc.stdout, "grpc's fork messages leak into the drill output"
    r = json.loads((out / "results.json").read_text())
    assert (out / "report.html").stat().st_size > 10_000
    naive, resilient = r["configs"]["naive"], r["configs"]["resilient"]
    # amplification is now a sum over the whole fault window, not a 5-s peak: 1.9–2.5× in 8 trials seen
    assert naive["amplification"] >= 1.7, naive
    assert resilient["amplification"] <= 1.3, resilient
    # one trial each: naive's storm breaches every time (8 of 8 trials seen); resilient either holds or,
    # in about a third of trials, its breakers open and shed organic calls too (docs/drills.md, the caveat),
    # so which one "wins" a single trial is not asserted: that is what trials and the verdict are for
    assert naive["breached"], naive
    assert naive["attempts_per_success"] > resilient["attempts_per_success"] or resilient["success_rate"] < 0.5
    assert r["configs"]["naive"]["summary"]["trials"] == 1 and r["verdict"]["winner"] is None
    assert "Inconclusive after 1 trial" in r["verdict"]["text"]
    assert " ".join(r["verdict"]["text"].split()) in " ".join(proc.stdout.split())  # the verdict is printed
    assert 'data-chart="trials"' in (out / "report.html").read_text()
