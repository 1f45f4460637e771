"""Link faults in plans and keepalive in configurations: what a plan and a configuration may say, refused
with its key path when they cannot run; what the dry run says; the expectation's words and its gate."""

from __future__ import annotations

import copy

import pytest

from harness.core.environ import environ_now
from harness.core.errors import BadInput, ConditionFailed
from harness.drills.analysis import gate
from harness.drills.analysis.links import expect_reasons, link_notes
from harness.drills.plan.files import PlanError, from_dict, load_plan
from harness.drills.trials.link_fault import describe
from harness.resilience import ConfigError, load
from harness.resilience import from_dict as config_from_dict

PLAN = {
    "name": "lp",
    "topology": {
        "hops": [{"name": "account"}, {"name": "ledger", "replicas": 2}],
        "links": [{"name": "ledger-1", "hop": "ledger", "replica": 1}],
    },
    "fault": {"link": {"link": "ledger-1", "toxic": "timeout", "attributes": {"timeout": 0}}},
    "configs": ["naive"],
}


def plan_with(**changes) -> dict:
    data = copy.deepcopy(PLAN)
    for path, value in changes.items():
        *head, last = path.split("__")
        node = data
        for key in head:
            node = node[key]
        node[last] = value
    return data


def test_a_link_fault_names_its_link_and_toxic_and_the_runner_gets_them():
    plan = from_dict(PLAN)
    assert [(link.name, link.hop, link.replica) for link in plan.links] == [("ledger-1", "ledger", 1)]
    fault = plan.variants[0].fault.link
    assert fault.toxic_json() == {"name": "drill_timeout_downstream", "type": "timeout", "stream": "downstream",
                                  "toxicity": 1.0, "attributes": {"timeout": 0}}  # fmt: skip
    assert plan.to_dict()["links"] == [{"name": "ledger-1", "hop": "ledger", "replica": 1}]


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"fault__link__link": "ledger-9"}, "fault.link.link 'ledger-9' is not a link"),
        ({"fault__link__toxic": "blackhole"}, "invalid toxic type: 'blackhole'"),
        ({"fault__link__attributes": {"timout": 0}}, "bad attribute timout"),
        ({"fault__link__toxicity": 1.5}, "fault.link.toxicity"),
        ({"fault__directive": "abort:UNAVAILABLE"}, "not both"),
        ({"topology__links": [{"name": "x", "hop": "account", "replica": 0}]}, "is the edge"),
        ({"topology__links": [{"name": "x", "hop": "ledger", "replica": 2}]}, "no replica 2"),
        ({"topology__links": [{"name": "x", "hop": "nope", "replica": 0}]}, "'nope' is not a hop"),
        ({"topology__links": [{"name": "x", "hop": "ledger"}, {"name": "x", "hop": "ledger", "replica": 1}]},
         "link names must be unique"),
        ({"topology__links": [{"name": "x", "hop": "ledger"}, {"name": "y", "hop": "ledger"}]},
         "already has a link"),
    ],
)  # fmt: skip
def test_a_link_fault_that_cannot_run_is_refused_with_its_key_path(changes, said):
    with pytest.raises(PlanError, match="lp|plan") as err:
        from_dict(plan_with(**changes))
    assert said in str(err.value)


def test_a_variant_that_drops_the_linked_replica_is_refused():
    data = plan_with(variants=[{"name": "one", "config": "naive", "hops": {"ledger": {"replicas": 1}}}])
    del data["configs"]
    with pytest.raises(PlanError, match=r"variants\[0\].hops: .*no replica 1"):
        from_dict(data)


