"""The sweep's search on synthetic outcomes: the interval, the bisection, stopping, and resuming after a kill."""

from __future__ import annotations

import json
import math

import pytest

from harness.drills.sweep.axes import Axis
from harness.drills.sweep.engine import Sweep
from harness.drills.sweep.search import Tally, grid, search, wilson
from harness.drills.sweep.store import Record, Settings, load, tallies
from harness.drills.sweep.summary import summarize


def test_wilson_interval_matches_the_closed_form_and_decides_only_when_it_excludes_one_half() -> None:
    # scipy-free reference values (Wilson 1927; e.g. statsmodels proportion_confint(method="wilson"))
    assert wilson(0, 4) == pytest.approx((0.0, 0.48990), abs=1e-4)
    assert wilson(3, 3) == pytest.approx((0.43850, 1.0), abs=1e-4)
    assert wilson(4, 4) == pytest.approx((0.51010, 1.0), abs=1e-4)
    assert wilson(5, 10) == pytest.approx((0.23659, 0.76341), abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)
    # three unanimous trials do not exclude one half; four do
    assert not Tally(3, 3).decided(max_trials=10) and Tally(4, 4).decided(max_trials=10)
    assert not Tally(3, 0).decided(max_trials=10) and Tally(4, 0).decided(max_trials=10)
    # a split point runs to the cap, and a tie counts as failing (the boundary is where P reaches one half)
    assert not Tally(4, 2).decided(max_trials=5) and Tally(5, 2).decided(max_trials=5)
    assert Tally(2, 1).failing and not Tally(3, 1).failing


def _drive(values, boundary, max_trials, flaky=None):
    """Run the search against a synthetic trigger: never restored iff value >= boundary (or `flaky(v, i)`)."""
    tallies_: dict[float, Tally] = {}
    asked = []
    while True:
        b = search(values, tallies_, max_trials)
        if b.done:
            return b, asked, tallies_
        v = b.next_value
        t = tallies_.get(v, Tally())
        fails = flaky(v, t.n) if flaky else v >= boundary
        tallies_[v] = Tally(t.n + 1, t.k + int(fails))
        asked.append(v)


@pytest.mark.parametrize("boundary", [1.5, 2.2, 7.0, 13.7, 19.99])
def test_bisection_brackets_a_known_boundary_within_one_step(boundary: float) -> None:
    values = grid(1, 20, 1)
    b, asked, _ = _drive(values, boundary, max_trials=4)
    assert b.recovering < boundary <= b.failing and b.failing - b.recovering == 1
    points = len(set(asked))
    assert points <= 2 + math.ceil(math.log2(len(values)))  # the two ends, then halving: not a full grid
    assert len(asked) == 4 * points  # unanimous points stop at 4 trials, where Wilson excludes one half


def test_a_boundary_outside_the_range_is_said_as_such_after_only_the_two_ends() -> None:
    b, asked, _ = _drive(grid(1, 20, 1), 0.5, max_trials=4)
    assert (b.recovering, b.failing, b.done) == (None, 1, True) and set(asked) == {1, 20}
    b, asked, _ = _drive(grid(1, 20, 1), 25, max_trials=4)
    assert (b.recovering, b.failing, b.done) == (20, None, True) and set(asked) == {1, 20}


def test_an_uncertain_point_gets_trials_up_to_the_cap_and_a_certain_one_stops_early() -> None:
    # at 10 the outcome alternates (P = 1/2): it takes every trial the cap allows; elsewhere 4 decide
    flaky = lambda v, i: (i % 2 == 0) if v == 10 else v > 10  # noqa: E731
    _, asked, t = _drive(grid(1, 20, 1), None, max_trials=7, flaky=flaky)
    assert t[10].n == 7 and t[10].k == 4
    assert all(x.n == 4 for v, x in t.items() if v != 10)


def test_the_grid_ends_at_hi_even_when_the_step_does_not_divide_the_range() -> None:
    assert grid(1, 20, 4) == [1, 5, 9, 13, 17, 20]
    assert grid(0.5, 1.5, 0.25) == [0.5, 0.75, 1.0, 1.25, 1.5]


