"""`drill link` in the compose stack (compose/blackhole.yml, compose/stack-blackhole.yaml) and on Kubernetes
(deploy/k8s/components/link-ledger-1, deploy/k8s/stack-blackhole.yaml), without an engine or a cluster: the
merged compose model, the rendered manifests validated strictly, and the stack files against the blackhole plan.

The run under the real engine is benchmarks/compose_blackhole.sh (its transcript in benchmarks/results/).
"""

from __future__ import annotations

import os
import pathlib
import shlex
import subprocess
import sys

import pytest
import yaml

from harness.drills.plan.files import load_plan
from harness.link.cli import add_arguments as link_arguments
from tests.conftest import ROOT
from tests.deploy.compose_spec import load_compose
from tests.deploy.kube import (
    K8S,
    K8S_VERSIONS,
    find,
    is_operator_object,
    render,
    validate_builtin,
    validate_operator_objects,
)
from tests.link.test_cli import drill_link

COMPOSE = [ROOT / "compose" / "docker-compose.yml", ROOT / "compose" / "blackhole.yml"]
PLAN = ROOT / "harness" / "plans" / "blackhole.yaml"
OVERLAYS = ("naive", "budget", "resilient")


def _argv(command: str | list[str]) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else list(command)


def _flag(argv: list[str], flag: str) -> str:
    assert flag in argv, f"{flag} missing from {argv}"
    return argv[argv.index(flag) + 1]


def _link_args(argv: list[str]):
    """The link's arguments as `drill link` parses them (so a flag it does not know fails here)."""
    import argparse

    p = argparse.ArgumentParser()
    link_arguments(p)
    return p.parse_args(argv)


def _plan() -> dict:
    return yaml.safe_load(PLAN.read_text())


# --- compose ---------------------------------------------------------------------------------------------------
def test_compose_override_puts_a_link_in_front_of_one_of_two_ledgers() -> None:
    """Merged as `-f docker-compose.yml -f blackhole.yml`: the account calls replica 0 and the link by fixed IPv4
    addresses (what gRPC's round robin needs), the link relays to replica 1, its admin API is published on the
    host's loopback only, and both the link and replica 1 answer to `ledger` for Prometheus' DNS discovery."""
    env = {"DRILL_CONFIG": "keepalive-balanced"}
    spec = load_compose(COMPOSE, env)
    svcs = spec["services"]
    net = "10.213.48"
    assert spec["name"] == "drill-blackhole"  # its own project: never recreates the chain's containers
    assert spec["networks"]["default"]["ipam"]["config"] == [{"subnet": f"{net}.0/24"}]
    ip = {name: svcs[name]["networks"]["default"]["ipv4_address"] for name in ("ledger", "ledger-1", "link-ledger-1")}
    assert len(set(ip.values())) == 3 and all(a.startswith(f"{net}.") for a in ip.values())

    account = _argv(svcs["account"]["command"])
    assert _flag(account, "--downstream") == f"{ip['ledger']}:50051,{ip['link-ledger-1']}:50051"
    assert _flag(account, "--config") == "keepalive-balanced"
    assert svcs["account"]["depends_on"]["link-ledger-1"] == {"condition": "service_healthy"}

    link = _link_args(_argv(svcs["link-ledger-1"]["command"])[2:])
    assert (link.upstream, link.port, link.name, link.host) == ("ledger-1:50051", 50051, "ledger-1", "0.0.0.0")
    assert svcs["link-ledger-1"]["ports"] == [f"127.0.0.1:{link.admin_port}:{link.admin_port}"]
    # published: Docker forwards the host's port to the container's interface, so the API must listen there too (on
    # its default, the container's loopback, every connection from the host is reset)
    assert link.admin_host == "0.0.0.0"
    # its health is its admin port, never a gRPC check through the link (that would open faulted connections)
    assert svcs["link-ledger-1"]["healthcheck"]["test"][-1] == f"127.0.0.1:{link.admin_port}"
    for name in ("ledger-1", "link-ledger-1"):
        assert svcs[name]["networks"]["default"]["aliases"] == ["ledger"]
    assert str(link.metrics_port) in svcs["link-ledger-1"]["expose"]  # the port Prometheus scrapes (9464)
    prom = yaml.safe_load((ROOT / "compose/prometheus/prometheus.yml").read_text())
    hops = next(j for j in prom["scrape_configs"] if j["job_name"] == "drill-services")["dns_sd_configs"][0]
    assert "ledger" in hops["names"] and hops["port"] == link.metrics_port

    # the two replicas are the same ledger, the plan's sizes; one image for all, built once (by `ledger`)
    plan_ledger = next(h for h in _plan()["topology"]["hops"] if h["name"] == "ledger")
    for name in ("ledger", "ledger-1"):
        argv = _argv(svcs[name]["command"])
        assert _flag(argv, "--service") == "ledger" and _flag(argv, "--instance-id") == f"ledger-{name == 'ledger-1':d}"
        assert [_flag(argv, f) for f in ("--work-ms", "--concurrency", "--queue")] == [
            str(plan_ledger[k]) for k in ("work_ms", "concurrency", "queue")]  # fmt: skip
        assert svcs[name]["deploy"]["replicas"] == 1
    images = {svcs[n]["image"] for n in ("account", "ledger", "ledger-1", "link-ledger-1")}
    assert images == {"drill-harness:0.1.0"} and [n for n in svcs if "build" in svcs[n]] == ["ledger"]


