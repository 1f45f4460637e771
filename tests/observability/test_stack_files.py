"""The committed observability files: rules mirror harness.core.status, generated files are fresh,
dashboard JSON is classic and wired to the provisioned datasource, the compose file is valid,
mounts only files that exist, sets the Locust worker count once and builds a locked, pinned,
non-root image, Grafana's provisioning has the shape Grafana reads, and promtool accepts the
config and the rule tests. (tests/deploy/test_compose_local.py runs the compose file.)
"""

from __future__ import annotations

import importlib.metadata
import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from packaging.requirements import Requirement

from harness import cli
from harness.core.status import CLIENT_FAULT_CODES, SERVER_FAULT_CODES, STATUS_NAMES, StatusClass, classify
from harness.dashboards import DATASOURCE_UID, build_all, default_values, iter_queries, plan_defaults
from harness.dashboards.rules import SLO_WINDOWS
from tests.deploy.compose_spec import interpolate

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose"
COMPOSE_FILE = COMPOSE / "docker-compose.yml"
PROM_DIR = COMPOSE / "prometheus"
DASHBOARD_FILES = sorted((ROOT / "dashboards").glob("*.json"))
FIXED_UIDS = {"drill-overview", "drill-mttr"}


def _yaml(path: pathlib.Path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool not found: install Debian's prometheus (scripts/system-deps)")
    return tool


# --- rules <-> harness.core.status ------------------------------------------------------------------
def _class_rules() -> list[dict]:
    groups = _yaml(PROM_DIR / "rules/drill-recording.yml")["groups"]
    return [r for g in groups for r in g["rules"] if "status_class" in r.get("labels", {})]


def _codes(expr: str) -> set[str]:
    """Status names the first grpc_status matcher of a class rule selects."""
    m = re.search(r'grpc_status(=~|=)"([^"]+)"', expr)
    assert m, expr
    return set(m.group(2).split("|"))


def test_recording_rules_mirror_status_classes() -> None:
    expected = {
        StatusClass.OK.value: {"OK"},
        StatusClass.SERVER_FAULT.value: set(SERVER_FAULT_CODES),
        StatusClass.CLIENT_FAULT.value: set(CLIENT_FAULT_CODES),
        StatusClass.CANCELLED.value: {"CANCELLED"},
    }
    rules = _class_rules()
    # 4 classes: client and server at the plan window, and the SLO's edge calls at every other burn window
    assert len(rules) == 4 * (2 + len(SLO_WINDOWS) - 1)
    for rule in rules:
        assert _codes(rule["expr"]) == expected[rule["labels"]["status_class"]], rule["record"]
    # Together the four classes cover every status exactly once, as classify() decides it.
    for name in STATUS_NAMES:
        owners = [cls for cls, codes in expected.items() if name in codes]
        assert owners == [classify(name).value], name


def test_error_ratio_rules_exclude_cancelled_from_both_sides() -> None:
    groups = _yaml(PROM_DIR / "rules/drill-recording.yml")["groups"]
    ratios = [r for g in groups for r in g["rules"] if "_error_ratio:" in r.get("record", "")]
    assert len(ratios) == 2 + len(SLO_WINDOWS)
    for rule in ratios:
        numerator, denominator = rule["expr"].split("/")
        assert 'status_class="server-fault"' in numerator
        assert 'status_class!="cancelled"' in denominator
        assert denominator.rstrip().endswith("> 0)"), "an idle period must give no sample, not NaN"


def test_rules_and_dashboards_default_to_the_plan_and_the_edge() -> None:
    """Issue 15: the plan's window and SLO, edge callers, the SLO's traffic; no instant-selector tricks."""
    plan = plan_defaults.load()
    assert (plan.budget, plan.window_s, plan.traffic) == (0.05, 2, "organic")  # retry-storm's slo
    for model in build_all().values():
        values = default_values(model)
        assert values["caller"] == "loadgen|locust" and values["traffic"] == "organic", model["uid"]
        assert values["window"] == "3s"
        for q in iter_queries(model):
            assert "unless on" not in q.expr, q.name
            if " / " in q.expr and q.kind == "panel":
                assert "> 0)" in q.expr.split(" / ", 1)[1], f"{q.name}: divide by (… > 0)"
    assert default_values(next(m for m in build_all().values() if m["uid"] == "drill-mttr"))["slo"] == "0.05"
    alerts = _yaml(PROM_DIR / "rules/drill-alerts.yml")["groups"][0]["rules"]
    for rule in alerts:
        assert "drill:slo_error_ratio:rate" in rule["expr"], rule["alert"]
    pairs = {(r["labels"]["scale"], r["alert"]): r["expr"] for r in alerts}
    assert "rate1h > 0.72" in pairs[("workbook", "DrillSLOFastBurn")]
    assert "rate5m > 0.72" in pairs[("workbook", "DrillSLOFastBurn")]
    assert "rate6h > 0.3" in pairs[("workbook", "DrillSLOSlowBurn")]
    assert "rate36s > 0.05" in pairs[("drill", "DrillSLOFastBurn")]
    assert "rate3s > 0.05" in pairs[("drill", "DrillSLOFastBurn")]


def test_generated_dashboards_and_rules_are_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert cli.main(["dashboards", "build", "--check"]) == 0, "run `drill dashboards build` and commit"


# --- dashboards --------------------------------------------------------------------------------
def _provisioned_prometheus_uid() -> str:
    ds = _yaml(COMPOSE / "grafana/provisioning/datasources/prometheus.yaml")["datasources"]
    return next(d["uid"] for d in ds if d["type"] == "prometheus")


def _all_panels(model: dict) -> list[dict]:
    out = []
    for p in model["panels"]:
        out.append(p)
        out.extend(p.get("panels", []) or [])
    return out


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.name)
def test_dashboard_is_classic_json_wired_to_the_provisioned_datasource(path: pathlib.Path) -> None:
    model = json.loads(path.read_text(encoding="utf-8"))
    assert DATASOURCE_UID == _provisioned_prometheus_uid()
    # Classic model, not a v2 resource or manifest.
    assert not {"apiVersion", "kind", "spec", "metadata"} & set(model)
    assert model["uid"] in FIXED_UIDS and isinstance(model["schemaVersion"], int)
    panels = _all_panels(model)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids)
    n_targets = 0
    for panel in panels:
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE_UID}, panel["title"]
        refs = [t.get("refId") for t in panel["targets"]]
        assert all(refs) and len(refs) == len(set(refs)), panel["title"]
        for t in panel["targets"]:
            assert t["datasource"]["uid"] == DATASOURCE_UID and t["expr"].strip(), panel["title"]
            n_targets += 1
    assert n_targets >= 10
    for ann in model["annotations"]["list"]:
        if ann.get("expr"):
            assert ann["datasource"]["uid"] == DATASOURCE_UID
    for var in model["templating"]["list"]:
        if var["type"] == "query":
            assert var["datasource"]["uid"] == DATASOURCE_UID
    names = {v["name"] for v in model["templating"]["list"]}
    assert {"config", "caller", "service", "traffic", "window"} <= names


