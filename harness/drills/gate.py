"""`--fail-on`: CI gates over results.json (DESIGN §11: exit 3 when a condition holds).

- `breach`: some configuration breached the SLO in some (valid) trial;
- `mttr>SECONDS`: some configuration's median MTTR over its breached trials
  (a never-restored trial counts as infinitely long) exceeds SECONDS;
- `regression:BASELINE.json`: some configuration present in both is
  significantly worse than in the baseline results.json: more breaches
  (Fisher's exact test) or a longer median outage (bootstrap 95 % CI above 0),
  see `harness.drills.stats.compare`.

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
from harness.drills import stats


@dataclasses.dataclass(frozen=True)
class Condition:
    kind: str  # "breach" | "mttr" | "regression"
    seconds: float | None = None
    baseline: dict | None = None
    source: str = ""

    def __str__(self) -> str:
        return self.source


def parse_conditions(specs: Iterable[str]) -> list[Condition]:
    out = []
    for spec in specs:
        text = spec.strip()
        if text == "breach":
            out.append(Condition("breach", source=text))
        elif text.startswith("mttr>"):
            try:
                seconds = float(text[5:])
            except ValueError:
                raise BadInput(f"--fail-on {text!r}: mttr>SECONDS needs a number of seconds") from None
            if not seconds >= 0:
                raise BadInput(f"--fail-on {text!r}: seconds must be ≥ 0")
            out.append(Condition("mttr", seconds=seconds, source=text))
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
            raise BadInput(f"--fail-on {text!r}: expected breach, mttr>SECONDS or regression:BASELINE.json")
    return out


def _trials(config: dict) -> list[dict]:
    return list(config.get("trials") or [config])


def reasons(condition: Condition, results: dict) -> list[str]:
    """Why the condition holds (empty when it does not)."""
    out = []
    for name in results.get("ranking") or list(results["configs"]):
        trials = [t for t in _trials(results["configs"][name]) if not t.get("insufficient_data")]
        breached = [t for t in trials if t.get("breached")]
        if condition.kind == "breach" and breached:
            out.append(f"{name} breached the SLO in {len(breached)} of {len(trials)} trials")
        elif condition.kind == "mttr" and breached:
            median = statistics.median(math.inf if t.get("mttr_s") is None else t["mttr_s"] for t in breached)
            if median > condition.seconds:
                shown = "never restored" if math.isinf(median) else f"{median:.1f} s"
                out.append(f"{name} median MTTR {shown} > {condition.seconds:g} s")
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