def test_compose_stack_file_drives_the_running_link_with_the_plans_configurations() -> None:
    stack = yaml.safe_load((ROOT / "compose/stack-blackhole.yaml").read_text())
    plan = _plan()
    svcs = load_compose(COMPOSE, {})["services"]
    admin = _link_args(_argv(svcs["link-ledger-1"]["command"])[2:]).admin_port
    assert stack["stack"]["links"] == [{"name": "ledger-1", "hop": "ledger", "replica": 1,
                                        "admin": f"http://127.0.0.1:{admin}"}]  # fmt: skip
    published = svcs["account"]["ports"][0].rsplit(":", 2)[1]
    assert stack["stack"]["edge"]["address"] == f"127.0.0.1:{published}"
    # one switch per plan variant, each naming that variant's configuration, both compose files, only the account
    variants = {v["name"]: pathlib.Path(v["config"]).stem for v in plan["variants"]}
    assert [c["name"] for c in stack["stack"]["configs"]] == list(variants)
    for c in stack["stack"]["configs"]:
        assert c["switch"] == (f"DRILL_CONFIG={variants[c['name']]} docker compose -f compose/docker-compose.yml "
                               "-f compose/blackhole.yml up -d --wait account")  # fmt: skip
    assert stack["stack"]["emergency_stop"].endswith("kill -s SIGUSR1 link-ledger-1")
    fault = dict(plan["fault"]["link"])
    fault.pop("expect")  # the compose file carries none (its saved transcript ran without one)
    assert stack["fault"]["link"] == fault
    for key in ("traffic", "slo", "seed"):
        assert stack[key] == plan[key], key
    loaded = load_plan(ROOT / "compose/stack-blackhole.yaml")
    assert loaded.stack.links[0].admin == f"http://127.0.0.1:{admin}"


