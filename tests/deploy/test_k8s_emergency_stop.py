"""deploy/k8s/stack.yaml's emergency stop reaches every hop, without a cluster: the pods its `kubectl`
selector names are exactly the rendered hop Deployments' pods, and `drill stop --all-local` (run in each)
recognises each pod's first process as a `drill serve` it may signal (harness/demo/stop.py)."""

from __future__ import annotations

import yaml

from harness.demo.stop import is_drill_serve
from tests.conftest import ROOT
from tests.deploy.kube import render

K8S = ROOT / "deploy" / "k8s"


def test_the_emergency_stop_command_reaches_every_hop_pod_of_every_overlay() -> None:
    stack = yaml.safe_load((K8S / "stack.yaml").read_text())["stack"]
    command = " ".join(stack["emergency_stop"].split())
    assert command == ("kubectl -n drill get pods -l app.kubernetes.io/component=hop -o name "
                       "| xargs -I{} kubectl -n drill exec {} -- drill stop --all-local")  # fmt: skip
    hops = [h["name"] for h in stack["hops"]]
    for config in stack["configs"]:
        objects = render(K8S / "overlays" / config["name"])
        pods = [o for o in objects if o["kind"] == "Deployment"]
        selected = [d for d in pods if d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
                    == "hop" and d["metadata"].get("namespace") == "drill"]  # fmt: skip
        assert sorted(d["metadata"]["name"] for d in selected) == sorted(hops), config["name"]
        for d in selected:
            (container,) = d["spec"]["template"]["spec"]["containers"]
            assert is_drill_serve([*container["command"], *container["args"]]), (config["name"], container)
