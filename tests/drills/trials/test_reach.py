"""The reach probe (harness/drills/trials/reach.py): before the first fault, the drill's calls must be counted as
drill traffic by every hop up to the target, or the first that did not is named, exit 4, and no fault is sent.

The stack is real processes on 127.0.0.1: `drill serve` as the edge and as the ledger (our interceptors, each its
own /metrics), and between them tests/drills/trials/forwarder.py, a plain grpc forwarder with none of our code,
not listed in the plan (it has no readings). Dropping the caller's metadata, it is what a Go or Node service
without propagation is; keeping it, what a propagating hop is. "No fault sent" is read from the ledger itself:
its `drill_fault_hits_total` did not move and its log holds no `fault_hit` audit line.
"""

from __future__ import annotations

import contextlib
import json
import sys
import urllib.request

import pytest
import yaml

from harness.core.audit import hit_ids
from harness.procs.spawn import ServeProcess, python_env, spawn, start_serve, stop_processes, wait_serving
from tests.conftest import drill_process, side_by_side
from tests.stacks.test_own_service import one_line

HOPS = ("edge", "ledger")


def serve(name: str, tmp, downstream: str | None = None, service: str | None = None, **env: str) -> ServeProcess:
    """`drill serve` as hop `name` (calling itself `service`, by default its name), its log TMP/NAME.log."""
    args = ["--port", "0", "--metrics-port", "-1", "--service", service or name, "--instance-id", f"{name}-0",
            "--enable-faults", "--seed", "7"]  # fmt: skip
    if downstream:
        args += ["--downstream", downstream]
    return start_serve(name, args, tmp, {"DRILL_FAULT_TENANTS": "tenant-drill", **env})


def forwarder(tmp, upstream: str, keep: bool) -> ServeProcess:
    ready = tmp / "fwd.ready.json"
    argv = [sys.executable, "-m", "tests.drills.trials.forwarder", "--upstream", upstream, "--ready-file", str(ready)]
    proc = spawn(argv + (["--keep-metadata"] if keep else []), tmp / "fwd.log", python_env())
    server = ServeProcess("fwd", proc, ready, tmp / "fwd.log")
    try:
        wait_serving([server], 30.0)
    except BaseException:
        stop_processes([proc])
        raise
    return server


@contextlib.contextmanager
def started_chain(tmp, forwards: bool):
    """edge → forwarder → ledger; the forwarder drops every key (`forwards` False) or forwards them (True)."""
    procs = []
    try:
        ledger = serve("ledger", tmp)
        procs.append(ledger.proc)
        fwd = forwarder(tmp, ledger.address, keep=forwards)
        procs.append(fwd.proc)
        edge = serve("edge", tmp, downstream=fwd.address)
        procs.append(edge.proc)
        yield {"edge": edge, "ledger": ledger, "forwards": forwards, "tmp": tmp}
    finally:
        stop_processes(procs)


def _in_a_chain(tmp, forwards: bool, scenario) -> None:
    """`scenario(chain)` on a chain of its own (edge -> forwarder -> ledger) in `tmp`."""
    with started_chain(tmp, forwards) as c:
        scenario(c)


def stack_plan(chain: dict, **fault) -> dict:
    return {
        "name": "reach",
        "seed": 7,
        "stack": {
            "edge": {"address": chain["edge"].address, "method": "drill.v1.Demo/Call", "request": {"payload": "x"}},
            "hops": [{"name": h, "metrics": [f"http://127.0.0.1:{chain[h].metrics_port}/metrics"]} for h in HOPS],
            # the edge serves before the run: its three health checks pass at once, 0.2 s apart as 1 s apart
            "configs": [{"name": "only", "ready": {"checks": 3, "interval_s": 0.2}}],
        },
        "traffic": {"organic_users": 1, "organic_rate": 5, "drill_users": 1, "drill_rate": 10, "timeout_s": 2.0},
        "fault": {"directive": "abort:UNAVAILABLE", "ratio": 100, "target": "ledger", **fault},
        "phases": {"warmup": 1, "fault": 2, "recovery": 1},
        "slo": {"max_error_rate": 0.5, "hold_s": 1, "traffic": "organic", "window_s": 1},
    }


