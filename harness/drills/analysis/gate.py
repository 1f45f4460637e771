"""`--fail-on`: CI gates over results.json (contracts §11: exit 3 when a condition holds).

- `breach`: some configuration breached the SLO in some (valid) trial
  (a post-fault breach is a breach);
- `mttr>SECONDS`: some configuration's median MTTR over its breached trials
  (a never-restored trial counts as infinitely long) exceeds SECONDS. A time
  read back from Prometheus counts less its ± (`uncertainty_s`): the median
  over the trials of MTTR − ± must exceed SECONDS, so the gate trips only on
  what the read-back is sure of;
- `expect`: some configuration missed its link fault's `expect` in some trial (`fault.link.expect`:
  `detect_within_s`, see `links`);
- `budget>X`: some configuration's median error budget burn (1 = the SLO's
  allowance) exceeds X;
- `regression:BASELINE.json`: some configuration present in both is
  significantly worse than in the baseline results.json: more breaches
  (Fisher's exact test), a longer median outage (bootstrap 95 % CI above the
  sum of the two sides' largest read-back ±, 0 for runs the runner measured
  itself) or a higher median budget burn (its CI above 0), see
  `harness.drills.analysis.stats.regression`.

Conditions are parsed (and a baseline read) before the drill starts, so a typo
is exit 2 and not a wasted run. `check` raises `ConditionFailed` with one line.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import statistics
from collections.abc import Iterable

from harness.core.errors import BadInput, ConditionFailed
from harness.drills.analysis import stats
from harness.drills.analysis.links import expect_reasons
from harness.drills.analysis.trial import never_restored_of


@dataclasses.dataclass(frozen=True)
class Condition:
    kind: str  # "breach" | "mttr" | "budget" | "regression"
    seconds: float | None = None
    budget: float | None = None
    baseline: dict | None = None
    source: str = ""

    def __str__(self) -> str:
        return self.source


def parse_conditions(specs: Iterable[str]) -> list[Condition]:
    out = []
    for spec in specs:
        text = spec.strip()
        if text in ("breach", "expect"):
            out.append(Condition(text, source=text))
        elif text.startswith("mttr>"):
            try:
                seconds = float(text[5:])
            except ValueError:
                raise BadInput(f"--fail-on {text!r}: mttr>SECONDS needs a number of seconds") from None
            if not seconds >= 0:
                raise BadInput(f"--fail-on {text!r}: seconds must be ≥ 0")
            out.append(Condition("mttr", seconds=seconds, source=text))
        elif text.startswith("budget>"):
            try:
                budget = float(text[7:])
            except ValueError:
                raise BadInput(f"--fail-on {text!r}: budget>X needs a number (1 = the SLO's allowance)") from None
            if not budget >= 0:
                raise BadInput(f"--fail-on {text!r}: the budget burn must be ≥ 0")
            out.append(Condition("budget", budget=budget, source=text))
        elif text.startswith("regression:"):
            path = pathlib.Path(text[len("regression:") :])
            try:
                baseline = json.loads(path.read_text())
            except OSError as exc:
                raise BadInput(f"--fail-on {text!r}: cannot read the baseline: {exc.strerror}") from None
            except ValueError as exc:
                raise BadInput(f"--fail-on {text!r}: the baseline is not JSON: {exc}") from None
            if not isinstance(baseline, dict) or not isinstance(baseline.get("configs"), dict):
                raise BadInput(f"--fail-on {text!r}: the baseline is not a results.json (no configs)")
            out.append(Condition("regression", baseline=baseline, source=text))
        else:
            raise BadInput(f"--fail-on {text!r}: expected breach, expect, mttr>SECONDS, budget>X or "
                           "regression:BASELINE.json")  # fmt: skip
    return out


def _trials(config: dict) -> list[dict]:
    return list(config.get("trials") or [config])


def reasons(condition: Condition, results: dict) -> list[str]:
    """Why the condition holds (empty when it does not)."""
    if condition.kind == "expect":
        return expect_reasons(results)
    out = []
    for name in results.get("ranking") or list(results["configs"]):
        trials = [t for t in _trials(results["configs"][name]) if not t.get("insufficient_data")]
        breached = [t for t in trials if t.get("breached")]
        if condition.kind == "breach" and breached:
            out.append(f"{name} breached the SLO in {len(breached)} of {len(trials)} trials")
        elif condition.kind == "mttr" and breached:
            sure = [math.inf if never_restored_of(t) else t["mttr_s"] - stats.uncertainty(t, "mttr_s")
                    for t in breached]  # fmt: skip
            median = statistics.median(sure)
            if median > condition.seconds:
                shown = "never restored" if math.isinf(median) else f"{median:.1f} s"
                if any(stats.uncertainty(t, "mttr_s") for t in breached) and not math.isinf(median):
                    shown += " (less its read-back ±)"
                out.append(f"{name} median MTTR {shown} > {condition.seconds:g} s")
        elif condition.kind == "budget":
            burns = [t["budget_burn"] for t in trials if t.get("budget_burn") is not None]
            median = statistics.median(burns) if burns else None
            if median is not None and median > condition.budget:
                out.append(f"{name} median budget burn {median:.2f}× > {condition.budget:g}×")
        elif condition.kind == "regression":
            base = condition.baseline["configs"].get(name)
            if base is None:
                continue
            why = stats.regression(_trials(base), _trials(results["configs"][name]))
            if why:
                out.append(f"{name} regressed against the baseline: {why}")
    return out


def check(conditions: Iterable[Condition], results: dict) -> None:
    """Raise `ConditionFailed` (exit 3) with one line naming every condition that held."""
    held = []
    for cond in conditions:
        why = reasons(cond, results)
        if why:
            held.append(f"{cond}: {'; '.join(why)}")
    if held:
        raise ConditionFailed("fail-on " + " | ".join(held))
