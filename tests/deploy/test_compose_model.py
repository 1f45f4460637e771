"""The compose model as `docker compose` renders it (no engine): what the file and the docs promise
about building, publishing, scaling, health and exit codes.

- One service builds the project's image; the others name it, so `up --build` makes one image (compose
  v2 builds a `build:` of every service, each under the same tag: the others end up dangling and their
  containers are recreated by the next `up`), and every start includes the builder.
- Published ports listen on the host's loopback unless `DRILL_PUBLISH_HOST` widens them; Prometheus
  has no lifecycle (or admin) endpoint.
- The hops' healthcheck is the standard-library probe without site-packages.
- `LEDGER_REPLICAS` sets the ledger's replicas for every `up` (the stack's switches too) and the
  account is recreated when it changes (it resolves the name when it connects).
- The documented Locust command returns the master's exit code; UI mode quits after the phases.
- The base image is pinned by digest through a build argument a stand-in build can override.
- The label the stack reads the hops by is the one Prometheus writes, and the docs name it.
(Checked under a real engine too: docs/observability.md.)
"""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from tests.conftest import ROOT
from tests.deploy.compose_spec import interpolate, load_compose

COMPOSE_FILE = ROOT / "compose" / "docker-compose.yml"
DOCKERFILE = ROOT / "compose" / "Dockerfile"
STACK = ROOT / "compose" / "stack.yaml"
HOPS = ("gateway", "order", "account", "ledger")
#: The multi-platform index digest of python:3.11.13-slim-bookworm on Docker Hub.
BASE_DIGEST = "sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1"


def services(**env: str) -> dict:
    return load_compose(COMPOSE_FILE, env)["services"]


def depends(svcs: dict, name: str) -> set[str]:
    """Every service `name` depends on, transitively (what `docker compose up NAME` also starts)."""
    out: set[str] = set()
    todo = list(svcs[name].get("depends_on") or {})
    while todo:
        dep = todo.pop()
        if dep not in out:
            out.add(dep)
            todo += list(svcs[dep].get("depends_on") or {})
    return out


# --- one image, built once ---------------------------------------------------------------------------
def test_one_service_builds_the_image_every_other_service_names() -> None:
    svcs = services()
    builders = [n for n, s in svcs.items() if "build" in s]
    assert builders == ["ledger"], builders
    image = svcs["ledger"]["image"]
    users = [n for n, s in svcs.items() if s.get("image") == image]
    assert set(users) == {*HOPS, "locust-master", "locust-worker"}
    for name in users:
        # any `up` of a service on the image starts the builder too, so a fresh machine builds it first
        assert name == "ledger" or "ledger" in depends(svcs, name), name


# --- what is published, and where --------------------------------------------------------------------
def _published(svcs: dict) -> list[tuple[str, str]]:
    return [(n, str(p)) for n, s in svcs.items() for p in s.get("ports", [])]


def test_published_ports_listen_on_loopback_unless_widened() -> None:
    ports = _published(services())
    assert {n for n, _ in ports} == {"gateway", "prometheus", "grafana", "locust-master", "jaeger"}
    for name, port in ports:
        assert port.count(":") == 2 and port.startswith("127.0.0.1:"), f"{name}: {port}"
    for name, port in _published(services(DRILL_PUBLISH_HOST="0.0.0.0")):
        assert port.startswith("0.0.0.0:"), f"{name}: {port} ignores DRILL_PUBLISH_HOST"


def test_prometheus_opens_no_lifecycle_or_admin_endpoint() -> None:
    command = services()["prometheus"]["command"]
    assert not [a for a in command if a.startswith(("--web.enable-lifecycle", "--web.enable-admin-api"))]


# --- health -------------------------------------------------------------------------------------------
def test_hops_check_health_with_the_stdlib_probe_without_site_packages() -> None:
    for name in HOPS:
        test = services()[name]["healthcheck"]["test"]
        assert test[:4] == ["CMD", "python3", "-I", "-S"], f"{name}: {test}"
        assert test[4] == "/app/compose/grpc_health_probe.py" and (ROOT / "compose/grpc_health_probe.py").is_file()
        # the probe must run without site-packages: standard library only
        source = (ROOT / "compose/grpc_health_probe.py").read_text()
        imported = set(re.findall(r"^(?:import|from) (\w+)", source, re.M))
        assert imported <= {"__future__", "_socket", "sys", "time"}, imported


