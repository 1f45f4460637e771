"""deploy/k8s/ without a cluster: every kustomization renders with the real kustomize and validates
strictly (built-in kinds with kubernetes-validate at pinned Kubernetes versions, the Prometheus
Operator's kinds against its published API schemas); the PrometheusRule is the compose rule files'
groups and promtool accepts them; the dashboard ConfigMaps are dashboards/*.json; the overlays
differ only in the configuration; the hops are the retry-storm plan's; pods are hardened.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

from harness import cli
from harness.core.environ import environ_now
from tests.conftest import ROOT
from tests.deploy.kube import (
    K8S,
    K8S_VERSIONS,
    find,
    is_operator_object,
    pod_specs,
    render,
    tool,
    validate_builtin,
    validate_operator_objects,
)

OVERLAYS = ("naive", "budget", "resilient")
KUSTOMIZATIONS = ("base", *(f"overlays/{c}" for c in OVERLAYS), "load", "monitoring")
HOPS = ("gateway", "order", "account", "ledger")
#: `kubectl apply` (client side) keeps the whole object in an annotation limited to 256 KiB.
LAST_APPLIED_LIMIT = 262_144


def _version() -> str:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    return re.search(r'^version = "([^"]+)"', text, re.M).group(1)


def _container(template: dict, name: str) -> dict:
    return next(c for c in template["spec"]["containers"] if c["name"] == name)


def _flag(args: list[str], flag: str) -> str:
    assert flag in args, f"{flag} missing from {args}"
    return args[args.index(flag) + 1]


# --- render and validate ---------------------------------------------------------------------------
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_kustomization_renders_and_builtin_objects_validate_strictly(kustomization: str) -> None:
    objects = render(K8S / kustomization)
    builtin = [o for o in objects if not is_operator_object(o)]
    assert builtin or kustomization == "monitoring"
    for version in K8S_VERSIONS:
        errors = {f"{o['kind']}/{o['metadata']['name']}": validate_builtin(o, version) for o in builtin}
        assert not {k: e for k, e in errors.items() if e}, f"Kubernetes {version}"
    for o in objects:
        assert len(json.dumps(o)) < LAST_APPLIED_LIMIT, f"{o['kind']}/{o['metadata']['name']}: too big to apply"


def test_strict_validation_refuses_an_unknown_field() -> None:
    """The validator has teeth: a misspelt probe field fails (`kubectl apply` would refuse it too)."""
    deployment = copy.deepcopy(find(render(K8S / "overlays/naive"), "Deployment", "ledger"))
    _container(deployment["spec"]["template"], "hop")["readinessProbe"]["grpcc"] = {"port": 50051}
    assert "grpcc" in validate_builtin(deployment, K8S_VERSIONS[0])


def test_operator_objects_validate_against_the_operator_schemas(tmp_path: pathlib.Path) -> None:
    objects = [o for o in render(K8S / "monitoring") if is_operator_object(o)]
    assert sorted(o["kind"] for o in objects) == ["PodMonitor", "PodMonitor", "PrometheusRule"]
    # Two broken copies prove both checks bite: a duration the API refuses, and a field it lacks.
    bad_duration = copy.deepcopy(objects[0])
    bad_duration["spec"]["podMetricsEndpoints"][0]["interval"] = "1 s"
    unknown_field = copy.deepcopy(objects[0])
    unknown_field["spec"]["podMetricsEndpoints"][0]["intervall"] = "1s"
    errors = validate_operator_objects([*objects, bad_duration, unknown_field], tmp_path)
    assert errors[: len(objects)] == [[]] * len(objects), errors
    assert any("interval" in e and "pattern" in e for e in errors[-2]), errors[-2]
    assert any("intervall" in e for e in errors[-1]), errors[-1]


# --- rules and dashboards ----------------------------------------------------------------------------
def test_prometheus_rule_is_the_compose_rules_and_promtool_accepts_it(tmp_path: pathlib.Path) -> None:
    rule = find(render(K8S / "monitoring"), "PrometheusRule", "drill-rules")
    compose = [
        g
        for name in ("drill-recording.yml", "drill-alerts.yml")
        for g in yaml.safe_load((ROOT / "compose/prometheus/rules" / name).read_text())["groups"]
    ]
    assert rule["spec"]["groups"] == compose
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    promtool = tool("promtool", "install Debian's prometheus (scripts/system-deps)")
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in compose)} rules found" in proc.stdout


def test_dashboard_configmaps_are_the_dashboards() -> None:
    maps = [o for o in render(K8S / "monitoring") if o["kind"] == "ConfigMap"]
    dashboards = [m for m in maps if m["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    got = {key: text for m in dashboards for key, text in m["data"].items()}
    want = {p.name: p.read_text(encoding="utf-8") for p in sorted((ROOT / "dashboards").glob("*.json"))}
    assert got == want


def test_dashboard_datasource_configmap_provisions_the_dashboards_uid() -> None:
    from harness.dashboards import DATASOURCE_UID

    ds = find(render(K8S / "monitoring"), "ConfigMap", "drill-grafana-datasource")
    assert ds["metadata"]["labels"]["grafana_datasource"] == "1"
    (text,) = ds["data"].values()
    provisioned = yaml.safe_load(text)
    assert provisioned["apiVersion"] == 1
    (source,) = provisioned["datasources"]
    assert (source["uid"], source["type"]) == (DATASOURCE_UID, "prometheus")


def test_build_check_covers_the_kubernetes_copies(tmp_path: pathlib.Path, monkeypatch) -> None:
    """A missing or edited copy under the k8s output is stale for `drill dashboards build --check`."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "monitoring"
    shutil.copytree(K8S / "monitoring", out)
    assert cli.main(["dashboards", "build", "--check", "--k8s-out", str(out)]) == 0
    (out / "dashboards/drill-mttr.json").write_text("{}\n")
    assert cli.main(["dashboards", "build", "--check", "--k8s-out", str(out)]) == 1
    (out / "dashboards/drill-mttr.json").unlink()
    shutil.copy(K8S / "monitoring/dashboards/drill-mttr.json", out / "dashboards/drill-mttr.json")
    (out / "prometheus-rule.yaml").unlink()
    assert cli.main(["dashboards", "build", "--check", "--k8s-out", str(out)]) == 1