def test_overview_shows_drill_phases_from_fault_active() -> None:
    model = json.loads((ROOT / "dashboards/drill-overview.json").read_text(encoding="utf-8"))
    exprs = [a.get("expr", "") for a in model["annotations"]["list"]]
    assert any("drill_fault_active" in e for e in exprs)


# --- compose -----------------------------------------------------------------------------------
def test_compose_file_validates_against_the_compose_spec() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_file_compose_mounts_or_builds_from_exists() -> None:
    spec = _yaml(COMPOSE_FILE)
    checked = 0
    for name, svc in spec["services"].items():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0] if isinstance(vol, str) else vol["source"]
            if src.startswith((".", "/")):
                assert (COMPOSE / src).resolve().exists(), f"{name}: {src}"
                checked += 1
        build = svc.get("build")
        if build:
            context = (COMPOSE / build["context"]).resolve()
            assert context == ROOT and (context / build["dockerfile"]).is_file(), name
        # Files the image runs from /app (the repo copied in) exist in the repo.
        for arg in (svc.get("healthcheck") or {}).get("test", []):
            if isinstance(arg, str) and arg.startswith("/app/"):
                assert (ROOT / arg.removeprefix("/app/")).is_file(), f"{name}: {arg}"
                checked += 1
        command = svc.get("command", "")
        for m in re.finditer(r"loadtests/profiles/\$\{LOCUST_PROFILE:-([\w-]+)\}\.conf", str(command)):
            assert (ROOT / f"loadtests/profiles/{m.group(1)}.conf").is_file(), name
            checked += 1
    assert checked >= 6