# --- ledger replicas ------------------------------------------------------------------------------------
def _switches() -> list[str]:
    return [c["switch"] for c in yaml.safe_load(STACK.read_text())["stack"]["configs"]]


def test_ledger_replicas_come_from_one_variable_that_every_up_reads() -> None:
    assert int(services()["ledger"]["deploy"]["replicas"]) == 1
    for switch in _switches():
        # the switch is one more `docker compose up`: with LEDGER_REPLICAS exported it keeps the scale
        words = shlex.split(switch)
        env = dict(w.split("=", 1) for w in words if re.fullmatch(r"[A-Z_]+=.*", w))
        assert "LEDGER_REPLICAS" not in env, "the switch must not set the scale itself"
        assert int(services(**env, LEDGER_REPLICAS="3")["ledger"]["deploy"]["replicas"]) == 3, switch
        assert "--scale" not in words
    # a change of the scale changes the account's model, so compose recreates it (and it re-resolves)
    one, three = services()["account"], services(LEDGER_REPLICAS="3")["account"]
    assert one != three and one["command"] == three["command"]


def _sh_lines(doc: str) -> list[str]:
    text = (ROOT / "docs" / doc).read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    return [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]


def test_docs_scale_the_ledger_with_the_variable() -> None:
    lines = _sh_lines("observability.md")
    assert not [line for line in lines if "--scale ledger" in line]  # lasts only until the next `up`
    assert "export LEDGER_REPLICAS=3" in lines


# --- the documented Locust command ------------------------------------------------------------------------
def _load_commands() -> list[tuple[str, str]]:
    """(where, command) of every documented `docker compose … --profile load up …`."""
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```sh\n(.*?)```", doc.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                if "--profile load" in line and " up" in line:
                    out.append((doc.name, line))
    comments = "\n".join(
        line.lstrip("# ") for line in COMPOSE_FILE.read_text().splitlines() if line.startswith("#")
    ).replace("\\\n", " ")
    out += [("docker-compose.yml", line) for line in comments.splitlines() if "--profile load" in line]
    return out


def test_documented_locust_command_exits_with_the_masters_code() -> None:
    commands = _load_commands()
    assert {where for where, _ in commands} >= {"observability.md", "docker-compose.yml"}
    for where, line in commands:
        words = shlex.split(line.split("#")[0])
        assert "--exit-code-from" in words and words[words.index("--exit-code-from") + 1] == "locust-master", (
            f"{where}: {line}"
        )



def test_master_quits_after_its_phases_with_or_without_the_web_ui() -> None:
    args = shlex.split(services()["locust-master"]["command"])
    assert "--autostart" in args  # Locust applies --autoquit only to runs it started itself
    assert int(args[args.index("--autoquit") + 1]) >= 0
    # headless stays the profiles' default, and LOCUST_HEADLESS=false (UI mode) is passed through
    assert services()["locust-master"]["environment"]["LOCUST_HEADLESS"] is None


# --- the image ---------------------------------------------------------------------------------------------
def test_base_image_is_pinned_by_digest_through_a_build_argument() -> None:
    text = DOCKERFILE.read_text()
    arg = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert arg, "no PYTHON_IMAGE build argument"
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@" + BASE_DIGEST, arg.group(1)), arg.group(1)
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert froms == ["${PYTHON_IMAGE}"], froms
    # compose passes the variable only when set in the shell (a stand-in's tag); unset, the digest holds
    build = services()["ledger"]["build"]
    assert build["args"] == ["PYTHON_IMAGE"], build["args"]
    assert interpolate(build["args"], {"PYTHON_IMAGE": "x"}) == ["PYTHON_IMAGE"]  # no `${…:-…}` default to drift


