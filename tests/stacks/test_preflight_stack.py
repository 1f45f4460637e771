"""The preflight against a running stack (harness/drills/trials/preflight.py): what the dry run says is what
the run enforces, with the same one line and exit code, before the first fault.

The stack is tests/stacks/own_service.py (`shop.v1.Cart`: unary `Add`, server-streaming `Watch`, reflection on),
started by its environment alone, as a deployment starts it. "No fault was sent" is read from the service
itself: its `/metrics` show no drill call at all (no `drill_server_calls_total` moved, nothing hit, skipped or
rejected), and no trial started (no results.json).
"""

from __future__ import annotations

import sys
import urllib.request

import pytest
import yaml

from harness.procs.ports import refused_port
from harness.procs.spawn import stop_processes
from tests.conftest import ROOT, drill_inprocess, drill_process
from tests.stacks.test_own_service import one_line, plan, start_cart, write

#: the service's counters that any call (drill or organic) moves, and any directive it saw
MOVED_BY_A_CALL = ("drill_server_calls_total", "drill_fault_hits_total", "drill_fault_skipped_total",
                   "drill_fault_rejected_total")  # fmt: skip


def counters(cart: dict) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{cart['metrics_port']}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = dict.fromkeys(MOVED_BY_A_CALL, 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in out:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out


@pytest.fixture(scope="module")
def cart(tmp_path_factory):
    proc, ports = start_cart(tmp_path_factory.mktemp("cart"))
    try:
        yield ports
    finally:
        stop_processes([proc])


@pytest.mark.parametrize(("method", "directive", "needs", "kind"), [
    ("shop.v1.Cart/Add", "abort:UNAVAILABLE@after=2", "@after=2 needs a response stream", "unary"),
    ("shop.v1.Cart/Watch", "abort:UNAVAILABLE@read=2", "@read=2 needs a request stream", "server-streaming"),
])  # fmt: skip
def test_a_stack_methods_kind_refuses_a_directive_option_before_any_call(cart, tmp_path, method, directive, needs,
                                                                         kind):  # fmt: skip
    """The kind comes from the server's reflection, once the edge serves; the run refuses before its load."""
    data = plan(cart, method=method)
    data["fault"]["directive"] = directive
    path = write(tmp_path, data)
    before = counters(cart)
    dry = drill_inprocess("run", path, "--dry-run")
    one_line(dry, 2, needs, f"shop.v1.Cart/{method.rsplit('/', 1)[1]} is a {kind} method", 'reason="wrong_kind"')
    assert f"  fail  fault.directive {directive!r}: {needs}" in dry.stdout
    run = drill_inprocess("run", path, "--out", str(tmp_path / "out"), "--no-live")
    one_line(run, 2, needs, 'reason="wrong_kind"')
    assert counters(cart) == before and not (tmp_path / "out" / "results.json").exists()


@pytest.mark.parametrize(("drop", "needles"), [
    ("DRILL_SERVICE", ("calls itself 'drill' (the default: DRILL_SERVICE is not set), not 'cart'",
                       "set DRILL_SERVICE=cart")),
    ("DRILL_FAULT_ENABLED", ("exports no drill_fault_switch", "DRILL_FAULT_ENABLED=1", "it is the hop that injects",
                             "the fault would not land")),
])  # fmt: skip
def test_a_target_that_would_not_inject_fails_the_dry_run_and_the_run_with_exit_4(tmp_path, drop, needles):
    """The two mistakes docs/stacks.md warns about, read from what the service's /metrics say of it."""
    proc, ports = start_cart(tmp_path, **{drop: None})
    try:
        path = write(tmp_path, plan(ports))
        before = counters(ports)
        dry = drill_inprocess("run", path, "--dry-run")
        one_line(dry, 4, "hop cart: ", *needles)
        assert "  fail  hop cart: " in dry.stdout and "injection on" not in dry.stdout
        run = drill_inprocess("run", path, "--out", str(tmp_path / "out"), "--no-live")
        one_line(run, 4, "hop cart: ", *needles)
        assert counters(ports) == before and not (tmp_path / "out" / "results.json").exists()
    finally:
        stop_processes([proc])


def test_a_stack_whose_prometheus_is_down_is_never_switched_nor_faulted(cart, tmp_path):
    """The hop is read from a Prometheus that does not answer: the run says so on one line, exit 1, before the
    switch command runs (a switch starts services, never the Prometheus that measures them)."""
    switched = tmp_path / "switched"
    with refused_port() as port:
        data = plan(cart)
        data["stack"]["prometheus"] = f"http://127.0.0.1:{port}"
        data["stack"]["hops"] = [{"name": "cart", "selector": '{job="cart"}'}]
        data["stack"]["configs"][0]["switch"] = f"touch {switched}"
        path = write(tmp_path, data)
        before = counters(cart)
        for args in (["--dry-run"], ["--out", str(tmp_path / "out"), "--no-live"]):
            proc = drill_inprocess("run", path, *args)
            one_line(proc, 1, f"cannot reach Prometheus at http://127.0.0.1:{port}",
                     "stack.prometheus: hop cart's selector read from it")  # fmt: skip
    assert not switched.exists() and counters(cart) == before
    assert not (tmp_path / "out" / "results.json").exists()


def test_a_hop_whose_metrics_do_not_answer_stops_the_run_after_the_switch_and_before_the_load(cart, tmp_path):
    switched = tmp_path / "switched"
    with refused_port() as port:
        data = plan(cart)
        data["stack"]["hops"] = [{"name": "cart", "metrics": [f"http://127.0.0.1:{port}/metrics"]}]
        data["stack"]["configs"][0]["switch"] = f"touch {switched}"
        path = write(tmp_path, data)
        before = counters(cart)
        proc = drill_inprocess("run", path, "--out", str(tmp_path / "out"), "--no-live")
    one_line(proc, 1, f"hop cart: /metrics at http://127.0.0.1:{port}/metrics does not answer",
             "the run cannot measure it; nothing was sent")  # fmt: skip
    assert switched.exists() and counters(cart) == before  # switched, then nothing: not one call
    assert not (tmp_path / "out" / "results.json").exists()


def test_the_shipped_compose_stack_file_down_says_so_at_once(tmp_path):
    """compose/stack.yaml with nothing running: its Prometheus is asked first (one line, exit 1), never a silent
    60-s wait on the edge; its switch (docker compose) never runs."""
    stack = yaml.safe_load((ROOT / "compose/stack.yaml").read_text())
    with refused_port() as prom, refused_port() as edge:
        stack["stack"]["prometheus"] = f"http://127.0.0.1:{prom}"
        stack["stack"]["edge"]["address"] = f"127.0.0.1:{edge}"
        path = tmp_path / "stack.yaml"
        path.write_text(yaml.safe_dump(stack))
        for args in (["--dry-run"], ["--out", str(tmp_path / "out"), "--no-live"]):
            proc = drill_inprocess("run", str(path), *args)
            one_line(proc, 1, f"cannot reach Prometheus at http://127.0.0.1:{prom}", "nothing was switched or sent")
            assert "waiting for the edge" not in proc.stdout + proc.stderr


def test_a_wait_for_the_edge_says_at_once_what_it_waits_for(cart, tmp_path):
    with refused_port() as port:
        data = plan(cart)
        data["stack"]["edge"]["address"] = f"127.0.0.1:{port}"
        data["stack"]["configs"][0]["ready"] = {"checks": 2, "timeout_s": 1, "interval_s": 0.2}
        path = write(tmp_path, data)
        dry = drill_inprocess("run", path, "--dry-run")
        run = drill_process("run", path, "--out", str(tmp_path / "out"), "--no-live")
    waiting = f"waiting for the edge 127.0.0.1:{port} to pass its gRPC health check 2 times in a row (at most 1 s)"
    one_line(dry, 1, f"127.0.0.1:{port} did not pass 2 health checks")
    one_line(run, 1, f"127.0.0.1:{port} did not pass 2 health checks")
    assert waiting in dry.stdout and waiting in run.stderr
    # the local inputs come first: a descriptor set without the method is refused before any wait
    (tmp_path / "empty.pb").write_bytes(b"")  # a FileDescriptorSet of no file
    data["stack"]["edge"]["descriptor_set"] = str(tmp_path / "empty.pb")
    dry = drill_inprocess("run", write(tmp_path, data, "empty.yaml"), "--dry-run")
    one_line(dry, 2, "stack.edge.method 'shop.v1.Cart/Add': no service 'shop.v1.Cart' in ")
    assert "waiting" not in dry.stdout


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