def test_depends_on_healthy_targets_have_healthchecks() -> None:
    services = _yaml(COMPOSE_FILE)["services"]
    for name, svc in services.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            if cond.get("condition") == "service_healthy":
                assert services[dep].get("healthcheck"), f"{name} waits for {dep}, which has no healthcheck"


def test_grafana_image_matches_the_pinned_foundation_sdk() -> None:
    sdk = importlib.metadata.version("grafana-foundation-sdk")  # "EPOCH!GRAFANA_VERSION"
    grafana_version = sdk.split("!")[-1]
    image = _yaml(COMPOSE_FILE)["services"]["grafana"]["image"]
    assert image == f"grafana/grafana:{grafana_version}"


def test_prometheus_discovers_compose_services_by_dns() -> None:
    services = set(_yaml(COMPOSE_FILE)["services"])
    config = _yaml(PROM_DIR / "prometheus.yml")
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    for job in ("drill-services", "locust-master", "locust-workers"):
        for sd in jobs[job]["dns_sd_configs"]:
            assert sd["type"] == "A"
            assert set(sd["names"]) <= services, job
    assert jobs["locust-workers"]["dns_sd_configs"][0]["names"] == ["locust-worker"]


def _services(**env: str) -> dict:
    return interpolate(_yaml(COMPOSE_FILE), env)["services"]


def _flag(command: str, flag: str) -> str:
    args = command.split()
    assert flag in args, f"{flag} missing: {command}"
    return args[args.index(flag) + 1]


@pytest.mark.parametrize("workers", [None, "5"])
def test_one_variable_sets_the_workers_and_what_the_master_expects(workers: str | None) -> None:
    services = _services(**({"LOCUST_WORKERS": workers} if workers else {}))
    master, worker = services["locust-master"], services["locust-worker"]
    replicas = int(worker["deploy"]["replicas"])
    assert replicas == int(workers or 2)
    assert int(_flag(master["command"], "--expect-workers")) == replicas
    # a mismatch (say `--scale locust-worker=N`) ends in a bounded wait and a clear exit, not forever
    assert int(_flag(master["command"], "--expect-workers-max-wait")) > 0
    # the web UI (LOCUST_HEADLESS=false) is published on the host's loopback
    web_port = _flag(master["command"], "--web-port")
    assert f"127.0.0.1:{web_port}:{web_port}" in master["ports"]
    assert "LOCUST_HEADLESS" in master["environment"] and master["environment"]["LOCUST_HEADLESS"] is None
    assert _flag(worker["command"], "--master-port") == _flag(master["command"], "--master-bind-port")


def test_only_processes_that_trace_get_tracing_variables() -> None:
    """Locust's own OpenTelemetry support instruments HTTP only, so its gRPC calls have no spans."""
    services = _services()
    for name, svc in services.items():
        otel = {k for k in (svc.get("environment") or {}) if k.startswith("OTEL_")}
        if "drill serve" in str(svc.get("command", "")):
            assert "OTEL_TRACES_EXPORTER" in otel, name
        elif str(svc.get("command", "")).startswith("locust"):
            assert not otel, name


def _lock() -> dict[str, str]:
    """compose/requirements.lock as {name: version}, asserting every requirement is pinned and hashed."""
    text = (COMPOSE / "requirements.lock").read_text(encoding="utf-8")
    entries = re.split(r"\n(?=[A-Za-z0-9])", re.sub(r"^#.*\n", "", text, flags=re.M).strip())
    out = {}
    for entry in entries:
        first = entry.split("\\")[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^\s;]+)", first)
        assert m, f"not pinned: {first}"
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", entry), f"no hash: {first}"
        out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