def test_image_keeps_no_build_output_in_app() -> None:
    """pip builds the project in /app (setuptools writes build/ and *.egg-info there): the same RUN
    removes them, so no layer keeps them (checked for real with `docker run … ls -a /app`)."""
    runs = re.findall(r"^RUN (.*?)(?<!\\)\n", re.sub(r"\\\n\s*", "\\\n", DOCKERFILE.read_text()), re.M | re.S)
    install = next(r for r in runs if "--no-index /app" in r)
    assert "rm -rf /app/build /app/*.egg-info" in install.replace("\\\n", " "), install


# --- the label the stack reads -------------------------------------------------------------------------------
def test_the_label_the_stack_reads_is_written_by_prometheus_and_named_by_the_docs() -> None:
    plan = yaml.safe_load(STACK.read_text())
    labels = {re.match(r"\{(\w+)=", h["selector"]).group(1) for h in plan["stack"]["hops"]}
    assert labels == {"compose_service"}, labels
    prom = yaml.safe_load((ROOT / "compose/prometheus/prometheus.yml").read_text())
    job = next(j for j in prom["scrape_configs"] if j["job_name"] == "drill-services")
    written = {r["target_label"] for r in job["relabel_configs"] if r.get("source_labels") == ["__meta_dns_name"]}
    assert "compose_service" in written
    for doc in ("stacks.md", "observability.md"):
        text = (ROOT / "docs" / doc).read_text()
        compose_part = text[text.index("compose/stack.yaml") :]
        said = re.findall(r"by their `(\w+)` label", compose_part)
        assert said and set(said) == labels, f"docs/{doc} says the hops are read by {said}"


@pytest.mark.parametrize("doc", ["observability.md", "stacks.md"])
def test_docs_show_no_removed_healthcheck_or_lifecycle(doc: str) -> None:
    assert "grpc_healthcheck.py" not in (ROOT / "docs" / doc).read_text()
    assert not [line for line in _sh_lines(doc) if "enable-lifecycle" in line or "/-/reload" in line]


# --- no pull of the local image, workers behind a serving master, hops that let callers re-resolve ---------
def test_no_service_pulls_the_image_no_registry_has() -> None:
    """A first `up --build` would try to pull `drill-harness` for each service that only names it and print an
    error for each before building it: those never pull, and the builder builds it when it is missing."""
    svcs = services()
    image = svcs["ledger"]["image"]
    assert svcs["ledger"]["pull_policy"] == "missing" and "build" in svcs["ledger"]
    for name, svc in svcs.items():
        if svc.get("image") == image and name != "ledger":
            assert svc.get("pull_policy") == "never", name


def test_workers_start_once_the_master_serves_and_give_up_on_a_silent_one() -> None:
    svcs = services()
    master, worker = svcs["locust-master"], svcs["locust-worker"]
    assert worker["depends_on"]["locust-master"]["condition"] == "service_healthy"
    args = shlex.split(master["command"])
    port = args[args.index("--drill-metrics-port") + 1]
    # the port it serves once its options and target method were checked (loadtests/hooks.py `_init`)
    assert master["healthcheck"]["test"] == ["CMD", "python3", "-I", "-S", "/app/compose/port_probe.py",
                                             f"127.0.0.1:{port}"]  # fmt: skip
    assert "--drill-master-wait" not in shlex.split(worker["command"])  # the locustfile's 15 s default


def test_every_hop_ends_its_connections_so_callers_see_new_replicas() -> None:
    svcs = services()
    for hop in HOPS:
        args = shlex.split(svcs[hop]["command"])
        assert 0 < int(args[args.index("--max-connection-age-ms") + 1]) <= 30_000, hop
    docs = yaml.safe_load_all((ROOT / "deploy" / "k8s" / "base" / "hops.yaml").read_text())
    for doc in docs:
        if (doc or {}).get("kind") == "Deployment":
            args = doc["spec"]["template"]["spec"]["containers"][0]["args"]
            assert 0 < int(args[args.index("--max-connection-age-ms") + 1]) <= 30_000, doc["metadata"]["name"]