def test_stack_links_need_a_port_each():
    stack = {"edge": {"address": "127.0.0.1:9000", "method": "drill.v1.Demo/Call"},
             "hops": [{"name": "account", "metrics": ["http://127.0.0.1:9001/metrics"]},
                      {"name": "ledger", "metrics": ["http://127.0.0.1:9002/metrics"]}],
             "links": [{"name": "a", "hop": "ledger", "upstream": "127.0.0.1:7000", "port": 7100},
                       {"name": "b", "hop": "ledger", "replica": 1, "upstream": "127.0.0.1:7001",
                        "port": 7100}]}  # fmt: skip
    data = {"name": "lp", "stack": stack, "fault": PLAN["fault"]}
    with pytest.raises(PlanError, match="need a port each"):
        from_dict(data)
    stack["links"][1]["port"] = 7101
    data["fault"] = {"link": {"link": "b", "toxic": "latency", "attributes": {"latency": 50}, "toxicity": 0.5}}
    plan = from_dict(data)
    line = describe(plan)
    # a draw below 1 is previewed from the plan's seed, as `drill link` draws it
    assert "ledger replica 1 (127.0.0.1:7001) behind link b on 127.0.0.1:7101" in line
    assert "toxicity 0.5; its first 16 by order: " in line and "organic too" in line


def test_the_dry_run_says_what_the_blackhole_touches_and_its_expectation():
    line = describe(load_plan("blackhole", quick=True))
    assert line.startswith("link toxic timeout {timeout: 0} downstream, set at each trial's fault start")
    assert "replica 1 of 2 of ledger behind link ledger-1: every call on its connections, organic too" in line
    assert "not TCP_USER_TIMEOUT" in line and line.endswith("expect: detect within 2.5 s")


def test_blackhole_quick_runs_three_configurations_each_one_knob_apart():
    full, quick = load_plan("blackhole"), load_plan("blackhole", quick=True)
    assert [v.name for v in full.variants] == ["naive", "keepalive", "keepalive-detects", "keepalive-reconnects",
                                               "balanced"]  # fmt: skip
    assert [v.name for v in quick.variants] == ["naive", "keepalive-detects", "balanced"]
    assert quick.phases.total <= 15
    keepalive = {v.name: load(v.config).keepalive for v in full.variants}
    assert keepalive["naive"] is None
    assert keepalive["keepalive"]["ping_timeout_s"] is None
    assert keepalive["keepalive-detects"]["ping_timeout_s"] == keepalive["balanced"]["ping_timeout_s"] == 1.0
    assert {v.name: load(v.config).balancer["kind"] for v in full.variants}["balanced"] == "grpc_round_robin"
    # keepalive-reconnects: keepalive-detects and reconnecting bounded to 2 s, nothing else
    detects, reconnects = (load(v.config) for v in full.variants if v.name in ("keepalive-detects",
                                                                               "keepalive-reconnects"))  # fmt: skip
    assert reconnects.keepalive == detects.keepalive and detects.reconnect is None
    assert reconnects.reconnect == {"connect_timeout_s": 2.0, "initial_backoff_s": None, "max_backoff_s": 2.0}
    assert reconnects.balancer == detects.balancer and reconnects.methods == detects.methods


def test_keepalive_becomes_channel_options_and_the_servers_permit_policy():
    cfg = config_from_dict({"name": "k", "keepalive": {"time": "10s", "timeout": "2s", "pingTimeout": "2s",
                                                        "permitWithoutCalls": True}})  # fmt: skip
    assert dict(cfg.channel_options()) == {
        "grpc.keepalive_time_ms": 10000, "grpc.keepalive_timeout_ms": 2000, "grpc.http2.ping_timeout_ms": 2000,
        "grpc.keepalive_permit_without_calls": 1, "grpc.http2.max_pings_without_data": 0,
    }  # fmt: skip
    # the server permits what its own configuration's callers do, unless told otherwise
    assert dict(cfg.server_options()) == {"grpc.http2.min_ping_interval_without_data_ms": 10000,
                                          "grpc.keepalive_permit_without_calls": 1}  # fmt: skip
    assert config_from_dict({"name": "n"}).channel_options() == () == config_from_dict({"name": "n"}).server_options()