def test_image_is_pinned_locked_and_non_root() -> None:
    for name, svc in _services().items():
        assert re.search(r":v?\d+\.\d+\.\d+$", svc["image"]), f"{name}: {svc['image']} is not pinned by version"
    dockerfile = (COMPOSE / "Dockerfile").read_text(encoding="utf-8")
    # FROM ${PYTHON_IMAGE}, a build argument whose default pins the version and the digest
    base = re.search(r"^ARG PYTHON_IMAGE=python:(\d+\.\d+)\.\d+-slim-\w+@sha256:[0-9a-f]{64}$", dockerfile, re.M)
    assert base and re.search(r"^FROM \$\{PYTHON_IMAGE\}$", dockerfile, re.M), "base image not pinned by digest"
    assert "pip install --require-hashes -r /tmp/requirements.lock" in dockerfile
    assert "--no-deps --no-build-isolation --no-index /app" in dockerfile  # nothing unlocked is fetched
    user = re.findall(r"^USER (\S+)$", dockerfile, re.M)
    assert user and re.fullmatch(r"[1-9]\d*:[1-9]\d*", user[-1]), "run as a numeric non-root user"
    lock_text = (COMPOSE / "requirements.lock").read_text(encoding="utf-8")
    assert f"--python-version {base.group(1)}" in lock_text  # resolved for the image's Python
    locked = _lock()
    # the lock holds what the image installs: the project's dependencies, Locust, the extra inputs
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    deps = re.search(r"^dependencies = \[(.*?)^\]", pyproject, re.M | re.S).group(1)
    load = re.search(r"^load = \[(.*?)\]", pyproject, re.M | re.S).group(1)
    extra = [line for line in (COMPOSE / "requirements.in").read_text().splitlines() if line and line[0] != "#"]
    wanted = [*re.findall(r'"([^"]+)"', deps), *re.findall(r'"([^"]+)"', load), *extra]
    assert len(wanted) > 10
    for spec in map(Requirement, wanted):
        name = spec.name.lower().replace("_", "-")
        assert name in locked, f"{spec} is not in compose/requirements.lock"
        assert spec.specifier.contains(locked[name], prereleases=True), f"{spec}: locked {locked[name]}"


def test_grafana_provisioning_has_the_shape_grafana_reads() -> None:
    """Grafana cannot run here: check its provisioning files the way Grafana reads them (provisioning
    docs: `apiVersion: 1`, datasources with name/type/access/url/uid, file providers with a path), and
    that every path and host they name exists in the compose stack."""
    services = _services()
    grafana = services["grafana"]
    mounts = {v.split(":")[1]: (COMPOSE / v.split(":")[0]).resolve() for v in grafana["volumes"]}

    def on_host(path: str) -> pathlib.Path:
        target = next(t for t in mounts if path == t or path.startswith(t + "/"))
        return mounts[target] / path[len(target) :].lstrip("/")

    provisioning = on_host("/etc/grafana/provisioning")
    sources = _yaml(provisioning / "datasources/prometheus.yaml")
    assert sources["apiVersion"] == 1
    uids = {d["uid"] for d in sources["datasources"]}
    for d in sources["datasources"]:
        assert {"name", "type", "access", "url", "uid"} <= set(d), d
        assert d["access"] in ("proxy", "direct") and len(d["uid"]) <= 40
        host, port = re.fullmatch(r"http://([\w-]+):(\d+)", d["url"]).groups()
        assert host in services, d["url"]
        declared = {str(p).rsplit(":", 1)[-1] for p in services[host].get("ports", [])} | set(
            services[host].get("expose", [])
        )
        assert port in declared, f"{d['url']}: {host} does not declare {port}"
        for link in d.get("jsonData", {}).get("exemplarTraceIdDestinations", []):
            assert link["datasourceUid"] in uids
    assert sum(d.get("isDefault", False) for d in sources["datasources"]) == 1
    providers = _yaml(provisioning / "dashboards/drill.yaml")
    assert providers["apiVersion"] == 1
    for p in providers["providers"]:
        assert p["type"] == "file" and p["name"]
        folder = on_host(p["options"]["path"])
        assert sorted(x.name for x in folder.glob("*.json")) == sorted(x.name for x in DASHBOARD_FILES)
    assert on_host(grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]).is_file()


# --- promtool ----------------------------------------------------------------------------------
def test_promtool_check_config() -> None:
    proc = subprocess.run(
        [_promtool(), "check", "config", str(PROM_DIR / "prometheus.yml")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 rule files found" in proc.stdout


def test_promtool_test_rules() -> None:
    tests = sorted((PROM_DIR / "tests").glob("*.yml"))
    assert tests
    proc = subprocess.run(
        [_promtool(), "test", "rules", *map(str, tests)], capture_output=True, text=True, cwd=PROM_DIR / "tests"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
