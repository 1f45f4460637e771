"""`stack.proxy` as a plan names it: what the runner and the dry run say about the service behind the proxy and
the proxy's ports, in the plan's keys, and the edge typed by the proxy's own proto.

Issue 46: with `stack.proxy.upstream` pointing at nothing, the dry run waited the edge's 60-s readiness timeout and
blamed the proxy's address; a proxy port in use was reported in the proxy command's words; the edge needed the
proxy's proto named twice. The upstream here is a real port nobody listens on (`refused_port`) or a real gRPC
server (grpc's health service, in this process); no proxy needs to start for any of these answers.
"""

from __future__ import annotations

import contextlib
import socket
import time
from concurrent import futures

import grpc
import pytest
import yaml
from grpc_health.v1 import health, health_pb2_grpc

from harness.drills.load.command import CommandLoad
from harness.drills.plan.files import load_plan
from harness.procs.ports import refused_port
from tests.conftest import drill_inprocess
from tests.stacks.own_service import PROTO
from tests.stacks.test_own_service import one_line


@contextlib.contextmanager
def grpc_service():
    """A gRPC server (the health service only) on 127.0.0.1, any port: an upstream that is up."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)


@contextlib.contextmanager
def listening():
    """A port someone listens on (what an earlier proxy left running looks like)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


@contextlib.contextmanager
def bindable():
    """A port the proxy could bind (held with SO_REUSEADDR and not listening, so nobody else takes it)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def write(tmp_path, upstream: str, port: int, metrics_port: int, **proxy) -> str:
    plan = {
        "name": "shop", "seed": 5,
        "stack": {
            "proxy": {"upstream": upstream, "service": "cart", "port": port, "metrics_port": metrics_port, **proxy},
            "edge": {"method": "shop.v1.Cart/Add", "request": {"item": "book", "qty": 2}},
            "hops": [{"name": "cart"}],
            "configs": [{"name": "go"}],  # the default ready probe: 60 s, what the issue waited
        },
        "traffic": {"organic_users": 1, "organic_rate": 10, "drill_users": 1, "drill_rate": 10, "timeout_s": 2},
        "fault": {"directive": "abort:UNAVAILABLE", "ratio": 50, "target": "cart"},
        "phases": {"warmup": 1, "fault": 2, "recovery": 1},
        "slo": {"max_error_rate": 0.05, "hold_s": 1, "traffic": "drill"},
    }  # fmt: skip
    (tmp_path / "shop.proto").write_text(PROTO)
    path = tmp_path / "shop.yaml"
    path.write_text(yaml.safe_dump(plan))
    return str(path)


def test_a_refused_upstream_is_said_at_once_in_the_dry_run_and_the_run(tmp_path):
    """One line naming the key and the address, exit 1, before any wait for the edge: the output never says it
    waits (the old dry run waited the ready probe's 60 s, then blamed the edge, the proxy's own port)."""
    with refused_port() as upstream, bindable() as port, bindable() as metrics_port:
        path = write(tmp_path, f"127.0.0.1:{upstream}", port, metrics_port)
        line = f"stack.proxy.upstream 127.0.0.1:{upstream} refused the connection: is the service up?"
        dry = drill_inprocess("run", path, "--dry-run")
        one_line(dry, 1, line)
        assert f"  fail  {line}" in dry.stdout and "waiting for the edge" not in dry.stdout + dry.stderr
        run = drill_inprocess("run", path, "--out", str(tmp_path / "out"), "--no-live")
        one_line(run, 1, line)
        assert "waiting for the edge" not in run.stdout + run.stderr
        assert not list((tmp_path / "out").rglob("proxy.log"))  # no proxy was started for it
        # the check's own time: a refused connect returns at the kernel's RST, and UPSTREAM_CHECK_S is what
        # check_upstream allows at most (its connect timeout plus its wait for the first frame, one connection), the
        # bound the issue asks for (≤ 5 s) and what a silent upstream would cost
        from harness.drills.stack.targets import UPSTREAM_CHECK_S, StackError, check_upstream

        started = time.monotonic()
        with pytest.raises(StackError, match="refused the connection"):
            check_upstream(f"127.0.0.1:{upstream}")
        assert time.monotonic() - started <= UPSTREAM_CHECK_S <= 5.0


def test_an_upstream_that_is_not_a_grpc_server_is_said_so():
    """A plain HTTP/1.1 server (it answers a client's HTTP/2 preface with a 400, as Python's http.server does):
    the proxy could only ever answer UNAVAILABLE, so no proxy is started in front of it. A gRPC server passes."""
    from harness.drills.stack.targets import StackError, check_upstream

    with http_server() as address:
        with pytest.raises(StackError, match=f"stack.proxy.upstream {address} accepted the connection but does not "
                                             "answer as a gRPC server"):  # fmt: skip
            check_upstream(address)
    with grpc_service() as up:
        assert check_upstream(up) == f"{up} accepts a connection and answers HTTP/2"


@contextlib.contextmanager
def http_server():
    """Python's own HTTP/1.1 server on 127.0.0.1, any port, in a thread of this process."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("key", ["port", "metrics_port"])