def test_reconnect_becomes_grpcs_connection_backoff_options():
    """gRPC core reads its minimum connect timeout from `grpc.min_reconnect_backoff_ms`, its backoff from the
    initial and max options: benchmarks/blackhole_reconnect.py measures what they change after a blackhole."""
    cfg = config_from_dict({"name": "k", "reconnect": {"connectTimeout": "2s", "initialBackoff": "0.5s",
                                                        "maxBackoff": "3s"}})  # fmt: skip
    assert dict(cfg.channel_options()) == {"grpc.min_reconnect_backoff_ms": 2000,
                                           "grpc.initial_reconnect_backoff_ms": 500,
                                           "grpc.max_reconnect_backoff_ms": 3000}  # fmt: skip
    only = dict(config_from_dict({"name": "k", "reconnect": {"maxBackoff": "2s"}}).channel_options())
    assert only == {"grpc.max_reconnect_backoff_ms": 2000}  # what it leaves out stays gRPC's


@pytest.mark.parametrize(
    ("reconnect", "said"),
    [
        ({"connectTimeout": "0.05s"}, "reconnect.connectTimeout"),
        ({"maxBackoff": "0.5s"}, "reconnect.maxBackoff: 0.5s is shorter than initialBackoff (1s)"),
        ({"initialBackoff": "3s", "maxBackoff": "2s"}, "reconnect.maxBackoff: 2s is shorter than initialBackoff (3s)"),
        ({"connectTimout": "1s"}, "reconnect.connectTimout: unknown key"),
    ],
)
def test_a_reconnect_that_cannot_work_is_refused_with_its_key_path(reconnect, said):
    with pytest.raises(ConfigError, match="k.yaml") as err:
        config_from_dict({"name": "k", "reconnect": reconnect}, source="k.yaml")
    assert said in str(err.value)


@pytest.mark.parametrize(
    ("keepalive", "said"),
    [
        ({"timeout": "1s"}, "keepalive.time: required"),
        ({"time": "1s", "pingTimout": "1s"}, "keepalive.pingTimout: unknown key"),
        ({"time": "0s"}, "keepalive.time"),
        ({"time": "1s", "serverPermit": {"minPingInterval": "5s"}}, "GOAWAY too_many_pings"),
    ],
)
def test_a_keepalive_that_cannot_work_is_refused_with_its_key_path(keepalive, said):
    with pytest.raises(ConfigError, match="k.yaml") as err:
        config_from_dict({"name": "k", "keepalive": keepalive}, source="k.yaml")
    assert said in str(err.value)


def test_grpc_round_robin_makes_one_target_of_ip_addresses_only():
    cfg = config_from_dict({"name": "rr", "balancer": {"kind": "grpc_round_robin"}})
    assert cfg.targets(["127.0.0.1:1", "127.0.0.1:2"]) == ["ipv4:127.0.0.1:1,127.0.0.1:2"]
    assert cfg.targets(["127.0.0.1:1"]) == ["127.0.0.1:1"]
    assert '"round_robin"' in dict(cfg.channel_options())["grpc.service_config"]
    with pytest.raises(ConfigError, match="IPv4 HOST:PORT"):
        cfg.targets(["ledger:1", "127.0.0.1:2"])
    assert config_from_dict({"name": "x"}).targets(["a:1", "b:2"]) == ["a:1", "b:2"]


def _results(**met) -> dict:
    def trial(name, ok):
        link = {"link": "ledger-1", "toxic": "timeout {timeout: 0} downstream", "mode": "user space", "set": True,
                "connections_faulted": 1, "connections_held_at_start": 1, "calls_touched": {"organic": 9, "drill": 1},
                "closed_s": [1.2] if ok else [], "detected_s": 1.2 if ok else None,
                "expect": {"detect_within_s": 2.5, "met": ok}}  # fmt: skip
        return {"trials": [{"trial": 1, "link": link}]}

    return {"configs": {name: trial(name, ok) for name, ok in met.items()}, "ranking": list(met)}


