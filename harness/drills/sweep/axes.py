"""The axis a sweep varies: a plan key, its range and its grid, and the plan at each value.

Keys are the plan file's own (`phases.fault`, `fault.ratio`, `traffic.organic_rate`, …), any that holds a
number, plus `fault.delay`: the milliseconds of a `delay:MS` directive (its argument, the rest of the directive
kept). Every value is checked by building the plan with it (the plan's own validation and bounds), so a range
the plan cannot take is refused before anything runs.
"""

from __future__ import annotations

import dataclasses
import re

from harness.core.errors import BadInput
from harness.drills.plan.files import PlanError, load_plan, read_yaml, resolve
from harness.drills.plan.model import Plan
from harness.drills.sweep.search import grid

#: the axis' grid when none is given: this many steps across the range (integer keys: at least 1 each)
DEFAULT_STEPS = 16
#: --vary given more often than this is refused
MAX_AXES = 2
#: the second axis' grid: this many steps across its range (a row of the phase diagram at each value)
SECOND_AXIS_STEPS = 4
_RANGE = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*=\s*(-?\d+(?:\.\d+)?)\s*\.\.\s*(-?\d+(?:\.\d+)?)\s*$")
_DELAY = re.compile(r"^delay:(\d+)((?:@.*)?)$")


@dataclasses.dataclass(frozen=True)
class Axis:
    key: str
    lo: float
    hi: float
    step: float
    integer: bool

    @property
    def values(self) -> list[float]:
        return grid(self.lo, self.hi, self.step)

    def label(self, value: float) -> str:
        text = f"{value:g}"
        return f"{text} s" if self.key.startswith("phases.") or self.key.endswith("_s") else (
            f"{text} ms" if self.key == "fault.delay" else text)  # fmt: skip


def _get(data: dict, key: str):
    node = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise BadInput(f"sweep: --vary {key}: the plan has no key {key!r} (e.g. phases.fault, fault.ratio, "
                           "fault.delay, traffic.organic_rate)")  # fmt: skip
        node = node[part]
    return node


def overrides(axis_key: str, value: float, data: dict, integer: bool) -> dict:
    """The plan overrides that set `axis_key` to `value` (`data`: the plan file's mapping)."""
    number = int(round(value)) if integer else float(value)
    if axis_key == "fault.delay":
        directive = str(_get(data, "fault.directive"))
        m = _DELAY.match(directive.strip())
        return {"fault": {"directive": f"delay:{number}{m.group(2) if m else ''}"}}
    out: dict = {}
    node = out
    parts = axis_key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = number
    return out


def parse_all(specs: list[str], plan_name: str, *, step: float | None, quick: bool) -> tuple[Axis, Axis | None]:
    """`--vary` once or twice: the trigger bisected (the first, at `step`) and, for a phase diagram, a second
    key stepped across its range (SECOND_AXIS_STEPS steps); the plan checked at every corner."""
    if not specs:
        raise BadInput("sweep: give the axis: --vary KEY=LO..HI (e.g. --vary phases.fault=1..20)")
    if len(specs) > MAX_AXES:
        raise BadInput(f"sweep: at most {MAX_AXES} --vary axes ({len(specs)} given)")
    first = parse(specs[0], plan_name, step=step, quick=quick)
    if len(specs) == 1:
        return first, None
    second = parse(specs[1], plan_name, step=None, quick=quick, steps=SECOND_AXIS_STEPS)
    if second.key == first.key:
        raise BadInput(f"sweep: --vary {first.key} given twice: vary two different keys")
    for a in (first.lo, first.hi):
        for b in (second.lo, second.hi):
            plan_at(plan_name, first, a, quick=quick, fixed=(second, b))
    return first, second


def parse(spec: str, plan_name: str, *, step: float | None, quick: bool, steps: int = DEFAULT_STEPS) -> Axis:
    """`--vary KEY=LO..HI` into an Axis, each end checked against the plan's own validation."""
    m = _RANGE.match(spec)
    if not m:
        raise BadInput(f"sweep: --vary {spec!r}: expected KEY=LO..HI with numbers, e.g. phases.fault=1..20")
    key, lo, hi = m.group(1), float(m.group(2)), float(m.group(3))
    if not lo < hi:
        raise BadInput(f"sweep: --vary {key}={m.group(2)}..{m.group(3)}: an empty range (LO must be below HI)")
    try:
        data = read_yaml(resolve(plan_name))
    except PlanError as exc:
        raise BadInput(str(exc)) from None
    if key == "fault.delay":
        directive = str(_get(data, "fault.directive"))
        if not _DELAY.match(directive.strip()):
            raise BadInput(f"sweep: --vary fault.delay: the plan's directive {directive!r} is not delay:MS")
        integer = True
    else:
        current = _get(data, key)
        if isinstance(current, bool) or not isinstance(current, (int, float)):
            raise BadInput(f"sweep: --vary {key}: not a number in the plan ({current!r}); vary a number or "
                           "fault.delay")  # fmt: skip
        integer = isinstance(current, int)
    if step is None:
        step = (hi - lo) / steps
        if integer:
            step = max(1.0, round(step))
    if step <= 0:
        raise BadInput(f"sweep: --step {step:g}: must be above 0")
    if integer and (lo != int(lo) or hi != int(hi) or step != int(step)):
        raise BadInput(f"sweep: --vary {key}: a whole number in the plan; give whole LO, HI and --step")
    axis = Axis(key, lo, hi, step, integer)
    for value in (lo, hi):
        plan_at(plan_name, axis, value, quick=quick)  # the plan's own bounds, before anything runs
    return axis


def _merged(a: dict, b: dict) -> dict:
    return {**a, **{k: _merged(a[k], v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
                    for k, v in b.items()}}  # fmt: skip


def plan_at(plan_name: str, axis: Axis, value: float, *, quick: bool, only: list[str] | None = None,
            trials: int = 1, seed: int | None = None, fixed: tuple[Axis, float] | None = None) -> Plan:  # fmt: skip
    """The plan with the axis at `value` (and a second axis at its `fixed` value, `trials`, `only`, `seed`),
    validated; BadInput if it cannot be."""
    data = read_yaml(resolve(plan_name))
    over = overrides(axis.key, value, data, axis.integer)
    if fixed is not None:
        over = _merged(over, overrides(fixed[0].key, fixed[1], data, fixed[0].integer))
        value_text = f"{value:g}, {fixed[0].key}={fixed[1]:g}"
    else:
        value_text = f"{value:g}"
    over["trials"] = trials
    if seed is not None:
        over["seed"] = seed
    try:
        return load_plan(plan_name, quick=quick, overrides=over, only=only)
    except PlanError as exc:
        raise BadInput(f"sweep: --vary {axis.key}={value_text}: {exc}") from None