# --- overlays ----------------------------------------------------------------------------------------
def _normalised(objects: list[dict], config: str) -> list[dict]:
    """The objects with the configuration's name taken out of the two places an overlay may set it:
    every `config` label (objects and pod templates) and the drill-config ConfigMap. Asserts it was there."""
    out = []
    for o in copy.deepcopy(objects):
        assert o["metadata"]["labels"].pop("config") == config, f"{o['kind']}/{o['metadata']['name']}"
        template = o.get("spec", {}).get("template")
        if template is not None:
            assert template["metadata"]["labels"].pop("config") == config, o["metadata"]["name"]
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "drill-config":
            assert o["data"].pop("config") == config
        out.append(o)
    return out


def test_overlays_differ_only_in_the_configuration() -> None:
    rendered = {c: render(K8S / "overlays" / c) for c in OVERLAYS}
    normalised = {c: _normalised(objs, c) for c, objs in rendered.items()}
    assert normalised["naive"] == normalised["budget"] == normalised["resilient"]
    # ... and that configuration is a real one, which every hop with a downstream runs.
    for c in OVERLAYS:
        assert (ROOT / "harness/configs" / f"{c}.yaml").is_file()
        for hop in HOPS[:-1]:
            container = _container(find(rendered[c], "Deployment", hop)["spec"]["template"], "hop")
            assert _flag(container["args"], "--config") == "$(DRILL_CONFIG)"
            env = {e["name"]: e for e in container["env"]}
            assert env["DRILL_CONFIG"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['config']"


def test_overlays_keep_selectors_and_names_stable() -> None:
    """Switching overlays must apply in place: selectors are immutable and names must not move."""
    for c in OVERLAYS:
        for o in render(K8S / "overlays" / c):
            assert "config" not in json.dumps(o.get("spec", {}).get("selector", {})), o["metadata"]["name"]
    names = {c: sorted((o["kind"], o["metadata"]["name"]) for o in render(K8S / "overlays" / c)) for c in OVERLAYS}
    assert names["naive"] == names["budget"] == names["resilient"]


# --- topology ------------------------------------------------------------------------------------------
def test_hops_are_the_retry_storm_plans_chain() -> None:
    plan = yaml.safe_load((ROOT / "harness/plans/retry-storm.yaml").read_text())
    spec = {h["name"]: h for h in plan["topology"]["hops"]}
    assert tuple(spec) == HOPS
    objects = render(K8S / "base")
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    for i, name in enumerate(HOPS):
        deployment = find(objects, "Deployment", name)
        args = _container(deployment["spec"]["template"], "hop")["args"]
        assert args[0] == "serve" and "--admission" in args and "--enable-faults" not in args
        assert _flag(args, "--service") == name
        assert float(_flag(args, "--work-ms")) == spec[name]["work_ms"]
        assert int(_flag(args, "--concurrency")) == spec[name]["concurrency"]
        assert int(_flag(args, "--queue")) == spec[name]["queue"]
        if i + 1 < len(HOPS):
            host, port = _flag(args, "--downstream").split(":")
            assert host == HOPS[i + 1] and int(port) == int(_flag(args, "--port"))
            assert services[host]["spec"]["ports"][0]["port"] == int(port)
        else:
            assert "--downstream" not in args and "--config" not in args
    switches = find(objects, "ConfigMap", next(
        o["metadata"]["name"] for o in objects if o["metadata"]["name"].startswith("drill-fault-switches")
    ))  # fmt: skip
    # the fault switch comes from the environment; the seed is the plans'
    assert switches["data"]["DRILL_FAULT_ENABLED"] == "1"
    assert switches["data"]["DRILL_FAULT_SEED"] == str(plan["seed"])


def test_pods_are_hardened_probed_and_bounded() -> None:
    image = f"drill-harness:{_version()}"
    compose = yaml.safe_load((ROOT / "compose/docker-compose.yml").read_text())
    assert {s["image"] for s in compose["services"].values() if "build" in s} == {image}
    templates = pod_specs(render(K8S / "overlays/naive")) + pod_specs(render(K8S / "load"))
    assert len(templates) == len(HOPS) + 2
    for where, template in templates:
        spec = template["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", where
        assert spec["enableServiceLinks"] is False, where  # no LOCUST_MASTER_PORT=tcp://… for Locust
        assert spec["automountServiceAccountToken"] is False, where
        for c in spec["containers"]:
            assert c["image"] == image, where
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]) & set(c["resources"]["limits"]), where
    for where, template in templates[: len(HOPS)]:
        hop = _container(template, "hop")
        port = int(_flag(hop["args"], "--port"))
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert hop[probe]["grpc"] == {"port": port}, f"{where} {probe}"
    namespace = find(render(K8S / "base"), "Namespace", "drill")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_drill_secret_is_a_secret_the_hops_read_and_empty_by_default() -> None:
    objects = render(K8S / "base")
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    assert secret["data"] == {"DRILL_FAULT_SECRET": ""}
    for name in HOPS:
        hop = _container(find(objects, "Deployment", name)["spec"]["template"], "hop")
        assert {"secretRef": {"name": secret["metadata"]["name"]}} in hop["envFrom"]