class _Fake(Sweep):
    """A sweep whose points are synthetic (never restored iff value >= a configuration's boundary), counting
    every trial it runs; `kill_after` raises as a killed process would, after that many points."""

    def __init__(self, *args, boundaries, kill_after=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.boundaries, self.kill_after, self.ran = boundaries, kill_after, []

    def _point(self, value, configs):
        if self.kill_after is not None and len(self.ran) >= self.kill_after:
            raise KeyboardInterrupt
        name = f"points/{len({r.point for r in self.records}) + 1:03d}"
        for c in configs:
            never = value >= self.boundaries[c]
            self.records.append(Record(c, value, name, never, never, False, None if never else 3.0, 0.5))
        self.ran.append((value, tuple(configs)))
        self.write(None)


def _settings(tmp_path):
    return Settings("metastable", Axis("phases.fault", 1, 20, 1, True), True, 4, ["naive", "budget"])


def test_a_killed_sweep_resumes_from_its_saved_points_losing_and_repeating_nothing(tmp_path) -> None:
    bounds = {"naive": 3, "budget": 40}
    whole = _Fake(_settings(tmp_path), tmp_path / "whole", boundaries=bounds, log=lambda _: None)
    whole.run()
    out = tmp_path / "killed"
    first = _Fake(_settings(tmp_path), out, boundaries=bounds, kill_after=3, log=lambda _: None)
    with pytest.raises(KeyboardInterrupt):
        first.run()
    settings, records = load(out)  # what --resume reads
    assert len(records) == sum(len(c) for _, c in first.ran)  # every trial run before the kill was saved
    second = _Fake(settings, out, records, boundaries=bounds, log=lambda _: None)
    summary = second.run()
    assert first.ran + second.ran == whole.ran  # the same trials in the same order: none lost, none repeated
    saved = json.loads((out / "sweep.json").read_text())
    assert saved["complete"] and summary["verdict"] == whole.run()["verdict"]
    assert saved["boundaries"]["naive"]["kind"] == "between"
    assert (saved["boundaries"]["naive"]["recovering"], saved["boundaries"]["naive"]["failing"]) == (2, 3)
    assert saved["boundaries"]["budget"]["kind"] == "above_range"


def test_a_budget_stops_before_a_point_that_would_overrun_and_says_what_is_known(tmp_path) -> None:
    sweep = _Fake(_settings(tmp_path), tmp_path / "b", boundaries={"naive": 3, "budget": 40}, budget_s=0.001,
                  log=lambda _: None)  # fmt: skip
    summary = sweep.run()
    assert sweep.ran == [] and not summary["complete"] and "budget" in summary["stopped"]
    assert summary["verdict"].startswith("naive: not bracketed yet (no trial yet)")
    assert summary["verdict"].endswith(f"(stopped: {summary['stopped']})")


def test_the_verdict_names_each_kind_of_boundary_with_its_counts() -> None:
    axis = Axis("phases.fault", 1, 20, 1, True)

    def recs(config, value, k, n):
        return [Record(config, value, "p", i < k, i < k, False, None, None) for i in range(n)]

    records = (recs("naive", 1, 0, 4) + recs("naive", 20, 4, 4) + recs("naive", 2, 0, 4) + recs("naive", 3, 3, 3)
               + recs("naive", 3, 1, 1) + recs("budget", 1, 0, 4) + recs("budget", 20, 0, 4)
               + recs("fragile", 1, 4, 4) + recs("fragile", 20, 4, 4))  # fmt: skip
    for v in range(4, 20):
        records += recs("naive", v, 4, 4) if v in (10, 15, 17, 18) else []
    s = summarize(axis, records, ["naive", "budget", "fragile"], 4)
    assert s["boundaries"]["naive"]["text"] == ("naive stops recovering between 2 s and 3 s (4/4 never restored at "
                                                "3 s, 0/4 at 2 s)")  # fmt: skip
    assert s["boundaries"]["budget"]["text"] == ("budget recovers from every trigger up to 20 s (0/4 never restored "
                                                 "there)")  # fmt: skip
    assert s["boundaries"]["fragile"]["text"] == "fragile does not recover even at 1 s (4/4 never restored there)"
    assert s["complete"] and s["verdict"].count(";") == 2
    naive3 = next(p for p in s["points"] if p["value"] == 3)["configs"]["naive"]
    assert naive3["trials"] == 4 and naive3["never_restored"] == 4 and naive3["ci95"] == list(wilson(4, 4))
    assert tallies(records, "naive")[3] == Tally(4, 4)


# --- points run elsewhere: --at, --collect, --render k8s --------------------------------------------------------
def test_points_run_elsewhere_merge_into_the_map_one_sweep_would_draw(tmp_path) -> None:
    """Each machine runs whole points (`--at`: every configuration up to the cap, no bisection); `--collect`
    merges their sweep.json files, relative paths and all, into the boundaries the points imply."""
    from harness.drills.sweep.elsewhere import collect
    from harness.drills.sweep.store import save
    from harness.drills.sweep.summary import summarize as summ

    settings = _settings(tmp_path)
    bounds = {"naive": 3, "budget": 40}
    dirs = []
    for value in settings.axis.values:  # one directory per point, as the Indexed Job writes them
        d = tmp_path / f"point-{value:g}"
        d.mkdir()
        fake = _Fake(settings, d, boundaries=bounds, log=lambda _: None)
        recs = [Record(c, value, "points/001", value >= bounds[c], value >= bounds[c], False, None, None)
                for c in settings.configs for _ in range(settings.max_trials)]  # fmt: skip
        fake.records = recs
        save(d, settings, recs, summ(settings.axis, recs, settings.configs, settings.max_trials))
        dirs.append(d)
    out = tmp_path / "merged"
    out.mkdir()
    merged_settings, records = collect([*dirs, dirs[0]], out)  # a directory given twice counts once
    assert merged_settings.to_json() == settings.to_json()
    assert len(records) == len(settings.axis.values) * len(settings.configs) * settings.max_trials
    assert all((out / r.point).resolve() == (tmp_path / f"point-{r.value:g}" / "points/001").resolve()
               for r in records)  # fmt: skip
    s = summ(settings.axis, records, settings.configs, settings.max_trials)
    assert (s["boundaries"]["naive"]["recovering"], s["boundaries"]["naive"]["failing"]) == (2, 3)
    assert s["boundaries"]["budget"]["kind"] == "above_range"
    other = tmp_path / "other"
    other.mkdir()
    save(other, Settings("metastable", Axis("phases.fault", 1, 10, 1, True), True, 4, ["naive", "budget"]), [], {})
    with pytest.raises(Exception, match="a sweep of other settings"):
        collect([dirs[0], other], out)


def test_the_rendered_indexed_job_validates_and_each_index_runs_its_own_point(tmp_path) -> None:
    """`--render k8s`: a PersistentVolumeClaim and an Indexed Job, strictly valid for the Kubernetes versions the
    overlays are checked against; pods of the Job never share a node; and the pod's command, run here by `sh`
    with a stand-in `drill` that prints its arguments, gives index i the axis' i-th value and its own --out."""
    import os
    import subprocess

    import yaml

    from harness.drills.sweep.elsewhere import render_k8s
    from tests.deploy.kube import K8S_VERSIONS, validate_builtin

    settings = _settings(tmp_path)
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
        env = {**os.environ, "PATH": f"{stand_in.parent}:{os.environ['PATH']}", "JOB_COMPLETION_INDEX": str(index)}
        argv = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout.splitlines()
        assert argv[argv.index("--at") + 1] == f"{settings.axis.values[index]:g}"
        assert argv[argv.index("--out") + 1] == f"/results/point-{index}"
        assert argv[:4] == ["sweep", "metastable", "--vary", "phases.fault=1..20"] and "--quick" in argv


def test_the_page_draws_each_point_coloured_by_outcome_and_shades_the_bracket(tmp_path) -> None:
    from harness.drills.sweep.page import write_page

    settings = _settings(tmp_path)
    sweep = _Fake(settings, tmp_path / "p", boundaries={"naive": 3, "budget": 40}, log=lambda _: None)
    summary = sweep.run()
    page = (tmp_path / "p" / "sweep.html").read_text()
    assert page == write_page(tmp_path / "p", settings, summary).read_text()
    dots = [(c, p["value"]) for p in summary["points"] for c in p["configs"]]
    failing = [(c, v) for c, v in dots if c == "naive" and v >= 3]  # the synthetic boundary
    assert page.count("<circle ") == len(dots) and page.count('class="failing"') == len(failing)
    assert page.count('class="recovering"') == len(dots) - len(failing) and 'class="open"' not in page
    assert page.count('<rect class="boundary"') == 1  # naive's bracket; budget has none inside the range
    assert "naive stops recovering between 2 s and 3 s" in page and "held, held" in page


# --- two axes: a phase diagram, one row per value of the second key --------------------------------------------
def test_a_phase_diagram_bisects_each_row_and_resumes_row_by_row(tmp_path) -> None:
    """Two --vary keys: the trigger is bisected in each row (one per value of the second key, each a sweep of its
    own); a synthetic boundary that moves with the second key is found in every row, within one step; a kill in
    the middle of a row resumes from each row's sweep.json, repeating no trial; the page has a diagram per
    configuration with one shaded bracket per row where it has one."""
    from harness.drills.sweep.plane import Plane

    axis2 = Axis("traffic.organic_rate", 2, 10, 2, True)
    settings = Settings("metastable", Axis("phases.fault", 1, 20, 1, True), True, 4, ["naive", "budget"], None,
                        axis2)  # fmt: skip
    ran: list = []

    def plane_with(kill_after=None):
        class Row(_Fake):
            def __init__(self, row_settings, *args, **kwargs):
                v2 = row_settings.fixed  # naive's boundary moves down as organic traffic grows
                super().__init__(row_settings, *args, boundaries={"naive": 12 - v2, "budget": 40}, **kwargs)

            def _point(self, value, configs):
                if kill_after is not None and len(ran) >= kill_after:
                    raise KeyboardInterrupt
                super()._point(value, configs)
                ran.append((self.settings.fixed, value, tuple(configs)))

        plane = Plane(settings, tmp_path / "plane", log=lambda _: None)
        plane.row_class = Row
        return plane

    whole_ran = []
    whole = plane_with()
    whole.out = tmp_path / "whole"
    summary = whole.run()
    whole_ran, ran[:] = list(ran), []
    assert summary["complete"] and [r["value"] for r in summary["rows"]] == [2, 4, 6, 8, 10]
    for r in summary["rows"]:
        b = r["boundaries"]["naive"]
        assert (b["recovering"], b["failing"]) == (12 - r["value"] - 1, 12 - r["value"]), r
        assert r["boundaries"]["budget"]["kind"] == "above_range"
    assert summary["verdict"].startswith("naive stops recovering between 9 s and 10 s at traffic.organic_rate=2; "
                                         "stops recovering between 7 s and 8 s at traffic.organic_rate=4")
    with pytest.raises(KeyboardInterrupt):
        plane_with(kill_after=len(whole_ran) // 2).run()
    first = list(ran)
    saved = json.loads((tmp_path / "plane" / "sweep.json").read_text())
    assert saved["axis2"]["key"] == "traffic.organic_rate" and not saved["complete"]
    resumed_settings, _ = load(tmp_path / "plane")
    assert resumed_settings.axis2 == axis2 and resumed_settings.fixed is None
    ran[:] = []
    plane_with().run()
    assert first + ran == whole_ran  # nothing lost, nothing repeated
    page = (tmp_path / "plane" / "sweep.html").read_text()
    assert page.count("<svg ") == 2 and page.count('<rect class="boundary"') == 5  # naive's five rows
    assert page.count('href="traffic.organic_rate=') == 5
