"""`drill run PLAN --dry-run` on every shipped plan: the local topology starts nothing, writes nothing, and the
expected hits it prints are what `drill hits` says for the ids it names (a live run's equality with them is in
tests/drills/trials/test_guard_live.py; the stack files' dry runs in tests/stacks/test_guard_stack.py)."""

from __future__ import annotations

import io
import json
import re
import sys

import pytest
import yaml

from harness.drills.load.schedule import request_id
from harness.drills.plan.files import load_plan, shipped_plans
from harness.procs import spawn
from tests.conftest import ROOT, drill_inprocess


def hits_of(ids: list[str], *args: str) -> str:
    """`drill hits ARGS --summary` with `ids` on stdin: its summary line."""
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO("".join(i + "\n" for i in ids).encode()))  # drill hits reads bytes
    try:
        proc = drill_inprocess("hits", *args, "--summary")
    finally:
        sys.stdin = saved
    assert proc.returncode == 0, proc.stderr
    return proc.stderr.strip()


@pytest.mark.parametrize(("plan", "quick"), [(p, False) for p in shipped_plans()] + [("retry-storm", True)])
def test_a_dry_run_of_a_shipped_plan_starts_nothing_and_predicts_what_drill_hits_says(plan, quick, tmp_path):
    children = dict(spawn._LIVE)
    out = tmp_path / "out"
    proc = drill_inprocess("run", plan, "--out", str(out), "--dry-run", *(["--quick"] if quick else []))
    assert proc.returncode == 0, proc.stderr
    assert spawn._LIVE == children and not out.exists()  # no process started, nothing written
    text = proc.stdout
    loaded = load_plan(plan, quick=quick)
    ph = loaded.phases
    assert f"timeline  seconds from a trial's first call: warmup 0–{ph.warmup:g} · fault {ph.warmup:g}–" in text
    rows = re.findall(r"^  (\d+)  +(\S+) +(\d+) +\+\d+:\d\d +\+\d+:\d\d–\d+:\d\d +(\S+) +(\S+)$", text, re.M)
    order = [(v.name, str(k)) for k in range(1, loaded.trials + 1) for v in loaded.variants]
    assert [(name, trial) for _, name, trial, _, _ in rows] == order, text
    assert re.search(r"^duration  about \d+ (min \d+ s|s): ", text, re.M)
    # each trial's expected hits are `drill hits`' for the ids the dry run names (trial 1 on the configuration's
    # line, every trial's count on the line below it when the plan has more than one)
    for v in loaded.variants:
        line = re.search(rf"^  {re.escape(v.name)}: (\d+) of (\d+) tagged ids \(digest \w+\): ids \S+ for (.+)$",
                         text, re.M)  # fmt: skip
        if not v.fault.directive or not v.traffic.drill_users:
            assert line is None and f"  {v.name}: none" in text
            continue
        expected, tagged = [int(line[1])], int(line[2])
        if loaded.trials > 1:
            counts = re.match(rf"\n    trials 1–{loaded.trials}: ([\d, ]+) of {tagged} hit$", text[line.end():], re.M)
            expected = [int(c) for c in counts[1].split(", ")]
            assert expected[0] == int(line[1]) and len(expected) == loaded.trials, counts[0]
        spans = [(user, int(lo), int(hi)) for user, lo, hi in re.findall(r"(\w+) (\d+)–(\d+)", line[3])]
        for trial, want in enumerate(expected, 1):
            ids = [request_id(loaded.name, loaded.seed, v.name, trial, user, n) for user, lo, hi in spans
                   for n in range(lo, hi + 1)]  # fmt: skip
            assert len(ids) == tagged
            said = hits_of(ids, "--seed", str(loaded.seed), "--directive", v.fault.directive, "--ratio",
                           str(v.fault.ratio))  # fmt: skip
            assert said.startswith(f"{want}/{tagged} hit"), (v.name, trial, said)