# --- Locust -----------------------------------------------------------------------------------------------
def _locust(directory: pathlib.Path) -> tuple[dict, dict]:
    objects = render(directory)
    return find(objects, "Job", "locust-master"), find(objects, "Deployment", "locust-worker")


@pytest.mark.parametrize("workers", [None, 5])
def test_worker_count_is_set_once_and_feeds_expect_workers(tmp_path: pathlib.Path, workers: int | None) -> None:
    directory = K8S / "load"
    if workers is not None:  # change the one place, in a copy
        directory = tmp_path / "load"
        shutil.copytree(K8S / "load", directory)
        kust = directory / "kustomization.yaml"
        text, n = re.subn(r"(name: locust-worker\n\s+count: )\d+", rf"\g<1>{workers}", kust.read_text())
        assert n == 1
        kust.write_text(text)
    master, worker = _locust(directory)
    count = worker["spec"]["replicas"]
    assert workers is None or count == workers
    container = _container(master["spec"]["template"], "locust")
    env = {e["name"]: e for e in container["env"]}
    assert env["LOCUST_EXPECT_WORKERS"]["value"] == str(count)
    assert _flag(container["args"], "--expect-workers") == "$(LOCUST_EXPECT_WORKERS)"
    assert int(_flag(container["args"], "--expect-workers-max-wait")) > 0
    assert "--headless" not in container["args"]  # the profiles set headless = true
    assert env["LOCUST_DRILL_CONFIG"]["valueFrom"]["configMapKeyRef"] == {"name": "drill-config", "key": "config"}
    profile = env["DRILL_LOCUST_PROFILE"]["value"]
    assert (ROOT / "loadtests/profiles" / f"{profile}.conf").is_file()
    assert not [e for e in env if e.startswith("LOCUST_PROFILE")]  # Locust would read it as --profile
    assert master["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert master["spec"]["activeDeadlineSeconds"] > 0
    worker_args = _container(worker["spec"]["template"], "locust")["args"]
    assert _flag(worker_args, "--master-host") == "locust-master"


def test_podmonitors_select_the_pods_and_ports_that_exist() -> None:
    monitors = [o for o in render(K8S / "monitoring") if o["kind"] == "PodMonitor"]
    templates = [t for _, t in pod_specs(render(K8S / "overlays/naive")) + pod_specs(render(K8S / "load"))]
    selected_total = 0
    for monitor in monitors:
        assert monitor["metadata"]["namespace"] == "drill"
        want = monitor["spec"]["selector"]["matchLabels"]
        selected = [t for t in templates if want.items() <= t["metadata"]["labels"].items()]
        assert selected, monitor["metadata"]["name"]
        selected_total += len(selected)
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            assert endpoint["interval"] == "1s"
            for t in selected:
                ports = {p["name"] for c in t["spec"]["containers"] for p in c.get("ports", [])}
                assert endpoint["port"] in ports
    assert selected_total == len(templates)  # every pod is scraped
    hops = next(m for m in monitors if m["metadata"]["name"] == "drill-hops")
    relabel = {r["targetLabel"]: r["sourceLabels"] for r in hops["spec"]["podMetricsEndpoints"][0]["relabelings"]}
    assert relabel["config"] == ["__meta_kubernetes_pod_label_config"]


# --- the stack file and its switch commands ---------------------------------------------------------------
def test_stack_file_drills_the_manifests_with_the_retry_storm_plan() -> None:
    """deploy/k8s/stack.yaml names what the manifests run: one overlay per configuration, the hops in
    chain order with selectors on the labels the PodMonitor gives them, the plan's load and SLO."""
    stack = yaml.safe_load((K8S / "stack.yaml").read_text())
    plan = yaml.safe_load((ROOT / "harness/plans/retry-storm.yaml").read_text())
    assert [c["name"] for c in stack["stack"]["configs"]] == list(OVERLAYS) == plan["configs"]
    for c in stack["stack"]["configs"]:
        assert f"kubectl apply -k deploy/k8s/overlays/{c['name']}" in c["switch"]
        assert "rollout status deploy -l app.kubernetes.io/component=hop" in c["switch"]
        assert c["switch"].rstrip().endswith("deploy/k8s/forward-gateway.sh")
        assert c["switch_timeout_s"] > 120 and c["ready"]["checks"] >= 1
    objects = render(K8S / "overlays/naive")
    namespace = find(objects, "Namespace", "drill")["metadata"]["name"]
    hops = stack["stack"]["hops"]
    assert [h["name"] for h in hops] == list(HOPS)
    for h in hops:
        assert h["selector"] == f'{{namespace="{namespace}", service="{h["name"]}"}}'
    switches = next(o for o in objects if o["metadata"]["name"].startswith("drill-fault-switches"))
    assert str(stack["seed"]) == switches["data"]["DRILL_FAULT_SEED"] == str(plan["seed"])
    for key in ("traffic", "fault", "phases", "slo", "trials"):
        assert stack[key] == plan[key], key
    assert stack["stack"]["edge"]["address"].endswith(":50051")


def test_forward_script_replaces_only_its_own_previous_forward(tmp_path: pathlib.Path) -> None:
    """Each switch restarts the gateway forward: the previous one (by saved PID) stops, the new one
    runs in its own session so it outlives the switch command. `kubectl` is a stand-in here."""
    import os
    import signal
    import time

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "kubectl").write_text("#!/bin/sh\nwhile :; do sleep 1; done\n")
    (fake / "kubectl").chmod(0o755)
    # a setsid(1) slow to make its session, as a busy box makes the real one: the test must wait for the forward
    # itself, not for a process whose arguments merely name it (a CI run beside two CPU hogs caught the gap)
    (fake / "setsid").write_text(f"#!/bin/sh\nsleep 0.5\nexec {shutil.which('setsid')} \"$@\"\n")
    (fake / "setsid").chmod(0o755)
    env = {**environ_now(), "PATH": f"{fake}:{os.environ['PATH']}", "TMPDIR": str(tmp_path), "COLUMNS": "80"}
    pidfile = tmp_path / "drill-k8s-gateway-forward.pid"
    unrelated = subprocess.Popen(["sleep", "30"], start_new_session=True)  # a stale PID must not be killed
    pids = []
    try:
        pidfile.write_text(str(unrelated.pid))
        for _ in range(2):
            subprocess.run(["sh", str(K8S / "forward-gateway.sh")], env=env, check=True, timeout=30)
            pids.append(int(pidfile.read_text()))
            # the forward is started in the background: wait until it *is* the port-forward (a busy box may not
            # have exec'd it yet, and the script rightly leaves alone a PID that is not its forward). setsid(1)
            # carries the forward's arguments before it has made its session and exec'd kubectl: wait past it
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not _is_forward(pids[-1]):
                time.sleep(0.05)
        first, second = pids
        # the script waits for the old forward to end before it returns: it is gone now, or a zombie where
        # PID 1 does not reap (a container); $COLUMNS=80 must not hide its arguments from the script
        assert not _running(first), "the previous forward still runs"
        args = pathlib.Path(f"/proc/{second}/cmdline").read_bytes().split(b"\0")
        assert b"port-forward" in args and b"svc/gateway" in args and b"50051:50051" in args
        assert os.getsid(second) == second  # its own session
        assert unrelated.poll() is None
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        unrelated.kill()
        unrelated.wait()