# --- Kubernetes ------------------------------------------------------------------------------------------------
def _with_component(tmp_path: pathlib.Path, overlay: str) -> list[dict]:
    here = tmp_path / overlay
    here.mkdir()
    rel = os.path.relpath(K8S, here)
    (here / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{rel}/overlays/{overlay}]\ncomponents: [{rel}/components/link-ledger-1]\n"
    )
    return render(here)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_k8s_component_puts_a_link_in_front_of_a_second_ledger(tmp_path: pathlib.Path, overlay: str) -> None:
    """deploy/k8s/components/link-ledger-1: a pod `ledger-1` (the link on the Service's port, the ledger on its
    loopback behind it), the account calling both replicas; nothing else changes; every object validates strictly
    (built-in kinds at every pinned Kubernetes version, the PodMonitor against the Operator's schema)."""
    plain = render(K8S / "overlays" / overlay)
    objects = _with_component(tmp_path, overlay)
    for version in K8S_VERSIONS:
        errors = {f"{o['kind']}/{o['metadata']['name']}": validate_builtin(o, version)
                  for o in objects if not is_operator_object(o)}  # fmt: skip
        assert not {k: e for k, e in errors.items() if e}, f"Kubernetes {version}"
    operator = [o for o in objects if is_operator_object(o)]
    assert not [e for e in validate_operator_objects(operator, tmp_path) if e]

    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    added = {key(o) for o in objects} - {key(o) for o in plain}
    changed = {key(o) for o in objects for p in plain if key(o) == key(p) and o != p}
    assert added == {("Deployment", "ledger-1"), ("Service", "ledger-1"), ("PodMonitor", "drill-links")}
    assert changed == {("Deployment", "account")}, changed

    account = next(c for c in find(objects, "Deployment", "account")["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "hop")  # fmt: skip
    plain_account = next(c for c in find(plain, "Deployment", "account")["spec"]["template"]["spec"]["containers"]
                         if c["name"] == "hop")  # fmt: skip
    assert _flag(account["args"], "--downstream") == "ledger:50051,ledger-1:50051"
    strip = lambda a: [x for i, x in enumerate(a) if not (i and a[i - 1] == "--downstream") and x != "--downstream"]  # noqa: E731
    assert strip(account["args"]) == strip(plain_account["args"])  # only the downstream changed

    deploy = find(objects, "Deployment", "ledger-1")
    pod = deploy["spec"]["template"]
    assert deploy["metadata"]["namespace"] == "drill"
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    link = _link_args(containers["link"]["args"][1:])
    assert containers["link"]["args"][0] == "link" and link.name == "ledger-1"
    ledger = containers["ledger"]["args"]
    assert _flag(ledger, "--host") == "127.0.0.1" and link.upstream == f"127.0.0.1:{_flag(ledger, '--port')}"
    # replica 1 is the ledger hop's copy: the same arguments but its address
    base_ledger = next(c for c in find(plain, "Deployment", "ledger")["spec"]["template"]["spec"]["containers"]
                       if c["name"] == "hop")  # fmt: skip
    drop = ("--host", "--port")
    same = lambda a: [x for i, x in enumerate(a) if x not in drop and not (i and a[i - 1] in drop)]  # noqa: E731
    assert same(ledger) == same(base_ledger["args"])
    assert {"name": "DRILL_FAULT_ENABLED", "value": "0"} in containers["ledger"]["env"]
    # the Service's port is the link's; the admin API is in no Service (reached by port-forward)
    svc = find(objects, "Service", "ledger-1")
    ports = {p["name"]: p["containerPort"] for p in containers["link"]["ports"]}
    assert svc["spec"]["ports"][0]["targetPort"] == "grpc" and ports["grpc"] == link.port
    assert ports["admin"] == link.admin_port and all(p["port"] != link.admin_port for p in svc["spec"]["ports"])
    # the API stays on the pod's loopback (no authentication; port-forward connects inside the pod), so its probes
    # connect from inside the pod: a kubelet's tcpSocket probe goes to the pod's IP and would never pass
    assert link.admin_host == "127.0.0.1"
    for probe in ("readinessProbe", "livenessProbe"):
        assert "tcpSocket" not in containers["link"][probe]
        assert containers["link"][probe]["exec"]["command"][-2:] == ["/app/compose/port_probe.py",
                                                                    f"127.0.0.1:{link.admin_port}"]  # fmt: skip
    # the link reads the namespace's switches (seed, tenants): the generated ConfigMap, by its hashed name
    switches = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith(
        "drill-fault-switches"))  # fmt: skip
    assert containers["link"]["envFrom"] == [{"configMapRef": {"name": switches["metadata"]["name"]}}]
    # not a hop: the hop defaults, rollouts and emergency stop leave it; its own PodMonitor scrapes both ports
    assert deploy["metadata"]["labels"]["app.kubernetes.io/component"] == "link"
    monitor = find(objects, "PodMonitor", "drill-links")
    assert monitor["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/component": "link"}
    scraped = {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]}
    named = {p["name"]: p["containerPort"] for c in containers.values() for p in c["ports"]}
    assert scraped == {"metrics", "link-metrics"} and named["link-metrics"] == link.metrics_port
    for c in containers.values():
        assert c["securityContext"]["readOnlyRootFilesystem"] and c["resources"]["limits"]
    assert pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "link"


