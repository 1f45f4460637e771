"""`drill dashboards build|push`: regenerate the committed dashboards and rules, or import them into Grafana.

    drill dashboards build [--out dashboards/] [--rules-out compose/prometheus/rules/]
                           [--k8s-out deploy/k8s/monitoring/] [--check]
    drill dashboards push --grafana URL [--token T | --user U --password P] [--folder Drill]

`build` writes the dashboards, the compose rule files and their Kubernetes copies (a
PrometheusRule and the dashboards for the ConfigMaps, harness.dashboards.k8s) from one
source; `build --check` writes nothing and exits 1 when a committed file is stale (CI).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

from harness.core import cliargs
from harness.core.errors import BadInput, RunFailed

DEFAULT_OUT = "dashboards"
DEFAULT_RULES_OUT = "compose/prometheus/rules"
DEFAULT_K8S_OUT = "deploy/k8s/monitoring"
FOLDER_UID = "drill"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    b = sub.add_parser("build", help="write dashboards/*.json and the generated Prometheus rules")
    b.add_argument("--out", type=cliargs.directory, default=DEFAULT_OUT,
                   help=f"dashboard JSON directory (default {DEFAULT_OUT}/)")  # fmt: skip
    b.add_argument(
        "--rules-out",
        type=cliargs.directory,
        default=DEFAULT_RULES_OUT,
        help=f"generated rules directory (default {DEFAULT_RULES_OUT}/)",
    )
    b.add_argument(
        "--k8s-out",
        type=cliargs.directory,
        default=DEFAULT_K8S_OUT,
        help=f"Kubernetes copies: PrometheusRule, dashboards for ConfigMaps (default {DEFAULT_K8S_OUT}/)",
    )
    b.add_argument("--check", action="store_true", help="write nothing; exit 1 if any committed file is stale")
    q = sub.add_parser("push", help="import the dashboards into a running Grafana (grafana-client)")
    q.add_argument("--grafana", type=cliargs.http_url, default=os.environ.get("DRILL_GRAFANA_URL"),
                   help="Grafana URL (or DRILL_GRAFANA_URL)")  # fmt: skip
    q.add_argument("--token", default=os.environ.get("DRILL_GRAFANA_TOKEN"), help="service account token")
    q.add_argument("--user", default=os.environ.get("DRILL_GRAFANA_USER"), help="basic auth user")
    q.add_argument("--password", default=os.environ.get("DRILL_GRAFANA_PASSWORD"), help="basic auth password")
    q.add_argument("--folder", default="Drill", help="folder title (uid 'drill'), created when missing")
    q.add_argument("--dir", default=None, help="push these JSON files instead of freshly built dashboards")


def generated_files(
    out: pathlib.Path, rules_out: pathlib.Path, k8s_out: pathlib.Path | None = None
) -> dict[pathlib.Path, str]:
    """Every generated path -> its text."""
    from harness.dashboards import build_all, render
    from harness.dashboards.k8s import k8s_files
    from harness.dashboards.rules import rule_files

    dashboards = {name: render(model) for name, model in build_all().items()}
    files = {out / name: text for name, text in dashboards.items()}
    files.update({rules_out / name: text for name, text in rule_files().items()})
    if k8s_out is not None:
        files.update({k8s_out / name: text for name, text in k8s_files(dashboards).items()})
    return files


def _build(args: argparse.Namespace) -> int:
    files = generated_files(pathlib.Path(args.out), pathlib.Path(args.rules_out), pathlib.Path(args.k8s_out))
    stale = [p for p, text in files.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for p in stale:
            print(f"stale: {p} (run `drill dashboards build`)", file=sys.stderr)
        return 1 if stale else 0
    for p, text in files.items():
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise BadInput(f"dashboards build: cannot write {p}: {exc.strerror}") from None
        print(f"{'wrote' if p in stale else 'unchanged'} {p}")
    return 0


def _models(directory: str | None) -> dict[str, dict]:
    if directory:
        folder = pathlib.Path(directory)
        if not folder.is_dir():
            raise BadInput(f"dashboards push: --dir {directory}: no such directory")
        models = {}
        for p in sorted(folder.glob("*.json")):
            try:
                models[p.name] = json.loads(p.read_text(encoding="utf-8"))
            except OSError as exc:
                raise BadInput(f"dashboards push: {p}: {exc.strerror}") from None
            except ValueError as exc:  # not UTF-8, or not JSON
                why = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "not UTF-8 text"
                raise BadInput(f"dashboards push: {p}: not a dashboard's JSON ({why})") from None
            if not isinstance(models[p.name], dict) or "panels" not in models[p.name]:
                raise BadInput(f"dashboards push: {p}: not a dashboard's JSON (no panels)")
        if not models:
            raise BadInput(f"dashboards push: --dir {directory}: no *.json dashboards in it")
        return models
    from harness.dashboards import build_all

    return build_all()


def push(api, models: dict[str, dict], folder_title: str = "Drill") -> list[str]:
    """Create the folder if needed and import each dashboard (overwrite). Returns the dashboard URLs."""
    from grafana_client.client import GrafanaClientError

    try:
        api.folder.get_folder(FOLDER_UID)
    except GrafanaClientError as exc:
        if exc.status_code != 404:
            raise
        api.folder.create_folder(folder_title, uid=FOLDER_UID)
    urls = []
    for model in models.values():
        body = dict(model, id=None)
        res = api.dashboard.update_dashboard(
            {
                "dashboard": body,
                "folderUid": FOLDER_UID,
                "overwrite": True,
                "message": "drill dashboards push",
            }
        )
        urls.append(str((res or {}).get("url", body.get("uid"))))
    return urls


def _push(args: argparse.Namespace) -> int:
    if not args.grafana:
        raise BadInput("dashboards push: --grafana URL (or DRILL_GRAFANA_URL) is required")
    from harness.dashboards.annotations import grafana_api

    api = grafana_api(args.grafana, token=args.token, user=args.user, password=args.password)  # the extra, or one line
    from grafana_client.client import GrafanaClientError
    try:
        urls = push(api, _models(args.dir), args.folder)
    except GrafanaClientError as exc:
        raise RunFailed(f"dashboards push: Grafana refused: {exc.status_code} {exc.message}") from None
    except OSError as exc:  # grafana-client's HTTP stack (niquests) raises IOError subclasses
        raise RunFailed(f"dashboards push: cannot reach Grafana at {args.grafana}: {type(exc).__name__}") from None
    for url in urls:
        print(f"pushed {args.grafana.rstrip('/')}{url if url.startswith('/') else '/d/' + url}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "build":
        return _build(args)
    return _push(args)
