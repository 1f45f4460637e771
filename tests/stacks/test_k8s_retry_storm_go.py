"""deploy/k8s/components/retry-storm-go without a cluster: every overlay with the component renders with the real
kustomize and validates strictly (tests/deploy's validators, at its pinned Kubernetes versions), and the chain is
the shipped plan's: the Go edge on the plan's service configs behind a tap, the Node hop behind a tap calling the
ledger, the Go leaf of the plan's capacity behind the proxy that injects, the account gone."""

from __future__ import annotations

import json
import os
import pathlib
import re

import pytest
import yaml

from tests.conftest import ROOT
from tests.deploy.kube import K8S, K8S_VERSIONS, find, is_operator_object, render, validate_builtin

COMPONENT = K8S / "components" / "retry-storm-go"
PLAN = ROOT / "harness" / "plans" / "retry-storm-go.yaml"


def with_component(tmp_path: pathlib.Path, overlay: str) -> list[dict]:
    here = tmp_path / overlay
    here.mkdir()
    rel = os.path.relpath(K8S, here)
    (here / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{rel}/overlays/{overlay}]\ncomponents: [{rel}/components/retry-storm-go]\n"
    )
    return render(here)


def container(deployment: dict, name: str) -> dict:
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def proxy_words(hop: dict) -> list[str]:
    """The `drill proxy` words of a hop container's shell line (after the descriptor set is written)."""
    assert hop["command"] == ["sh", "-c"]
    line = hop["args"][0]
    assert line.startswith("python3 /app/compose/retry-storm-go/describe.py /tmp/drill.desc && exec drill proxy ")
    return line.split(" && exec ")[1].split()


def flag(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


@pytest.mark.parametrize("overlay", ("naive", "budget", "resilient"))
def test_the_component_renders_validates_strictly_and_is_the_plans_chain(tmp_path, overlay):
    objects = with_component(tmp_path, overlay)
    for version in K8S_VERSIONS:
        errors = {f"{o['kind']}/{o['metadata']['name']}": validate_builtin(o, version)
                  for o in objects if not is_operator_object(o)}  # fmt: skip
        assert not {k: e for k, e in errors.items() if e}, f"Kubernetes {version}"
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("Deployment", "account") not in names and ("Service", "account") not in names
    plan = yaml.safe_load(PLAN.read_text())
    commands = {p["name"]: p["command"] for p in plan["stack"]["processes"]}

    edge, node, leaf = (find(objects, "Deployment", n) for n in ("gateway", "order", "ledger"))
    # every hop container is a drill proxy on the pod's ports in front of its app on the pod's loopback
    for deployment, service, tap in ((edge, "gateway", True), (node, "order", True), (leaf, "ledger", False)):
        words = proxy_words(container(deployment, "hop"))
        assert flag(words, "--service") == service and ("--tap" in words) is tap
        assert flag(words, "--upstream") == "127.0.0.1:50052" and flag(words, "--descriptor-set") == "/tmp/drill.desc"
        app = container(deployment, "app")
        assert app["args"][app["args"].index("-port" if "-port" in app["args"] else "--port") + 1] == "50052"
        assert app["securityContext"]["readOnlyRootFilesystem"] and app["resources"]["limits"]
    # the chain's order: edge → order (Node) → ledger
    assert flag(container(edge, "app")["args"], "-upstream") == "order:50051"
    assert flag(container(node, "app")["args"], "--upstream") == "ledger:50051"
    # the leaf has the plan's capacity
    leaf_args = container(leaf, "app")["args"]
    for name in ("-work-ms", "-concurrency", "-queue"):
        assert re.search(rf"{name} {flag(leaf_args, name)}\b", commands["leaf"]), name
    # the edge's service configs are the plan's files, mounted where its argument names them, chosen by its label
    configs = find(objects, "ConfigMap", "retry-storm-go-service-configs")["data"]
    for name in ("naive", "throttled"):
        shipped = json.loads((PLAN.parent / "retry-storm-go" / f"{name}.json").read_text())
        assert json.loads(configs[f"{name}.json"]) == shipped
    app = container(edge, "app")
    assert flag(app["args"], "-service-config") == "/etc/retry-storm-go/$(GRPC_SERVICE_CONFIG).json"
    assert {m["mountPath"] for m in app["volumeMounts"]} == {"/etc/retry-storm-go"}
    assert edge["spec"]["template"]["metadata"]["labels"]["grpc-service-config"] == "naive"


def test_the_components_service_configs_are_the_plans_files():
    for name in ("naive", "throttled"):  # kustomize reads files below the component only: a copy, kept equal
        shipped = PLAN.parent / "retry-storm-go" / f"{name}.json"
        assert (COMPONENT / f"{name}.json").read_bytes() == shipped.read_bytes()