def test_k8s_stack_file_drills_the_component_with_the_blackhole_plan() -> None:
    stack = yaml.safe_load((K8S / "stack-blackhole.yaml").read_text())
    plan = _plan()
    objects = render(K8S / "overlays/naive")
    variants = {v["name"]: pathlib.Path(v["config"]).stem for v in plan["variants"]}
    names = [c["name"] for c in stack["stack"]["configs"]]
    assert names == [n for n in variants if n != "balanced"]  # gRPC's round robin needs IPv4 targets
    for c in stack["stack"]["configs"]:
        assert f'"config":"{variants[c["name"]]}"' in c["switch"]
        assert "rollout status deploy -l app.kubernetes.io/component=hop" in c["switch"]
        assert c["switch"].rstrip().endswith("deploy/k8s/forward-gateway.sh")
    assert stack["stack"]["links"] == [{"name": "ledger-1", "hop": "ledger", "replica": 1,
                                        "admin": "http://127.0.0.1:8474"}]  # fmt: skip
    assert "deploy/ledger-1 -c link -- drill stop 1" in stack["stack"]["emergency_stop"]
    switches = next(o for o in objects if o["metadata"]["name"].startswith("drill-fault-switches"))
    assert str(stack["seed"]) == switches["data"]["DRILL_FAULT_SEED"] == str(plan["seed"])
    fault = dict(plan["fault"]["link"])
    fault.pop("expect")
    assert stack["fault"]["link"] == fault
    for key in ("traffic", "phases", "slo"):
        assert stack[key] == plan[key], key
    assert load_plan(K8S / "stack-blackhole.yaml").stack.links[0].admin == "http://127.0.0.1:8474"


# --- what they would start, as local processes ---------------------------------------------------------------------
def _probe(address: str) -> int:
    """The component's and compose's health probe (compose/port_probe.py, what /app/compose/port_probe.py is in the
    image) against `address`: 0 when it accepts."""
    return subprocess.run([sys.executable, "-I", "-S", str(ROOT / "compose" / "port_probe.py"), address],
                          timeout=10).returncode  # fmt: skip


@pytest.mark.parametrize("where", ["compose", "k8s"])
def test_the_admin_api_listens_where_its_callers_connect(tmp_path: pathlib.Path, where: str) -> None:
    """The link's own arguments from each file (its ports made free ones), started as a process. 127.0.0.2 stands
    for the address that is not the loopback of the link's host: the container's interface, where Docker's published
    port arrives (compose must answer there), and the pod's IP, where a kubelet's tcpSocket probe would connect (the
    component keeps the API off it, so its probe connects from inside, on 127.0.0.1)."""
    if where == "compose":
        argv = _argv(load_compose(COMPOSE, {})["services"]["link-ledger-1"]["command"])[1:]
    else:
        pod = find(_with_component(tmp_path, "naive"), "Deployment", "ledger-1")["spec"]["template"]["spec"]
        argv = next(c for c in pod["containers"] if c["name"] == "link")["args"]
    for flag, value in (("--host", "127.0.0.1"), ("--port", "0"), ("--admin-port", "0"), ("--metrics-port", "0")):
        argv[argv.index(flag) + 1] = value
    with drill_link(tmp_path, *argv[1:]) as (_, ready):
        admin = ready["admin_port"]
        assert _probe(f"127.0.0.1:{admin}") == 0  # the probe from inside, and kubectl port-forward's connection
        assert _probe(f"127.0.0.2:{admin}") == (0 if where == "compose" else 1)
