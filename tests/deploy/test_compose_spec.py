"""How the engine-less compose runner reads the compose file (no process started): interpolation as
compose does it, the Dockerfile's environment, what a container sees once names are resolved, the
Prometheus config with DNS discovery made static (and promtool accepts it), listening sockets."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess

import pytest
import yaml

from tests.conftest import ROOT
from tests.deploy.compose_local import ComposeLocal
from tests.deploy.compose_spec import dockerfile_env, interpolate, listening_sockets
from tests.deploy.kube import tool

COMPOSE_FILE = ROOT / "compose" / "docker-compose.yml"


@pytest.mark.parametrize(
    ("text", "env", "want"),
    [
        ("${A:-x}", {}, "x"),
        ("${A:-x}", {"A": ""}, "x"),  # `:-` also replaces an empty value
        ("${A-x}", {"A": ""}, ""),  # `-` only an unset one
        ("${A-x}", {}, "x"),
        ("${A}/$A", {"A": "v"}, "v/v"),
        ("$${A}", {"A": "v"}, "${A}"),  # `$$` is a literal dollar
        ("${A}", {}, ""),
    ],
)
def test_interpolation_follows_compose(text: str, env: dict[str, str], want: str) -> None:
    assert interpolate({"k": [text]}, env) == {"k": [want]}


def test_dockerfile_environment_is_read_with_continuations() -> None:
    env = dockerfile_env(ROOT / "compose" / "Dockerfile")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["PIP_NO_CACHE_DIR"] == "1"


def test_a_container_sees_service_names_as_their_addresses(tmp_path: pathlib.Path, monkeypatch) -> None:
    monkeypatch.setenv("DRILL_FAULT_SECRET", "from-the-test-process")
    stack = ComposeLocal(COMPOSE_FILE, tmp_path, ["locust-master", "locust-worker"], {"LOCUST_WORKERS": "3"})
    own = stack.address("gateway")
    assert len({c.address for cs in stack.containers.values() for c in cs}) == 4 + 1 + 1 + 3
    assert stack.rewrite("0.0.0.0", own) == own
    assert stack.rewrite("--web.listen-address=0.0.0.0:9090", own) == f"--web.listen-address={own}:9090"
    assert stack.rewrite("order:50051", own) == f"{stack.address('order')}:50051"
    assert stack.rewrite("locust-master", own, "--master-host") == stack.address("locust-master")
    assert stack.rewrite("gateway", own, "--service") == "gateway"  # a name that is not a host stays
    assert stack.rewrite("http://jaeger:4317", own) == "http://jaeger:4317"  # not started: no DNS record
    assert stack.rewrite("/app/compose/grpc_health_probe.py", own) == f"{ROOT}/compose/grpc_health_probe.py"
    argv = stack._argv("gateway", stack.containers["gateway"][0])
    assert pathlib.Path(argv[0]).name == "drill" and argv[1] == "serve"
    assert f"{stack.address('order')}:50051" in argv and "--config" in argv
    env = stack._environment("locust-master", stack.containers["locust-master"][0])
    assert env["LOCUST_DRILL_CONFIG"] == "naive" and "LOCUST_HEADLESS" not in env  # passed through only if set
    assert not {k for k in env if k.startswith(("DRILL_", "OTEL_"))}  # nothing leaks from the test process


def test_prometheus_gets_the_compose_jobs_as_static_targets(tmp_path: pathlib.Path) -> None:
    stack = ComposeLocal(COMPOSE_FILE, tmp_path, ["locust-master", "locust-worker"], {"LOCUST_WORKERS": "2"})
    argv = stack._argv("prometheus", stack.containers["prometheus"][0])
    config_path = next(a.split("=", 1)[1] for a in argv if a.startswith("--config.file="))
    config = yaml.safe_load(pathlib.Path(config_path).read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    hops = jobs["drill-services"]["static_configs"]
    names = ["gateway", "order", "account", "ledger"]
    assert [g["labels"]["__meta_dns_name"] for g in hops] == names
    assert [g["targets"] for g in hops] == [[f"{stack.address(n)}:9464"] for n in names]
    assert len(jobs["locust-workers"]["static_configs"][0]["targets"]) == 2
    assert jobs["prometheus"]["static_configs"][0]["targets"] == [f"{stack.address('prometheus')}:9090"]
    assert not [k for j in config["scrape_configs"] for k in j if k.endswith("_sd_configs")]
    proc = subprocess.run(
        [tool("promtool", "install Debian's prometheus"), "check", "config", config_path],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "2 rule files found" in proc.stdout, proc.stdout + proc.stderr


def test_listening_sockets_reads_ipv4_and_v4_mapped_ipv6() -> None:
    with socket.socket() as v4, socket.socket(socket.AF_INET6) as v6:
        v4.bind(("127.9.8.7", 0))
        v4.listen()
        v6.bind(("::ffff:127.9.8.6", 0))
        v6.listen()
        got = listening_sockets(os.getpid())
        assert ("127.9.8.7", v4.getsockname()[1]) in got
        assert ("127.9.8.6", v6.getsockname()[1]) in got