def _running(pid: int) -> bool:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _is_forward(pid: int) -> bool:
    """The PID runs the (stand-in) kubectl port-forward itself, no longer the setsid(1) that starts it."""
    args = _cmdline(pid).split(b"\0")
    return b"port-forward" in args and not any(a.endswith(b"setsid") for a in args)


def _cmdline(pid: int) -> bytes:
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


# --- the ledger in another language, behind a drill proxy sidecar --------------------------------------
def _with_component(tmp_path: pathlib.Path, overlay: str, component: str) -> list[dict]:
    """An overlay with a component added, as a user's kustomization would add it (paths relative: kustomize
    refuses absolute ones)."""
    here = tmp_path / overlay
    here.mkdir()
    rel = os.path.relpath(K8S, here)
    (here / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{rel}/overlays/{overlay}]\ncomponents: [{rel}/components/{component}]\n"
    )
    return render(here)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ledger_go_component_puts_the_proxy_in_front_of_the_go_ledger(tmp_path: pathlib.Path, overlay: str) -> None:
    """deploy/k8s/components/ledger-go: the ledger pod runs the Go ledger on its loopback and `drill proxy` in
    its hop container, on the ports the Service, the PodMonitor and the probes name; nothing else changes, and
    every object still validates strictly."""
    plain = render(K8S / "overlays" / overlay)
    objects = _with_component(tmp_path, overlay, "ledger-go")
    for version in K8S_VERSIONS:
        errors = {f"{o['kind']}/{o['metadata']['name']}": validate_builtin(o, version)
                  for o in objects if not is_operator_object(o)}  # fmt: skip
        assert not {k: e for k, e in errors.items() if e}, f"Kubernetes {version}"
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    changed = {key(o) for o in objects} ^ {key(o) for o in plain} | {
        key(o) for o in objects for p in plain if key(o) == key(p) and o != p
    }
    assert changed == {("Deployment", "ledger")}, changed

    template = find(objects, "Deployment", "ledger")["spec"]["template"]
    hop, app = _container(template, "hop"), _container(template, "app")
    assert hop["args"][0] == "proxy" and _flag(hop["args"], "--service") == "ledger"  # the stack's fault target
    upstream_host, upstream_port = _flag(hop["args"], "--upstream").rsplit(":", 1)
    assert (upstream_host, _flag(app["args"], "-port")) == ("127.0.0.1", upstream_port)
    assert _flag(app["args"], "-host") == "127.0.0.1"  # only the proxy reaches it
    assert app["image"] == "drill-ledger-go:0.1.0"
    ports = {p["name"]: p["containerPort"] for p in hop["ports"]}
    assert (str(ports["grpc"]), str(ports["metrics"])) == (_flag(hop["args"], "--port"),
                                                           _flag(hop["args"], "--metrics-port"))  # fmt: skip
    # the Go ledger keeps the plan's ledger capacity, as the Python hop had it
    ledger = next(h for h in _plan_hops() if h["name"] == "ledger")
    assert [_flag(app["args"], f) for f in ("-work-ms", "-concurrency", "-queue")] == [
        str(ledger["work_ms"]), str(ledger["concurrency"]), str(ledger["queue"])]
    assert app["securityContext"]["readOnlyRootFilesystem"] and app["resources"]["limits"]
    # the stack's emergency stop (`kubectl exec POD -- drill stop --all-local`, no -c) reaches the proxy
    stop = yaml.safe_load((K8S / "stack.yaml").read_text())["stack"]["emergency_stop"]
    assert " exec " in stop and " -c " not in stop
    assert template["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "hop"


def _plan_hops() -> list[dict]:
    return yaml.safe_load((ROOT / "harness" / "plans" / "retry-storm.yaml").read_text())["topology"]["hops"]