def test_a_dry_run_says_how_each_guard_would_act(tmp_path):
    plan = tmp_path / "guarded.yaml"
    plan.write_text(json.dumps({
        "topology": {"hops": [{"name": "gateway"}]}, "phases": {"warmup": 5, "fault": 10, "recovery": 5},
        "guard": {"stop_when": [{"kind": "error_rate", "above": 0.2, "for_s": 3},
                                {"kind": "burn_rate", "above": 14.4, "long_s": 36, "short_s": 3},
                                {"kind": "wall_clock", "name": "cap", "after_s": 12}], "after_trip": "run"},
    }))  # fmt: skip
    proc = drill_inprocess("run", str(plan), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "  error_rate: organic error rate > 20% in 3 s in a row\n" in proc.stdout
    assert "  burn_rate: organic error budget burning > 14.4× over 36 s and 3 s (72.0% of calls failing)" in proc.stdout
    assert "  cap: the trial has run 12 s (trips in every trial, 12 s in: 3 s of fault cut)" in proc.stdout
    assert "  after a trip: the configuration's later trials still run" in proc.stdout
    assert "SIGUSR1 to the trial's hops" in proc.stdout


def test_a_dry_run_fails_with_the_line_a_run_would_give(tmp_path):
    plan = tmp_path / "p.yaml"
    plan.write_text(json.dumps({"topology": {"hops": [{"name": "gateway"}]},
                                "guard": {"stop_when": [{"kind": "prometheus", "expr": "up == 0"}]}}))  # fmt: skip
    for args in ([], ["--no-live"]):  # the same line from the dry run and from the run, before anything starts
        proc = drill_inprocess("run", str(plan), "--out", str(tmp_path / "out"), *args,
                               *(["--dry-run"] if not args else []))  # fmt: skip
        assert proc.returncode == 2 and proc.stderr.strip() == (
            "drill: guard 'prometheus': a prometheus guard needs a Prometheus to ask: its url, stack.prometheus, "
            "or --prometheus auto|URL"), proc.stderr  # fmt: skip
    assert not (tmp_path / "out").exists()
    proc = drill_inprocess("run", str(plan), "--dry-run", "--prometheus", "http://127.0.0.1:9")  # nothing there
    assert proc.returncode == 1 and proc.stderr.startswith("drill: cannot reach Prometheus at http://127.0.0.1:9")
    proc = drill_inprocess("run", "retry-storm", "--dry-run", "--out", str(plan))
    assert proc.returncode == 2 and "exists and is not a directory" in proc.stderr


def _one_line(proc, code: int) -> str:
    """The one `drill: …` line of a refusal (nothing else on stderr, no traceback); its text."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code and len(lines) == 1 and lines[0].startswith("drill: "), (proc.returncode,
                                                                                          proc.stderr)  # fmt: skip
    return lines[0]


def _demo_plan(tmp_path, method: str, directive: str, **fault) -> str:
    path = tmp_path / f"{method}.yaml"
    path.write_text(json.dumps({
        "name": "kinds", "topology": {"hops": [{"name": "gateway"}, {"name": "ledger"}]},
        "traffic": {"method": method, "drill_users": 1, "drill_rate": 10},
        "fault": {"directive": directive, **fault}, "phases": {"warmup": 1, "fault": 2, "recovery": 1},
    }))  # fmt: skip
    return str(path)


@pytest.mark.parametrize(("method", "directive", "needs"), [
    ("Call", "abort:UNAVAILABLE@after=2", "@after=2 needs a response stream"),
    ("Write", "delay:100@after=1", "@after=1 needs a response stream"),
    ("Stream", "abort:UNAVAILABLE@read=2", "@read=2 needs a request stream"),
    ("Call", "abort:UNAVAILABLE@read=1@headers=sent", "@read=1 needs a request stream"),
])  # fmt: skip
def test_a_directive_option_the_demo_methods_kind_cannot_have_is_refused_before_anything(tmp_path, method, directive,
                                                                                          needs):  # fmt: skip
    """The server would count every call in drill_fault_rejected_total{reason="wrong_kind"} and inject nothing
    (the run then exits 4 after its trials): the dry run and the run both refuse it first, as bad input."""
    plan = _demo_plan(tmp_path, method, directive)
    children = dict(spawn._LIVE)
    for args in (["--dry-run"], ["--no-live"]):
        proc = drill_inprocess("run", plan, "--out", str(tmp_path / "out"), *args)
        line = _one_line(proc, 2)
        assert needs in line and f"drill.v1.Demo/{method} is a " in line and 'reason="wrong_kind"' in line, line
        assert proc.stdout == "" and spawn._LIVE == children and not (tmp_path / "out").exists()


def test_a_directive_option_that_fits_the_method_passes_and_one_behind_the_edge_is_judged_there(tmp_path):
    proc = drill_inprocess("run", _demo_plan(tmp_path, "Exchange", "abort:UNAVAILABLE@after=2"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "  ok  plain: abort:UNAVAILABLE@after=2 fits drill.v1.Demo/Exchange (bidi-streaming)" in proc.stdout
    # the demo's hops behind the first are called with the unary Call, whatever the load calls
    plan = _demo_plan(tmp_path, "Stream", "abort:UNAVAILABLE@after=1", target="ledger")
    line = _one_line(drill_inprocess("run", plan, "--dry-run"), 2)
    assert "drill.v1.Demo/Call is a unary method" in line, line


def test_out_must_be_a_directory_a_file_can_be_written_in(tmp_path):
    for args in (["--dry-run"], ["--no-live"]):
        line = _one_line(drill_inprocess("run", "retry-storm", "--out", "/proc/forbidden", *args), 2)
        assert line.startswith("drill: --out /proc/forbidden: cannot write there: "), line
    # a dry run proves it by writing there, then leaves nothing behind
    proc = drill_inprocess("run", "retry-storm", "--quick", "--dry-run", "--out", str(tmp_path / "a" / "b"))
    assert proc.returncode == 0 and not (tmp_path / "a").exists(), proc.stderr
    assert f"  ok  --out {tmp_path / 'a' / 'b'}: a directory a run can write" in proc.stdout


def test_drill_demo_dry_run_heads_its_output_with_what_was_typed():
    proc = drill_inprocess("demo", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "drill demo --dry-run: nothing was started, switched or sent"
    proc = drill_inprocess("demo", "--quick", "--dry-run")
    assert proc.stdout.splitlines()[0].startswith("drill demo --quick --dry-run: ")


def _guarded(tmp_path, guard: dict, name: str = "g.yaml") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"topology": {"hops": [{"name": "gateway"}]},
                                "phases": {"warmup": 10, "fault": 20, "recovery": 10},
                                "guard": {"stop_when": [guard]}}))  # fmt: skip
    return str(path)


@pytest.mark.parametrize(("guard", "needle"), [
    ({"kind": "prometheus", "expr": "up == 0", "url": "http://127.0.0.1:9090 /x"}, "holds a space"),
    ({"kind": "prometheus", "expr": "up == 0", "url": "http://127.0.0.1:99999"}, "Port out of range"),
    ({"kind": "prometheus", "expr": "up == 0", "url": "http://:9090"}, "names no host"),
    ({"kind": "prometheus", "expr": "1"}, "'1' is a number (a scalar): a guard needs an instant vector"),
    ({"kind": "prometheus", "expr": "scalar(vector(0))"}, "is a scalar (scalar() returns one)"),
    ({"kind": "prometheus", "expr": '"hello"'}, "is a string"),
])  # fmt: skip
def test_a_guard_that_cannot_work_is_bad_input_in_the_plan(tmp_path, guard, needle):
    for args in (["--dry-run"], ["--no-live"]):
        line = _one_line(drill_inprocess("run", _guarded(tmp_path, guard), "--out", str(tmp_path / "o"), *args), 2)
        assert needle in line and "guard.stop_when.0" in line, line
    assert not (tmp_path / "o").exists()


def test_a_guard_that_cannot_trip_within_a_trial_is_a_warning(tmp_path):
    proc = drill_inprocess("run", _guarded(tmp_path, {"kind": "error_rate", "above": 0.1, "for_s": 3600}),
                           "--dry-run")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert ("  warn  guard error_rate: needs 3600 s in a row above 10%, and a trial has 30 s from fault on to its "
            "end: it cannot trip on the fault's errors") in proc.stdout, proc.stdout
    quiet = drill_inprocess("run", _guarded(tmp_path, {"kind": "error_rate", "above": 0.1, "for_s": 30}), "--dry-run")
    assert "warn" not in quiet.stdout


@pytest.mark.parametrize(("expr", "needle"), [
    ("sum(rate(foo[1m]) by", "refuses the expression: query: bad_data"),
    ("1 + 1", "returns a scalar at http://127.0.0.1:"),
    ("up[1m]", "returns a matrix at http://127.0.0.1:"),
])  # fmt: skip
def test_under_prometheus_auto_a_dry_run_asks_a_prometheus_what_each_guard_returns(tmp_path, expr, needle):
    """The Prometheus a run starts is started for a moment: its parser and its `resultType` decide (exit 2)."""
    plan = _guarded(tmp_path, {"kind": "prometheus", "name": "bad", "expr": expr})
    proc = drill_inprocess("run", plan, "--dry-run", "--prometheus", "auto", "--out", str(tmp_path / "o"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("drill: guard 'bad': "), proc.stderr
    assert needle in lines[0], lines[0]
    assert "  fail  guard 'bad': " in proc.stdout and not (tmp_path / "o").exists()


def test_a_url_with_a_space_is_bad_input_wherever_it_is_given(tmp_path):
    """urllib would refuse it only when the request is sent (`InvalidURL`, once an internal error): refused first."""
    stack = tmp_path / "stack.yaml"
    stack.write_text(json.dumps({"stack": {
        "edge": {"address": "127.0.0.1:1", "method": "drill.v1.Demo/Call"},
        "prometheus": "http://127.0.0.1:9090 /x", "hops": [{"name": "gateway", "selector": '{job="gateway"}'}],
    }}))  # fmt: skip
    cases = [(["retry-storm", "--prometheus", "http://127.0.0.1:9090 /x"], "drill: --prometheus: "),
             (["retry-storm", "--grafana", "http://grafana host:3000"], "drill: --grafana: "),
             ([str(stack)], "drill: stack.prometheus: 'http://127.0.0.1:9090 /x' is not a URL a request can go to")]
    for args, start in cases:
        for mode in (["--dry-run"], ["--no-live"]):
            line = _one_line(drill_inprocess("run", *args, *mode, "--out", str(tmp_path / "o")), 2)
            assert line.startswith(start) and "holds a space" in line, line
    assert not (tmp_path / "o").exists()


def test_under_prometheus_auto_a_run_asks_its_prometheus_before_the_first_trial(tmp_path):
    """The run's own Prometheus parses the guard once it is up: exit 2 before any trial (no chain started)."""
    plan = _guarded(tmp_path, {"kind": "prometheus", "name": "bad", "expr": "sum(rate(foo[1m]) by"})
    children = dict(spawn._LIVE)
    out = tmp_path / "o"
    proc = drill_inprocess("run", plan, "--prometheus", "auto", "--out", str(out), "--no-live")
    lines = [line for line in proc.stderr.splitlines() if line.startswith("drill:")]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("drill: guard 'bad': http://127.0.0.1:") and "bad_data" in lines[0], lines[0]
    assert "preflight fail  guard 'bad': " in proc.stderr
    assert spawn._LIVE == children and not (out / "logs").exists() and not (out / "results.json").exists()


def test_an_empty_selector_waits_one_discovery_refresh_and_one_scrape_from_prometheus_config() -> None:
    """Before "names no target", a dry run against a stack that has just come up waits as long as Prometheus
    may take to find and scrape a new target: the compose config polls DNS every 5 s and scrapes every 1 s;
    file and Kubernetes discovery are notified, not polled; Prometheus' defaults where a config is silent;
    never more than the bound."""
    from harness.drills.trials.preflight import SCRAPE_WAIT_S, discovery_wait

    compose = yaml.safe_load((ROOT / "compose" / "prometheus" / "prometheus.yml").read_text())
    assert discovery_wait(compose) == 5 + 1 + 1
    assert discovery_wait({"scrape_configs": [{"job_name": "f", "file_sd_configs": [{"files": ["t.json"]}]}],
                           "global": {"scrape_interval": "1s"}}) == 0 + 1 + 1  # fmt: skip
    assert discovery_wait({"scrape_configs": [{"job_name": "d", "scrape_interval": "1m30s",
                                               "dns_sd_configs": [{"names": ["x"]}]}]}) == SCRAPE_WAIT_S  # fmt: skip
    assert discovery_wait({"global": {"scrape_interval": "500ms"}, "scrape_configs": [
        {"job_name": "c", "consul_sd_configs": [{"refresh_interval": "2s"}]}]}) == 2 + 0.5 + 1