# --- the ledger in Go behind drill proxy (compose/ledger-go.yml, an override) --------------------------------
GO_OVERRIDE = ROOT / "compose" / "ledger-go.yml"


def test_go_override_keeps_the_ledgers_name_ports_and_build_and_fronts_the_go_server() -> None:
    """Merged as `-f docker-compose.yml -f ledger-go.yml`: `ledger` is now `drill proxy` on the hop's ports (what
    the account calls, Prometheus scrapes and compose/stack.yaml's selectors name), still the one builder of the
    project's image; it forwards only to `ledger-go`, which publishes nothing, has the plan's ledger capacity,
    scales with LEDGER_REPLICAS like the proxies and is never pulled. The Go image builds from the same pinned
    base through the same build argument, and its healthcheck's probe is in that image."""
    plain = services()
    merged = load_compose([COMPOSE_FILE, GO_OVERRIDE], {"LEDGER_REPLICAS": "3"})["services"]
    assert set(merged) == set(plain) | {"ledger-go"}
    assert {k: v for k, v in merged.items() if k not in ("ledger", "ledger-go")} == {
        k: v for k, v in load_compose(COMPOSE_FILE, {"LEDGER_REPLICAS": "3"})["services"].items() if k != "ledger"}
    ledger, go = merged["ledger"], merged["ledger-go"]
    argv = shlex.split(ledger["command"])
    flag = lambda name: argv[argv.index(name) + 1]  # noqa: E731
    assert argv[:2] == ["drill", "proxy"] and flag("--upstream") == "ledger-go:50051"
    assert (flag("--port"), flag("--metrics-port"), flag("--service")) == ("50051", "9464", "ledger")
    assert ledger["build"] == plain["ledger"]["build"] and ledger["healthcheck"] == plain["ledger"]["healthcheck"]
    assert ledger["depends_on"]["ledger-go"] == {"condition": "service_healthy"}
    assert "ports" not in go and go["pull_policy"] == "missing" and go["deploy"]["replicas"] == "3"
    go_argv = shlex.split(go["command"])
    go_flag = lambda name: go_argv[go_argv.index(name) + 1]  # noqa: E731
    plan_ledger = next(h for h in yaml.safe_load((ROOT / "harness/plans/retry-storm.yaml").read_text())
                       ["topology"]["hops"] if h["name"] == "ledger")  # fmt: skip
    assert [go_flag(f) for f in ("-work-ms", "-concurrency", "-queue")] == [
        str(plan_ledger[k]) for k in ("work_ms", "concurrency", "queue")]
    assert go_flag("-port") == "50051" and go_flag("-host") == "0.0.0.0"
    dockerfile = (ROOT / go["build"]["dockerfile"]).read_text()
    assert f"ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm@{BASE_DIGEST}" in dockerfile
    assert go["build"]["args"] == ["PYTHON_IMAGE"] and "golang-google-grpc-dev" in dockerfile
    probe = go["healthcheck"]["test"][-2]
    assert f"COPY {probe.removeprefix('/app/')} {probe}" in dockerfile


def test_go_stack_file_is_the_compose_stack_file_with_both_compose_files() -> None:
    go = yaml.safe_load((ROOT / "compose" / "stack-go.yaml").read_text())
    plain = yaml.safe_load(STACK.read_text())
    both = "-f compose/docker-compose.yml -f compose/ledger-go.yml"
    for a, b in zip(go["stack"]["configs"], plain["stack"]["configs"], strict=True):
        assert a["switch"] == b["switch"].replace("-f compose/docker-compose.yml", both)
    assert go["stack"]["audit"]["command"] == plain["stack"]["audit"]["command"].replace(
        "-f compose/docker-compose.yml", both)
    for key in ("traffic", "phases", "slo", "trials", "seed"):
        assert go[key] == plain[key], key
    # the same fault, acting after the Go ledger did its work (the proxy answers a plain abort itself)
    assert go["fault"] == {**plain["fault"], "directive": plain["fault"]["directive"] + "@served"}
    assert go["stack"]["hops"] == plain["stack"]["hops"] and go["stack"]["edge"] == plain["stack"]["edge"]
