"""A recorded drill as `promtool test rules` input, and what PromQL's `rate()` makes of it.

**Time.** Sample j of every input series (j = 0 the baseline before the first call, j = i + 1 the runner's
second i) sits at j + 0.5 s: the file's interval is 500 ms, with `_` (no sample) on the whole seconds.
promtool evaluates rules and queries exactly on its 1-s grid, while in a live Prometheus the runner's counts
are stamped on whole seconds and the rules evaluate at an offset inside the second. Prometheus 2.42's ranges
are closed at both ends, so on the grid a `[3s]` at T would hold the samples at T−3 … T: four, 3 s of increase.
Half a second off the grid, `[3s]` at T holds the samples j = T−3, T−2, T−1 — three samples, 2 s of increase,
as live — and no sample ever sits on a range's edge, so which ends are closed no longer matters. In general a
`[w+1 s]` range at T holds the increments of samples T−w … T−1, the runner's w-second window ending at second
i = T − 2 (`board_time(i) = i + 2`); an instant selector at T reads sample T − 1 (second T − 2), and
`offset 1s` sample T − 2.

**rate().** PromQL extrapolates a counter's increase in a range to the range's edges: by half a sample
interval at each end here, the same factor 3/2 for every series, so a ratio of two sums of rates is the ratio
of the counts, exactly the runner's. Except where a counter starts near zero: `rate()` never extrapolates
below the counter's zero point, so a series whose first value in the range is below a quarter of its 2-s
increase (a status that first appears in the window: the fault's first errors) is stretched less than the
others, and the ratio is not the runner's. `promql_rate` is that computation (Prometheus 2.42,
promql/functions.go, `extrapolatedRate`), operation for operation, so the value it gives there is the value
promtool must print.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import pathlib
import shutil
import subprocess

import pytest
import yaml

from harness.core.status import StatusClass, classify
from harness.drills.plan.outputs import SeriesKey
from harness.drills.plan.sections import Slo
from harness.drills.readings.series import RunSeries, read_series_document

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parents[1]
RULES = sorted((ROOT / "compose/prometheus/rules").glob("*.yml"))
RECORDED = sorted((HERE / "recorded").glob("*.series.json"))
EDGE = "loadgen"
METHOD = "drill.v1.Demo/Call"


def board_time(i: int) -> int:
    """The evaluation time (s) whose plan-window range holds the runner's window ending at second i."""
    return i + 2


@dataclasses.dataclass(frozen=True)
class Case:
    """One configuration's trial of a recorded run."""

    fixture: str
    plan: str
    slo: Slo
    hops: tuple[str, ...]
    series: RunSeries
    #: the run's own results.json numbers for this configuration (computed from calls and hop calls only)
    results: dict

    @property
    def id(self) -> str:
        return f"{self.fixture}:{self.series.config}"

    @property
    def config(self) -> str:
        return self.series.config

    @property
    def n(self) -> int:
        return len(self.series.t)

    def cumulative(self, key: SeriesKey) -> list[float]:
        """Sample j = 0 … n of the key's counter: 0 at the baseline, then the running sum of the runner's seconds."""
        return _cumulative(tuple(self.series.values[key]))

    def fault_samples(self) -> list[int]:
        """`drill_fault_active` at samples 0 … n: 1 for the runner's fault-window seconds."""
        from harness.drills.analysis.trial import _window

        win = _window(self.series, self.series.fault_on, self.series.fault_off)
        return [0] + [1 if i in win else 0 for i in range(self.n)]


@functools.cache
def _cumulative(values: tuple[float | None, ...]) -> list[float]:
    out = [0.0]
    for v in values:
        out.append(out[-1] + (v or 0.0))
    return out


def load_cases() -> list[Case]:
    cases = []
    for path in RECORDED:
        doc = json.loads(path.read_text())
        header, trials = read_series_document(doc)
        for name, runs in trials.items():
            cases.append(Case(path.name.removesuffix(".series.json"), header["plan"], Slo(**header["slo"]),
                              tuple(header["hops"]), runs[0], doc["recorded"]["results"][name]))  # fmt: skip
    return cases


