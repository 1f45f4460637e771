"""Render deploy/k8s/ with the real kustomize (`kubectl kustomize`) and check objects with the real
validators: kubernetes-validate for built-in kinds, the Prometheus Operator's schemas (an npm
package, pinned by tests/deploy/crd/package-lock.json and installed with `npm ci`) for its kinds.

No cluster is involved: everything here reads files and runs local tools.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import pathlib
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import ROOT

K8S = ROOT / "deploy" / "k8s"
CRD_DIR = pathlib.Path(__file__).resolve().parent / "crd"
#: The oldest Kubernetes the manifests claim (gRPC probes are GA since 1.27; 1.31 is the floor we
#: state in docs/kubernetes.md) and the newest kubernetes-validate ships schemas for.
K8S_VERSIONS = ("1.31.0", "1.34.0")
OPERATOR_GROUP = "monitoring.coreos.com"


def tool(name: str, hint: str) -> str:
    """The tool's path; a missing one fails the test (never a skip: CI must prove these checks ran).
    `scripts/system-deps` (run by `make test`, as root) installs every one of them from Debian."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: {hint}; `sudo scripts/system-deps` installs it")
    return path


@functools.cache
def _render_text(directory: str) -> str:
    kubectl = tool("kubectl", "kubectl (it embeds kustomize; Debian trixie's package)")
    proc = subprocess.run([kubectl, "kustomize", directory], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"kubectl kustomize {directory}: {proc.stderr}"
    return proc.stdout


@functools.cache
def _render_objects(directory: str) -> list[dict]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for d in yaml.load_all(_render_text(directory), Loader=loader) if d]


def render(directory: pathlib.Path | str) -> list[dict]:
    """`kubectl kustomize DIR` as a list of objects (rendered once per directory; a fresh copy per call)."""
    return copy.deepcopy(_render_objects(str(directory)))


def find(objects: list[dict], kind: str, name: str) -> dict:
    hits = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} objects"
    return hits[0]


def pod_specs(objects: list[dict]) -> list[tuple[str, dict]]:
    """(kind/name, pod template) of every workload."""
    out = []
    for o in objects:
        if o["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
            out.append((f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]))
    return out


def is_operator_object(obj: dict) -> bool:
    return obj["apiVersion"].split("/")[0] == OPERATOR_GROUP


@functools.cache
def _kubernetes_validate():
    """kubernetes-validate, reading each schema file once: it re-parses its multi-megabyte
    definitions for every object otherwise (6x the time here). The parsed schemas are only read."""
    import kubernetes_validate
    import kubernetes_validate.utils as utils

    utils.schema_contents = functools.cache(utils.schema_contents)
    return kubernetes_validate


def validate_builtin(obj: dict, version: str) -> str:
    """'' when kubernetes-validate --strict accepts `obj` for Kubernetes `version`, else why not."""
    kubernetes_validate = _kubernetes_validate()
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"
    except kubernetes_validate.SchemaNotFoundError as exc:
        return str(exc.message)
    return ""


def _lock_digest() -> str:
    return hashlib.sha256((CRD_DIR / "package-lock.json").read_bytes()).hexdigest()


def crd_validator() -> list[str]:
    """The node command that checks operator objects; installs the pinned packages when missing."""
    node = tool("node", "Node.js (Debian: nodejs)")
    stamp = CRD_DIR / "node_modules" / ".drill-lock-sha256"
    if not stamp.exists() or stamp.read_text() != _lock_digest():
        npm = tool("npm", "npm (Debian: npm)")
        proc = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=CRD_DIR,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, f"npm ci in {CRD_DIR} failed: {proc.stderr[-2000:]}"
        stamp.write_text(_lock_digest())
    return [node, str(CRD_DIR / "validate.mjs")]


def validate_operator_objects(objects: list[dict], tmp_path: pathlib.Path) -> list[list[str]]:
    """Errors per object (same order) from the Prometheus Operator's schemas and field names."""
    path = tmp_path / "objects.json"
    path.write_text(json.dumps(objects))
    proc = subprocess.run([*crd_validator(), str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    assert [r["index"] for r in results] == list(range(len(objects)))
    return [r["errors"] for r in results]
