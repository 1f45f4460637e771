"""The committed observability files: rules mirror harness.core.status, generated files are fresh,
dashboard JSON is classic and wired to the provisioned datasource, the compose file is valid
and mounts only files that exist, and promtool accepts the config and the rule tests.
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

from harness import cli
from harness.core.status import CLIENT_FAULT_CODES, SERVER_FAULT_CODES, STATUS_NAMES, StatusClass, classify
from harness.dashboards import DATASOURCE_UID, build_all, default_values, iter_queries, plan_defaults
from harness.dashboards.rules import SLO_WINDOWS

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
        assert 'drill:slo_error_ratio:rate' in rule["expr"], rule["alert"]
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