def test_a_proxy_port_in_use_is_named_by_its_plan_key(tmp_path, key):
    with grpc_service() as upstream, listening() as taken, bindable() as free:
        ports = {"port": taken, "metrics_port": free} if key == "port" else {"port": free, "metrics_port": taken}
        path = write(tmp_path, upstream, **ports)
        line = f"stack.proxy.{key} 127.0.0.1:{taken} is in use (Address already in use)"
        dry = drill_inprocess("run", path, "--dry-run")
        one_line(dry, 1, line, f"give stack.proxy.{key} a free port")
        run = drill_inprocess("run", path, "--out", str(tmp_path / "out"), "--no-live")
        one_line(run, 1, line)
        assert "waiting for the edge" not in run.stdout + run.stderr


def test_the_edge_takes_the_proxys_proto_when_it_names_none(tmp_path):
    """In the plan model: what the dry run resolves before anything starts, what the runner's load and a
    Locust user (LOCUST_DRILL_PROTO, checked through the stack file's EdgeSpec) are given."""
    with refused_port() as upstream, refused_port() as port, refused_port() as metrics_port:
        path = write(tmp_path, f"127.0.0.1:{upstream}", port, metrics_port, proto="shop.proto")
        plan = load_plan(path)
        proto = str((tmp_path / "shop.proto").resolve())
        assert plan.stack.proxy.proto == plan.stack.edge.proto == proto
        assert plan.stack.edge.descriptor_set is None and plan.stack.edge.address == f"127.0.0.1:{port}"
        load = CommandLoad(plan=plan.name, seed=plan.seed, config_label="go", traffic=plan.traffic, fault=plan.fault,
                           phases=plan.phases, spec=None, prometheus=None, workdir=tmp_path,
                           edge=plan.stack.edge)  # fmt: skip
        assert load.environment()["LOCUST_DRILL_PROTO"] == proto
        # the local checks type the request from it before anything starts (then the upstream is refused)
        dry = drill_inprocess("run", path, "--dry-run")
        assert "  ok  edge method /shop.v1.Cart/Add and its request resolve by .proto" in dry.stdout, dry.stdout
        one_line(dry, 1, "refused the connection")
    # an edge that names its own type source keeps it (here: reflection is not nameable, a descriptor set is)
    data = yaml.safe_load(open(path))
    (tmp_path / "edge.pb").write_bytes(b"")
    data["stack"]["edge"]["descriptor_set"] = "edge.pb"
    (tmp_path / "own.yaml").write_text(yaml.safe_dump(data))
    own = load_plan(str(tmp_path / "own.yaml")).stack.edge
    assert own.descriptor_set == str((tmp_path / "edge.pb").resolve()) and own.proto is None