def counter(hop: ServeProcess, name: str, **labels: str) -> float:
    """A counter of the hop's /metrics, summed over its series whose labels include `labels`."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{hop.metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))  # fmt: skip


def audited_hits(hop: ServeProcess) -> set[str]:
    return hit_ids(hop.log_path.read_text(errors="replace").splitlines())


NAMED = ("drill: the drill does not reach hop ledger: a hop before it forwards neither baggage nor the x-* keys "
         "(OpenTelemetry propagation fixes it: docs/fleet.md); hop edge counted it as drill traffic")  # fmt: skip


def _the_dry_run_names_the_first_hop_the_drill_does_not_reach_and_passes_a_hop_that_forwards(chain):
    tmp = chain["tmp"]
    (tmp / "plan.yaml").write_text(yaml.safe_dump(stack_plan(chain)))
    before = counter(chain["ledger"], "drill_server_calls_total", traffic="drill")
    dry = drill_process("run", str(tmp / "plan.yaml"), "--dry-run")
    ledger_drill = counter(chain["ledger"], "drill_server_calls_total", traffic="drill") - before
    if not chain["forwards"]:
        one_line(dry, 4, NAMED.removeprefix("drill: "), "3 probe calls at ratio 0", "no fault was sent")
        assert dry.stderr.startswith(NAMED)  # the dry run's stderr is that one line
        assert "  fail  the drill does not reach hop ledger" in dry.stdout, dry.stdout
        assert ledger_drill == 0  # the ledger saw the calls as organic: nothing of the drill arrived
    else:
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert "  ok  the drill reaches the target ledger: 3 probe calls at ratio 0 (reach-probe-N, answered 3 OK)" \
            " counted as drill traffic by edge 3, ledger 3" in dry.stdout, dry.stdout  # fmt: skip
        assert ledger_drill == 3
    # ratio 0: the target skipped every probe call on its ratio, hit none and audited none
    assert counter(chain["ledger"], "drill_fault_hits_total") == 0
    assert audited_hits(chain["ledger"]) == set()


def _a_run_refuses_before_its_first_fault_when_the_drill_does_not_reach_the_target(chain):
    tmp = chain["tmp"]
    (tmp / "plan.yaml").write_text(yaml.safe_dump(stack_plan(chain)))
    run = drill_process("run", str(tmp / "plan.yaml"), "--out", str(tmp / "out"), "--no-live")
    one_line(run, 4, NAMED.removeprefix("drill: "), "no fault was sent")
    assert not (tmp / "out" / "results.json").exists()
    # no fault was sent: the target injected nothing, audited nothing, and saw no drill call at all
    assert counter(chain["ledger"], "drill_fault_hits_total") == 0
    assert audited_hits(chain["ledger"]) == set()
    assert counter(chain["ledger"], "drill_server_calls_total", traffic="drill") == 0


def _a_run_whose_drill_reaches_the_target_keeps_the_probe_out_of_its_hits(chain):
    """The probe's calls come before the trial's baseline: the hits the ledger audited are exactly the ids the
    trial expected, none of them a probe id, and the ledger's drill calls in the trial are the load's."""
    tmp = chain["tmp"]
    (tmp / "plan.yaml").write_text(yaml.safe_dump(stack_plan(chain, ratio=50)))
    run = drill_process("run", str(tmp / "plan.yaml"), "--out", str(tmp / "out"), "--no-live")
    assert run.returncode in (0, 3), run.stdout + run.stderr
    assert "preflight ok  the drill reaches the target ledger" in run.stdout + run.stderr
    from harness.core.faults import is_hit
    from harness.drills.load.schedule import tagged_ids
    from harness.drills.plan.files import load_plan

    plan = load_plan(str(tmp / "plan.yaml"))
    v = plan.variants[0]
    expected = {r for r in tagged_ids(plan.name, plan.seed, v.name, 1, v.traffic, v.fault, plan.phases)
                if is_hit(plan.seed, r, v.fault.directive, v.fault.ratio)}  # fmt: skip
    results = json.loads((tmp / "out" / "results.json").read_text())
    assert results["configs"]["only"]["trials"][0]["hits"]["expected"] == len(expected)
    # the ledger's own word: every id it hit is one the trial expected (a tagged call that ended before reaching
    # it is the one way to miss one), and no probe id is among them
    audited = audited_hits(chain["ledger"])
    assert audited and audited <= expected and not any("-probe-" in rid for rid in audited), audited - expected


def scraped(url: str, selector: str) -> None:
    """Wait (at most 60 s: Prometheus' first scrape comes a few seconds after its start) until `up{selector}` is 1."""
    import time

    from harness.procs.prometheus import api_get

    deadline = time.monotonic() + 60
    while not any(r["value"][1] == "1" for r in api_get(url, "query", [("query", f"up{selector}")], 5)["result"]):
        assert time.monotonic() < deadline, f"up{selector} is not 1 after 60 s"
        time.sleep(0.2)


def _dry_run_reading_the_ledger_from_prometheus(tmp_path, forwards: bool):
    """The chain with its ledger listed by its selector only, read from a real Prometheus (1-s scrapes) that has
    scraped it once: the dry run's result, and that Prometheus' URL."""
    from harness.procs.prometheus import LocalPrometheus

    with started_chain(tmp_path, forwards) as c, \
            LocalPrometheus(tmp_path / "prom", targets={"ledger": [f"127.0.0.1:{c['ledger'].metrics_port}"]}) as prom:
        scraped(prom.url, '{job="ledger"}')  # a stack that has been up: Prometheus has its target
        data = stack_plan(c)
        data["stack"]["prometheus"] = prom.url
        data["stack"]["hops"][1] = {"name": "ledger", "selector": '{job="ledger"}'}
        (tmp_path / "plan.yaml").write_text(yaml.safe_dump(data))
        return drill_process("run", str(tmp_path / "plan.yaml"), "--dry-run"), prom.url


def _dry_run_reading_a_ledger_under_another_name(tmp_path):
    """edge -> ledger, the ledger calling itself 'drill' and read by its selector alone from a real Prometheus:
    the dry run's result."""
    from harness.procs.prometheus import LocalPrometheus

    procs = []
    try:
        ledger = serve("ledger", tmp_path, service="drill")
        procs.append(ledger.proc)
        edge = serve("edge", tmp_path, downstream=ledger.address)
        procs.append(edge.proc)
        with LocalPrometheus(tmp_path / "prom", targets={"ledger": [f"127.0.0.1:{ledger.metrics_port}"]}) as prom:
            scraped(prom.url, '{job="ledger"}')
            data = stack_plan({"edge": edge, "ledger": ledger})
            data["stack"]["prometheus"] = prom.url
            data["stack"]["hops"][1] = {"name": "ledger", "selector": '{job="ledger"}'}
            (tmp_path / "plan.yaml").write_text(yaml.safe_dump(data))
            return drill_process("run", str(tmp_path / "plan.yaml"), "--dry-run")
    finally:
        stop_processes(procs)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """Every live scenario of this file, side by side, four at a time, each on processes, ports and a folder of its
    own (its chain, its Prometheus: a Prometheus' first scrape is ~5 s after its start, waited once for three).
    The tests below each take their scenario's result, or its exception (a scenario that is a test's whole body
    raises that test's assertions)."""
    names = ("prom-drops-keys", "prom-forwards-keys", "prom-another-name", "run-reaches", "dry-drops-keys",
             "dry-forwards-keys", "run-refuses", "edge-tenant", "refuses-directive")  # fmt: skip
    tmp = {name: tmp_path_factory.mktemp(name) for name in names}
    with side_by_side(at_once=4, **{
        "prom-drops-keys": lambda: _dry_run_reading_the_ledger_from_prometheus(tmp["prom-drops-keys"], False),
        "prom-forwards-keys": lambda: _dry_run_reading_the_ledger_from_prometheus(tmp["prom-forwards-keys"], True),
        "prom-another-name": lambda: _dry_run_reading_a_ledger_under_another_name(tmp["prom-another-name"]),
        "run-reaches": lambda: _in_a_chain(tmp["run-reaches"], True,
                                           _a_run_whose_drill_reaches_the_target_keeps_the_probe_out_of_its_hits),
        "dry-drops-keys": lambda: _in_a_chain(
            tmp["dry-drops-keys"], False,
            _the_dry_run_names_the_first_hop_the_drill_does_not_reach_and_passes_a_hop_that_forwards),
        "dry-forwards-keys": lambda: _in_a_chain(
            tmp["dry-forwards-keys"], True,
            _the_dry_run_names_the_first_hop_the_drill_does_not_reach_and_passes_a_hop_that_forwards),
        "run-refuses": lambda: _in_a_chain(
            tmp["run-refuses"], False, _a_run_refuses_before_its_first_fault_when_the_drill_does_not_reach_the_target),
        "edge-tenant": lambda: _an_edge_that_does_not_take_the_drills_tenant_is_named_with_that_cause(
            tmp["edge-tenant"]),
        "refuses-directive": lambda: (
            _a_target_that_counts_the_probe_and_refuses_its_directive_fails_before_the_first_fault(
                tmp["refuses-directive"])),
    }) as results:  # fmt: skip
        yield results


@pytest.mark.parametrize("keys", ["drops-keys", "forwards-keys"])
def test_the_dry_run_names_the_first_hop_the_drill_does_not_reach_and_passes_a_hop_that_forwards(live, keys):
    live[f"dry-{keys}"]()


def test_a_run_refuses_before_its_first_fault_when_the_drill_does_not_reach_the_target(live):
    live["run-refuses"]()


def test_a_run_whose_drill_reaches_the_target_keeps_the_probe_out_of_its_hits(live):
    live["run-reaches"]()


def test_an_edge_that_does_not_take_the_drills_tenant_is_named_with_that_cause(live):
    live["edge-tenant"]()


def test_a_target_that_counts_the_probe_and_refuses_its_directive_fails_before_the_first_fault(live):
    live["refuses-directive"]()


@pytest.mark.parametrize("forwards", [False, True], ids=["drops-keys", "forwards-keys"])
def test_a_hop_read_from_prometheus_is_asked_after_a_scrape_that_follows_the_probe(live, forwards):
    """The ledger listed by its selector only: its count is read from a real Prometheus (1-s scrapes), once a scrape
    after the probe (and `reach.SETTLE_S` after its last answer, for the hop to count it) is held; the wait is said
    with its bound (one scrape interval from the config, a second and the settle time)."""
    dry, url = live["prom-forwards-keys" if forwards else "prom-drops-keys"]()
    assert f"reach probe: waiting for {url} to scrape ledger after it (at most 2.5 s: one scrape interval " \
        "from its config, a second and 0.5 s for the hops to count it)" in dry.stdout, dry.stdout  # fmt: skip
    if forwards:
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert "  ok  the drill reaches the target ledger: 3 probe calls at ratio 0" in dry.stdout, dry.stdout
        assert "counted as drill traffic by edge 3, ledger 3" in dry.stdout, dry.stdout
    else:
        one_line(dry, 4, NAMED.removeprefix("drill: "))


def test_the_demo_topology_passes_the_probe_at_every_hop(tmp_path):
    """retry-storm's own 4-hop chain, started as a trial starts it: every hop up to the ledger counts the probe."""
    import asyncio

    from harness.drills.plan.files import load_plan
    from harness.drills.stack.targets import LocalTopology
    from harness.drills.stack.topology import audit_hit_ids
    from harness.drills.trials.preflight import Preflight

    plan = load_plan("retry-storm")
    variant = plan.variants[0]
    said: list[str] = []
    pf = Preflight(plan, out=str(tmp_path / "out"), dry=True, say=said.append)
    target = LocalTopology(plan, log=said.append)

    async def go() -> None:
        await target.up(variant, 1, tmp_path / "chain")
        try:
            await pf.reach(variant, target)
        finally:
            await target.down()

    asyncio.run(go())
    assert [v.status for v in pf.verdicts] == ["ok"], said
    assert pf.verdicts[0].text.startswith("naive: the drill reaches the target ledger: 3 probe calls at ratio 0"), said
    assert pf.verdicts[0].text.endswith("counted as drill traffic by gateway 3, order 3, account 3, ledger 3"), said
    assert audit_hit_ids(tmp_path / "chain") == set()  # ratio 0: the ledger hit none of them


def _an_edge_that_does_not_take_the_drills_tenant_is_named_with_that_cause(tmp_path):
    """No hop before the edge: the edge counting none is its own allowlist (or a secret), not propagation."""
    edge = start_serve("edge", ["--port", "0", "--metrics-port", "-1", "--service", "edge", "--enable-faults"],
                       tmp_path, {"DRILL_FAULT_TENANTS": "someone-else"})  # fmt: skip
    try:
        data = stack_plan({"edge": edge, "ledger": edge})
        data["stack"]["hops"] = data["stack"]["hops"][:1]
        data["fault"]["target"] = "edge"
        (tmp_path / "plan.yaml").write_text(yaml.safe_dump(data))
        dry = drill_process("run", str(tmp_path / "plan.yaml"), "--dry-run")
    finally:
        stop_processes([edge.proc])
    one_line(dry, 4, "the drill does not reach hop edge: it does not take tenant tenant-drill as drill traffic "
             "(DRILL_FAULT_TENANTS), or it has a drill secret the calls do not carry (3 probe calls at ratio 0")


def test_a_counter_that_went_down_was_reset_and_counts_from_zero():
    from harness.drills.trials.reach import Hop, with_label

    assert Hop("ledger", before=10.0, after=13.0).counted == 3.0
    assert Hop("ledger", before=10.0, after=3.0).counted == 3.0  # restarted by a switch: 3 since its start
    assert Hop("ledger", before=10.0, after=10.0).counted == 0.0
    assert with_label('{job="ledger"}', 'traffic="drill"') == '{job="ledger",traffic="drill"}'
    assert with_label("{}", 'traffic="drill"') == '{traffic="drill"}'


def _a_target_that_counts_the_probe_and_refuses_its_directive_fails_before_the_first_fault(tmp_path):
    """The ledger's DRILL_FAULT_MAX_DELAY_MS is below the plan's delay: it counts the probe as drill traffic and
    refuses the directive (`over_max`, checked before the ratio), so a run would inject nothing; said now."""
    procs = []
    try:
        ledger = serve("ledger", tmp_path, DRILL_FAULT_MAX_DELAY_MS="100")
        procs.append(ledger.proc)
        edge = serve("edge", tmp_path, downstream=ledger.address)
        procs.append(edge.proc)
        (tmp_path / "plan.yaml").write_text(yaml.safe_dump(stack_plan({"edge": edge, "ledger": ledger},
                                                                     directive="delay:500")))  # fmt: skip
        dry = drill_process("run", str(tmp_path / "plan.yaml"), "--dry-run")
    finally:
        stop_processes(procs)
    one_line(dry, 4, "the drill reaches hop ledger, and it would not inject: 'ledger' at http://127.0.0.1:",
             "refuses the directive 'delay:500' (drill_fault_rejected_total{reason=\"over_max\"}): its "
             "DRILL_FAULT_MAX_DELAY_MS is below the delay (3 probe calls at ratio 0); no fault was sent")  # fmt: skip


def test_a_target_read_from_prometheus_under_another_name_is_said_from_the_probe(live):
    """The ledger calls itself 'drill' (DRILL_SERVICE unset) and is read by its selector alone, where the
    preflight cannot see its name before a call: the probe's directive is skipped there as not its own."""
    dry = live["prom-another-name"]()
    one_line(dry, 4, "the drill reaches hop ledger, and it would not inject: the service at {job=\"ledger\"} "
             "calls itself 'drill', not 'ledger' (drill_fault_skipped_total{reason=\"target\"}): set "
             "DRILL_SERVICE=ledger (3 probe calls at ratio 0); no fault was sent")  # fmt: skip
