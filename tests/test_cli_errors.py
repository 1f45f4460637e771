"""Every expected failure of a `drill` subcommand: one line `drill: …` on stderr, exit 2 or 1, no traceback.

Most run `harness.cli.main` in this process (what `drill` calls; a traceback would fail the test just
the same): starting an interpreter per case cost ~2 s each. Those where a C library may write to the
process's own stderr (grpc binding a port) run `drill` as a real process.
"""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import socket
import subprocess

import pytest

from harness.drills.plan.files import SCHEMA_PATH, schema
from harness.procs.ports import refused_port
from tests.conftest import drill_inprocess, drill_process

ROOT = pathlib.Path(__file__).resolve().parents[1]

PLAN = """\
name: tiny
fault: {directive: "abort:UNAVAILABLE", target: ledger}
topology: {hops: [{name: gateway}, {name: ledger}]}
phases: {warmup: 1, fault: 1, recovery: 1}
configs: [naive]
"""


drill = drill_inprocess


def assert_one_line(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    err = proc.stderr
    assert "Traceback" not in err + proc.stdout, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == code, (proc.returncode, err)
    assert len(lines) == 1 and lines[0].startswith("drill: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def write(tmp_path: pathlib.Path, text: str, name: str = "plan.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_plan_with_a_yaml_syntax_error(tmp_path):
    plan = write(tmp_path, PLAN + "phases: {warmup: 1\n")
    assert_one_line(drill("run", plan, "--out", str(tmp_path / "o")), 2, "YAML syntax error", "line")


def test_plan_with_an_unknown_key_names_its_path(tmp_path):
    plan = write(tmp_path, PLAN + "foo: 1\n")
    assert_one_line(drill("run", plan, "--out", str(tmp_path / "o")), 2, "foo: unknown key")
    nested = write(tmp_path, PLAN.replace("warmup: 1", "warmup: 1, fualt: 3"), "nested.yaml")
    assert_one_line(drill("run", nested, "--out", str(tmp_path / "o")), 2, "phases.fualt: unknown key")
    assert not (tmp_path / "o").exists(), "nothing may start before the plan is valid"


def test_plan_with_a_wrong_type_names_its_path(tmp_path):
    plan = write(tmp_path, PLAN + "traffic: {drill_rate: fast}\n")
    assert_one_line(drill("run", plan, "--out", str(tmp_path / "o")), 2, "traffic.drill_rate")


def test_plan_naming_an_unknown_configuration(tmp_path):
    plan = write(tmp_path, PLAN.replace("configs: [naive]", "configs: [naive, resilent]"))
    assert_one_line(drill("run", plan, "--out", str(tmp_path / "o")), 2, "unknown configuration 'resilent'")


def test_plan_naming_a_missing_locust_profile(tmp_path):
    plan = write(tmp_path, PLAN)
    proc = drill("run", plan, "--driver", "locust", "--profile", "nope", "--out", str(tmp_path / "o"))
    assert_one_line(proc, 2, "no Locust profile 'nope'")


def test_unknown_plan_name():
    assert_one_line(drill("run", "no-such-plan"), 2, "no plan 'no-such-plan'", "retry-storm")


def test_bad_flag_is_one_line_usage_error():
    assert_one_line(drill_process("run", "--trails", "3"), 2, "unrecognized arguments")


def _busy_port() -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_serve_on_a_busy_grpc_port():
    with _busy_port() as s:
        port = s.getsockname()[1]
        proc = drill_process("serve", "--port", str(port), "--metrics-port", "-1")
    assert_one_line(proc, 1, f"cannot listen on 127.0.0.1:{port}")


def test_serve_on_a_busy_metrics_port():
    with _busy_port() as s:
        port = s.getsockname()[1]
        proc = drill_process("serve", "--port", "0", "--metrics-port", str(port))
    assert_one_line(proc, 1, f"cannot serve metrics on 127.0.0.1:{port}")


def test_analyze_with_prometheus_unreachable(tmp_path):
    with refused_port() as port:
        proc = drill("analyze", "--prometheus", f"http://127.0.0.1:{port}", "--last", "1m", "--out", str(tmp_path))
    assert_one_line(proc, 1, "cannot reach Prometheus")


def test_dashboards_push_with_grafana_down():
    with refused_port() as port:
        proc = drill("dashboards", "push", "--grafana", f"http://127.0.0.1:{port}", "--token", "t")
    assert_one_line(proc, 1, "cannot reach Grafana")


def test_analyze_with_start_after_end(tmp_path):
    proc = drill("analyze", "--prometheus", "http://127.0.0.1:9", "--start", "1780000020", "--end", "1780000010")
    assert_one_line(proc, 2, "give --start (before --end)")


def test_the_shipped_plan_schema_is_current():
    assert json.loads(SCHEMA_PATH.read_text()) == schema(), "run harness.drills.plan.files.write_schema()"


@pytest.mark.parametrize(
    "mutation, path",
    [({"slo": {"max_error_rate": 2}}, "slo.max_error_rate"), ({"fault": {"ratio": 101}}, "fault.ratio"),
     ({"fault": {"directive": "explode:1"}}, "fault.directive"), ({"topology": {"hops": []}}, "topology.hops")],
)  # fmt: skip
def test_out_of_range_values_are_refused_with_their_path(mutation, path):
    from harness.drills.plan.files import PlanError, from_dict

    data = {"fault": {"directive": "abort:UNAVAILABLE"}, **mutation}
    if "fault" in mutation:
        data["fault"] = {"directive": "abort:UNAVAILABLE", **mutation["fault"]}
    with pytest.raises(PlanError, match=path.replace(".", r"\.")):
        from_dict(data)


@pytest.mark.parametrize(
    "yaml_text, path, why",
    [("phases: {warmup: 1, fault: .inf, recovery: 1}", "phases.fault", "finite"),  # ran for ever at 0 calls/s
     ("phases: {warmup: 1, fault: 1e12, recovery: 1}", "phases.fault", "3600"),
     ("phases: {warmup: .nan, fault: 1, recovery: 1}", "phases.warmup", "finite"),
     ("traffic: {organic_rate: 1e9}", "traffic.organic_rate", "1000"),
     ("traffic: {organic_users: 100, organic_rate: 1000}", "traffic: users × rate offer 100010 calls/s", "10000"),
     ("traffic: {timeout_s: .inf}", "traffic.timeout_s", "finite"),
     ("slo: {grace_s: 1e300}", "slo.grace_s", "3600"),
     ("slo: {max_p99_s: 60}", "slo.max_p99_s", "30"),
     ("trials: 1000000", "trials", "100"),
     ("seed: 18446744073709551616", "seed", "9223372036854775807"),
     ("topology: {hops: [{name: gateway, queue: 1000000000}, {name: ledger}]}", "topology.hops.0.queue", "100000"),
     ("variants: [{name: a, config: naive, traffic: {drill_rate: 1e6}}]", "variants.0.traffic.drill_rate", "1000")],
)  # fmt: skip
def test_a_plan_number_past_its_bound_is_refused_with_its_key_path(tmp_path, yaml_text, path, why):
    """Every number of a plan is finite and bounded (harness.core.limits); the refusal names its key path.

    Checked by loading the plan, as `drill run` does first: before the bounds, most of these ran (for ever).
    """
    from harness.drills.plan.files import PlanError, load_plan

    text = PLAN.replace("configs: [naive]\n", "") if yaml_text.startswith("variants") else PLAN
    key = yaml_text.split(":")[0]
    text = "\n".join(line for line in text.splitlines() if not line.startswith(key + ":")) + "\n" + yaml_text + "\n"
    with pytest.raises(PlanError) as err:
        load_plan(write(tmp_path, text))
    assert f": {path}" in str(err.value) and why in str(err.value), str(err.value)


def test_drill_run_refuses_an_infinite_phase_on_one_line_before_anything_starts(tmp_path):
    # with an unknown key beside it: both are named (and code without bounds stops at the key, not running for ever)
    plan = write(tmp_path, PLAN.replace("recovery: 1}", "recovery: 1, fault: .inf}").replace("fault: 1, ", "")
                 + "colour: red\n")  # fmt: skip
    proc = drill("run", plan, "--out", str(tmp_path / "o"))
    assert_one_line(proc, 2, "phases.fault: Input should be a finite number", "colour: unknown key")
    assert not (tmp_path / "o").exists()


def test_serve_with_a_wildcard_tenant_allowlist():
    proc = drill_process("serve", "--port", "0", "--metrics-port", "-1", "--enable-faults",
                         env={"DRILL_FAULT_TENANTS": "*"})  # fmt: skip
    assert_one_line(proc, 2, "DRILL_FAULT_TENANTS")

def test_run_with_zero_trials_is_a_usage_error(tmp_path):
    proc = drill("run", write(tmp_path, PLAN), "--trials", "0", "--out", str(tmp_path / "o"))
    assert_one_line(proc, 2, "--trials")


def test_plan_with_zero_trials_names_its_path(tmp_path):
    proc = drill("run", write(tmp_path, PLAN + "trials: 0\n"), "--out", str(tmp_path / "o"))
    assert_one_line(proc, 2, "trials")


@pytest.mark.parametrize("cond, needle", [("mttr>soon", "mttr>SECONDS"), ("regression:/nope.json", "baseline")])
def test_run_with_a_bad_fail_on_stops_before_anything_starts(tmp_path, cond, needle):
    proc = drill("run", write(tmp_path, PLAN), "--fail-on", cond, "--out", str(tmp_path / "o"))
    assert_one_line(proc, 2, needle)
    assert not (tmp_path / "o").exists()


def test_analyze_with_a_missing_series_file(tmp_path):
    proc = drill("analyze", "--series", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o"))
    assert_one_line(proc, 2, "nope.json")


# --- what a newcomer meets (issue 20) -------------------------------------------------------------
@pytest.mark.parametrize("text", ["", "name: tiny\n"])
def test_a_plan_with_neither_topology_nor_stack_is_refused(tmp_path, text):
    proc = drill("run", write(tmp_path, text), "--out", str(tmp_path / "o"))
    assert_one_line(proc, 2, "a plan needs a topology", "or a stack")


def test_a_file_that_is_not_a_plan_is_bad_input():
    assert_one_line(drill("run", "/bin/true"), 2, "/bin/true: not a plan")


@pytest.mark.parametrize("out", ["README.md", "/etc/passwd"])
def test_out_that_is_a_file_is_refused_before_anything_starts(tmp_path, out):
    assert_one_line(drill("run", write(tmp_path, PLAN), "--out", out), 2, f"--out {out}: exists and is not a directory")


def test_an_unknown_flag_points_to_the_subcommands_help():
    assert_one_line(drill("run", "retry-storm", "--trails", "3"), 2, "unrecognized arguments: --trails",
                    "see `drill run --help`")  # fmt: skip


def test_a_typo_in_the_quick_block_is_named_as_its_key_without_quick(tmp_path):
    plan = write(tmp_path, PLAN + "quick: {phases: {fualt: 1}}\n")
    line = assert_one_line(drill("run", plan, "--out", str(tmp_path / "o")), 2, "quick.phases.fualt: unknown key")
    assert "(quick)" not in line


def test_analyze_last_with_a_bad_duration_says_what_it_takes():
    assert_one_line(drill("analyze", "--prometheus", "http://127.0.0.1:9", "--last", "5x"), 2,
                    "a duration like 90s, 5m or 1h", "'5x'")  # fmt: skip


def test_hits_says_when_servers_would_refuse_the_directive():
    proc = drill("hits", "--seed", "1", "--directive", "delay:100000")
    assert_one_line(proc, 2, "servers would refuse this directive", "60000", "nothing would be hit")


def test_client_with_nothing_to_reach_is_a_failed_run():
    with refused_port() as port:
        proc = drill("client", "--target", f"127.0.0.1:{port}", "--calls", "5", "--timeout", "1")
    assert_one_line(proc, 1, f"cannot reach 127.0.0.1:{port}")


def test_probe_with_every_connection_refused_is_a_failed_run():
    with refused_port() as port:
        proc = drill("probe", "half-open", f"127.0.0.1:{port}", "--count", "2", "--timeout", "1")
    line = assert_one_line(proc, 1, f"cannot connect to 127.0.0.1:{port}", "refused")
    assert "None" not in proc.stdout + line


def test_prometheus_auto_without_prometheus_says_so(tmp_path, monkeypatch):
    from harness.drills.cli import run as cli_run
    from harness.procs import prometheus

    monkeypatch.setattr(prometheus, "PROMETHEUS", "no-such-prometheus")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        import argparse

        from harness.drills.plan.files import load_plan

        assert cli_run._prometheus(argparse.Namespace(prometheus="auto"), tmp_path, print, load_plan("basics")) is None
    assert err.getvalue().startswith("drill: warning: --prometheus auto: no 'no-such-prometheus' on PATH")


def test_an_unreachable_grafana_is_one_warning_not_one_per_annotation(caplog):
    from harness.dashboards.annotations import DrillAnnotator

    with refused_port() as port:
        ann = DrillAnnotator.from_url(f"http://127.0.0.1:{port}")
        assert [ann.event("phase", plan="p") for _ in range(5)] == [None] * 5
    warnings = [r for r in caplog.records if r.name == "drill.annotations"]
    assert len(warnings) == 1 and "not reachable" in warnings[0].getMessage()