# --- promtool input ---------------------------------------------------------------------------------
def _labels(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _points(values: list[float]) -> str:
    return " ".join(f"_ {v!r}" for v in values)


def input_series(case: Case) -> list[dict[str, str]]:
    """The edge's calls (series.json merged the `injected` label: the board never reads it), each hop's calls
    (summed over status and traffic, what amplification reads) and `drill_fault_active`, in key order."""
    out = []
    for key in case.series.select("calls"):
        labels = {"service": EDGE, "grpc_method": METHOD, "grpc_status": key.status, "fault_mode": key.mode,
                  "traffic": key.traffic, "config": case.config}  # fmt: skip
        out.append({"series": _labels("drill_client_calls_total", labels), "values": _points(case.cumulative(key))})
    for key in case.series.select("srv"):
        labels = {"service": key.service, "grpc_method": METHOD}
        out.append({"series": _labels("drill_server_calls_total", labels), "values": _points(case.cumulative(key))})
    active = [float(a) for a in case.fault_samples()]
    out.append({"series": _labels("drill_fault_active", {"plan": case.plan}), "values": _points(active)})
    return out


def _group_order() -> list[str]:
    """Recording groups first, then the alerts: at each step the page reads the ratios recorded at that step.
    (Live, each group runs at its own offset in the second, so a page can lag its ratios by one evaluation.)"""
    groups = [(g["name"], any("alert" in r for r in g["rules"]))
              for f in RULES for g in yaml.safe_load(f.read_text())["groups"]]  # fmt: skip
    return [name for name, alerts in groups if not alerts] + [name for name, alerts in groups if alerts]


def run_promtool(
    case: Case, tmp_path: pathlib.Path, *, exprs: list[dict] = (), alerts: list[dict] = ()
) -> subprocess.CompletedProcess:
    """One promtool test group: the case's series, the real rule files, `exprs` and `alerts`."""
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool not found: install Debian's prometheus (scripts/system-deps)")
    test = {"interval": "500ms", "input_series": input_series(case)}
    if exprs:
        test["promql_expr_test"] = list(exprs)
    if alerts:
        test["alert_rule_test"] = list(alerts)
    doc = {"rule_files": [str(f) for f in RULES], "evaluation_interval": "1s", "group_eval_order": _group_order(),
           "tests": [test]}  # fmt: skip
    path = tmp_path / f"{case.id.replace(':', '-')}.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=1_000_000))
    return subprocess.run([tool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)


def expr_test(expr: str, at: int, samples: list[tuple[str, float]]) -> dict:
    """A `promql_expr_test`: `expr` at `at` s must give exactly `samples` (labels, value)."""
    return {"expr": expr, "eval_time": f"{at}s", "exp_samples": [{"labels": lb, "value": v} for lb, v in samples]}


# --- what PromQL computes --------------------------------------------------------------------------------
def promql_rate(cumulative: list[float], at: int, range_s: int) -> tuple[float, bool] | None:
    """`rate(counter[range_s])` at `at` on samples placed at j + 0.5 s, and whether the counter's zero point cut
    its extrapolation toward the range's start; None with fewer than two samples in the range."""
    start = at - range_s
    points = [(j + 0.5, v) for j, v in enumerate(cumulative) if start <= j + 0.5 <= at]
    if len(points) < 2:
        return None
    increase = points[-1][1] - points[0][1]
    previous = 0.0
    for _, v in points:  # a counter reset adds the value before it
        if v < previous:
            increase += previous
        previous = v
    to_start, to_end = points[0][0] - start, at - points[-1][0]
    sampled = points[-1][0] - points[0][0]
    step = sampled / (len(points) - 1)
    cut = False
    if increase > 0 and points[0][1] >= 0:
        to_zero = sampled * (points[0][1] / increase)
        if to_zero < to_start:
            to_start, cut = to_zero, True
    threshold = step * 1.1
    extrapolated = sampled
    extrapolated += to_start if to_start < threshold else step / 2
    extrapolated += to_end if to_end < threshold else step / 2
    factor = extrapolated / sampled
    factor /= range_s  # one factor, then one product: the last bits follow this order
    return increase * factor, cut


def _sums(terms: list[float]) -> set[float]:
    """Σ terms as PromQL's `sum` may add them: its order is not fixed (promtool loads the input series from a Go
    map), so every order. One value when at most two terms are non-zero or all are exact (the usual case)."""
    sums = set()
    for order in itertools.permutations([t for t in terms if t]):
        total = 0.0
        for t in order:
            total += t
        sums.add(total)
    return sums or {0.0}


@dataclasses.dataclass(frozen=True)
class Ratio:
    #: every value PromQL may print (more than one only where float addition order shows in the last bits)
    values: frozenset[float]
    #: a series' extrapolation was cut at its zero point (the value may then differ from the runner's)
    cut: bool

    @property
    def value(self) -> float | None:
        """The value, where there is one (None: no sample)."""
        if not self.values:
            return None
        assert len(self.values) == 1, f"PromQL may print any of {sorted(self.values)}: compare with a margin"
        return next(iter(self.values))

    def above(self, threshold: float) -> bool:
        """Above `threshold` whichever value PromQL prints (it must not matter)."""
        sides = {v > threshold for v in self.values}
        assert len(sides) < 2, f"{sorted(self.values)} straddle {threshold}: the outcome hangs on the last bit"
        return sides == {True}


def error_ratio(case: Case, at: int, range_s: int, traffic: str = "organic") -> Ratio:
    """server-fault ÷ (all − CANCELLED) of the edge's `traffic` calls as the recording rules compute it at `at`:
    each class a sum of per-series rates, the denominator (ok + server-fault) + client-fault (the rule order);
    no sample without calls (`> 0`)."""
    classes: dict[str, list[float]] = {c.value: [] for c in StatusClass}
    cut, seen = False, False
    for key in case.series.select("calls", traffic=traffic):
        got = promql_rate(case.cumulative(key), at, range_s)
        if got is None:
            continue
        seen = True
        classes[classify(key.status).value].append(got[0])
        cut |= got[1]
    if not seen:
        return Ratio(frozenset(), False)
    oks, bads, clients = (_sums(classes[c.value]) for c in
                          (StatusClass.OK, StatusClass.SERVER_FAULT, StatusClass.CLIENT_FAULT))  # fmt: skip
    values = {bad / den for ok in oks for bad in bads for client in clients if (den := (ok + bad) + client) > 0}
    return Ratio(frozenset(values), cut)
