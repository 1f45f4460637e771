"""`sweep/elsewhere.py`: points run on other machines (`--at`, a Kubernetes Indexed Job from `--render k8s`)
and merged (`--collect`) into the map one sweep would draw."""

from __future__ import annotations

import dataclasses
import os
import subprocess

import pytest
import yaml

from harness.core.environ import environ_now
from harness.core.errors import BadInput
from harness.drills.sweep.axes import Axis
from harness.drills.sweep.elsewhere import collect, render_k8s
from harness.drills.sweep.store import Record, Settings, save
from harness.drills.sweep.summary import summarize
from tests.deploy.kube import K8S_VERSIONS, validate_builtin
from tests.drills.sweep.synthetic import settings as synthetic_settings


def test_points_run_elsewhere_merge_into_the_map_one_sweep_would_draw(tmp_path) -> None:
    """Each machine runs whole points (`--at`: every configuration up to the cap, no bisection); `--collect`
    merges their sweep.json files, relative paths and all, into the boundaries the points imply."""
    settings = synthetic_settings()
    bounds = {"naive": 3, "budget": 40}
    dirs = []
    for value in settings.axis.values:  # one directory per point, as the Indexed Job writes them
        d = tmp_path / f"point-{value:g}"
        d.mkdir()
        recs = [Record(c, value, "points/001", value >= bounds[c], value >= bounds[c], False, None, None)
                for c in settings.configs for _ in range(settings.max_trials)]  # fmt: skip
        save(d, settings, recs, summarize(settings.axis, recs, settings.configs, settings.max_trials))
        dirs.append(d)
    out = tmp_path / "merged"
    out.mkdir()
    merged_settings, records = collect([*dirs, dirs[0]], out)  # a directory given twice counts once
    assert merged_settings.to_json() == settings.to_json()
    assert len(records) == len(settings.axis.values) * len(settings.configs) * settings.max_trials
    assert all((out / r.point).resolve() == (tmp_path / f"point-{r.value:g}" / "points/001").resolve()
               for r in records)  # fmt: skip
    s = summarize(settings.axis, records, settings.configs, settings.max_trials)
    assert (s["boundaries"]["naive"]["recovering"], s["boundaries"]["naive"]["failing"]) == (2, 3)
    assert s["boundaries"]["budget"]["kind"] == "above_range"
    other = tmp_path / "other"
    other.mkdir()
    save(other, Settings("metastable", Axis("phases.fault", 1, 10, 1, True), True, 4, ["naive", "budget"]), [], {})
    with pytest.raises(BadInput, match="a sweep of other settings"):
        collect([dirs[0], other], out)


def test_the_rendered_indexed_job_validates_and_each_index_runs_its_own_point(tmp_path) -> None:
    """`--render k8s`: a PersistentVolumeClaim and an Indexed Job, strictly valid for the Kubernetes versions the
    overlays are checked against; pods of the Job never share a node; and the pod's command, run here by `sh`
    with a stand-in `drill` that prints its arguments, gives index i the axis' i-th value and its own --out."""
    settings = synthetic_settings()
    claim, job = list(yaml.safe_load_all(render_k8s(settings, parallelism=3)))
    for version in K8S_VERSIONS:
        assert validate_builtin(claim, version) == "" and validate_builtin(job, version) == "", version
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == len(settings.axis.values) == 20
    anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    assert anti[0]["labelSelector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    command = spec["template"]["spec"]["containers"][0]["command"]
    stand_in = tmp_path / "bin" / "drill"
    stand_in.parent.mkdir()
    stand_in.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    stand_in.chmod(0o755)
    for index in (0, 7, 19):
        env = {**environ_now(), "PATH": f"{stand_in.parent}:{os.environ['PATH']}", "JOB_COMPLETION_INDEX": str(index)}
        argv = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout.splitlines()
        assert argv[argv.index("--at") + 1] == f"{settings.axis.values[index]:g}"
        assert argv[argv.index("--out") + 1] == f"/results/point-{index}"
        assert argv[:4] == ["sweep", "metastable", "--vary", "phases.fault=1..20"] and "--quick" in argv


def test_collect_needs_a_directory_and_refuses_one_without_a_sweep(tmp_path) -> None:
    with pytest.raises(BadInput, match="--collect needs at least one DIR"):
        collect([], tmp_path)
    with pytest.raises(BadInput, match=f"--collect {tmp_path / 'none'}: no sweep.json there"):
        collect([tmp_path / "none"], tmp_path)


def test_the_job_carries_the_sweeps_settings_to_every_point() -> None:
    settings = dataclasses.replace(synthetic_settings(), quick=False, seed=7)
    job = list(yaml.safe_load_all(render_k8s(settings, parallelism=2)))[1]
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "--max-trials 4 --configs naive,budget --seed 7" in script and "--quick" not in script
    assert job["spec"]["parallelism"] == 2 and job["metadata"]["namespace"] == "drill"