def test_expect_is_met_or_not_per_configuration_and_fail_on_expect_names_who_missed_it():
    results = _results(balanced=True, naive=False)
    notes = link_notes(results["configs"])
    assert notes[0].startswith("balanced: link ledger-1 timeout {timeout: 0} downstream (user space): callers "
                               "closed the connections it held after 1.20 s")  # fmt: skip
    assert "met (1 of 1)" in notes[0] and "touched 9 organic and 1 drill calls on 1 connection" in notes[0]
    assert "no caller closed a connection" in notes[1] and "NOT met (0 of 1)" in notes[1]
    assert expect_reasons(results) == ["naive did not detect within 2.5 s in 1 of 1 trial (never)"]
    (cond,) = gate.parse_conditions(["expect"])
    with pytest.raises(ConditionFailed, match=r"^fail-on expect: naive did not detect within 2.5 s") as err:
        gate.check([cond], results)
    assert "balanced" not in str(err.value)
    gate.check([cond], _results(balanced=True))  # all met: the gate holds nothing
    gate.check([cond], {"configs": {"x": {"trials": [{"trial": 1}]}}})  # no link fault: nothing to judge
    with pytest.raises(BadInput, match="expected breach, expect, mttr"):
        gate.parse_conditions(["expects"])


def test_running_links_bind_no_port_of_the_runner_and_the_dry_run_names_their_admin_api():
    """Two links already running (`admin`) are not a port clash (neither has a port of the runner's), and the dry
    run names the API each is driven through, not an address of its own it does not have."""
    stack = {"edge": {"address": "127.0.0.1:7000", "method": "a.B/C"},
             "hops": [{"name": "account", "metrics": ["http://127.0.0.1:9000/metrics"]},
                      {"name": "ledger", "metrics": ["http://127.0.0.1:9001/metrics"]}],
             "links": [{"name": "a", "hop": "ledger", "replica": 0, "admin": "http://127.0.0.1:8474"},
                       {"name": "b", "hop": "ledger", "replica": 1, "admin": "http://127.0.0.1:8475"}]}  # fmt: skip
    plan = from_dict({"name": "lp", "stack": stack,
                      "fault": {"link": {"link": "b", "toxic": "timeout", "attributes": {"timeout": 0}}}})  # fmt: skip
    line = describe(plan)
    assert "on ledger replica 1 behind link b, driven through http://127.0.0.1:8475: every call" in line, line
    assert "None" not in line, line


def test_a_kernel_mode_link_fault_is_said_as_such_and_refused_before_anything_starts_where_it_cannot_act(tmp_path):
    """The dry run and the report name the mode the plan asked for; without CAP_NET_ADMIN (a drill run as nobody) the
    preflight refuses a kernel-mode link fault in one line before it starts a hop, not at the first fault."""
    import os
    import pathlib
    import shutil
    import subprocess

    import yaml

    from tests.conftest import ROOT

    data = plan_with()
    data["fault"]["link"]["attributes"] = {"timeout": 0, "mode": "kernel"}
    plan = from_dict(data)
    assert plan.fault.link.mode == "kernel" and from_dict(plan_with()).fault.link.mode == "user space"
    line = describe(plan)
    assert "(kernel mode: nftables drops the connections' packets, so TCP gets no ACKs" in line, line
    assert "a relay in user space" in describe(from_dict(plan_with()))
    import tempfile

    readable = pathlib.Path(tempfile.mkdtemp(prefix="drill-kernel-"))  # pytest's own folders are root's alone
    readable.chmod(0o755)
    path = readable / "kernel.yaml"
    path.write_text(yaml.safe_dump(data))
    path.chmod(0o644)
    argv = [os.path.join(os.path.dirname(os.sys.executable), "drill"), "run", str(path), "--dry-run"]
    if os.geteuid() == 0:  # as nobody: setresuid away from root clears the effective capabilities
        argv = [shutil.which("setpriv"), "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**environ_now(), "HOME": str(readable)})  # fmt: skip
    shutil.rmtree(readable)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "drill: fault.link ledger-1: the kernel mode needs root or CAP_NET_ADMIN (this process has neither)"
    ], proc.stderr
    assert "topology up" not in proc.stdout  # nothing was started
