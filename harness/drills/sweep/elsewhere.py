"""A sweep's points run elsewhere: one value at a time (`--at`), a Kubernetes Indexed Job that runs every value
of the axis on machines of their own (`--render k8s`), and the merge of their sweep.json files (`--collect`).

Points are independent: each is the same plan at one value, under the same settings, so a point measured on
another machine counts as one measured here. What elsewhere cannot do is bisect (it does not know the other
points' outcomes), so the Job runs the whole grid; `--collect` then draws the same map and boundaries.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shlex

import yaml

from harness.core.errors import BadInput
from harness.drills.sweep.store import Record, Settings, load

#: the image the Kubernetes overlays run (deploy/k8s), and the results volume's mount
IMAGE, RESULTS = "drill-harness:0.1.0", "/results"


def collect(dirs: list[pathlib.Path], out: pathlib.Path) -> tuple[Settings, list[Record]]:
    """Every trial of the sweeps in `dirs`, their points' paths made relative to `out`; the settings must agree
    (plan, axis, quick, trials cap, configurations, seed), and a directory given twice counts once."""
    if not dirs:
        raise BadInput("sweep: --collect needs at least one DIR holding a sweep.json")
    settings, records, seen = None, [], set()
    for d in dirs:
        if d.resolve() in seen:
            continue
        seen.add(d.resolve())
        s, rs = load(d, "--collect")
        if settings is None:
            settings = s
        elif s.to_json() != settings.to_json():
            raise BadInput(f"sweep: --collect {d}: a sweep of other settings than {dirs[0]} (plan, axis, --quick, "
                           "--max-trials, --configs and --seed must agree)")  # fmt: skip
        for r in rs:
            records.append(dataclasses.replace(r, point=os.path.relpath((d / r.point).resolve(), out.resolve())))
    return settings, records


def render_k8s(settings: Settings, *, parallelism: int, namespace: str = "drill") -> str:
    """An Indexed Job: one completion per value of the axis (`drill sweep … --at VALUE`), each pod on a node of
    its own while the others run (trials of two points never share a machine), results on a volume."""
    axis = settings.axis
    values = " ".join(f"{v:g}" for v in axis.values)
    sweep = ["drill", "sweep", settings.plan, "--vary", f"{axis.key}={axis.lo:g}..{axis.hi:g}",
             "--step", f"{axis.step:g}", "--max-trials", str(settings.max_trials),
             "--configs", ",".join(settings.configs)]  # fmt: skip
    if settings.quick:
        sweep.append("--quick")
    if settings.seed is not None:
        sweep += ["--seed", str(settings.seed)]
    script = (f'set -- {values}; shift "$JOB_COMPLETION_INDEX"; '
              f'exec {shlex.join(sweep)} --at "$1" --out "{RESULTS}/point-$JOB_COMPLETION_INDEX"')  # fmt: skip
    name = "drill-sweep"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "drill"}},
        "spec": {
            "completionMode": "Indexed",
            "completions": len(axis.values),
            "parallelism": parallelism,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "drill"}},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                        "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
                    # a point's trials measure recovery times: another point's on the same node would steal its CPU
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app.kubernetes.io/name": name}},
                         "topologyKey": "kubernetes.io/hostname"}]}},
                    "containers": [{
                        "name": "point",
                        "image": IMAGE,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", script],
                        "resources": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "results", "mountPath": RESULTS}],
                    }],
                    "volumes": [{"name": "results", "persistentVolumeClaim": {"claimName": f"{name}-results"}}],
                },
            },
        },
    }  # fmt: skip
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"{name}-results", "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    head = (f"# drill sweep {settings.plan} --vary {axis.key}={axis.lo:g}..{axis.hi:g}: {len(axis.values)} points, "
            f"one pod each, {parallelism} at a time on nodes of their own.\n"
            f"# kubectl apply -f THIS; then copy {RESULTS}/point-* off the volume and merge them:\n"
            f"#   drill sweep --collect point-* --out sweep-out\n")  # fmt: skip
    return head + yaml.safe_dump_all([claim, job], sort_keys=False)
