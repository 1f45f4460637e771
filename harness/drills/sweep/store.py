"""sweep.json: every trial of a sweep as it ends, the settings it ran with, and what they add up to.

Written whole after every point (a temporary file renamed over the old one), so a sweep killed at any moment
leaves the last complete state; `--resume DIR` reads it back and the search (a function of the trials) asks
for exactly the trials still missing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

from harness.core.errors import BadInput
from harness.drills.sweep.axes import Axis
from harness.drills.sweep.search import Tally

FILE = "sweep.json"
VERSION = 1


@dataclasses.dataclass
class Settings:
    """What a sweep runs: a resumed sweep takes them from its sweep.json."""

    plan: str
    axis: Axis
    quick: bool
    max_trials: int
    configs: list[str]
    seed: int | None = None
    #: a phase diagram's second axis: the whole diagram's (each row a sweep of its own, `plane`) …
    axis2: Axis | None = None
    #: … and, in a row's own sweep, that axis' value there
    fixed: float | None = None

    @property
    def fixed_axis(self) -> tuple[Axis, float] | None:
        return None if self.fixed is None else (self.axis2, self.fixed)

    def row(self, value: float) -> Settings:
        """The settings of the phase diagram's row at `value` of the second axis."""
        return dataclasses.replace(self, fixed=value)

    def to_json(self) -> dict:
        out = {"plan": self.plan, "axis": dataclasses.asdict(self.axis), "quick": self.quick,
               "max_trials": self.max_trials, "configs": self.configs, "seed": self.seed}  # fmt: skip
        if self.axis2 is not None:
            out["axis2"] = dataclasses.asdict(self.axis2)
            if self.fixed is not None:
                out["fixed"] = self.fixed
        return out

    @classmethod
    def from_json(cls, data: dict) -> Settings:
        axis2 = Axis(**data["axis2"]) if data.get("axis2") else None
        return cls(data["plan"], Axis(**data["axis"]), data["quick"], data["max_trials"], list(data["configs"]),
                   data.get("seed"), axis2, data.get("fixed"))  # fmt: skip


@dataclasses.dataclass
class Record:
    """One configuration's trial at one value: the drill's own outcome and what it cost users."""

    config: str
    value: float
    point: str  # the point's output directory, relative to the sweep's
    breached: bool
    never_restored: bool
    insufficient_data: bool
    mttr_s: float | None
    budget_burn: float | None
    guard_tripped: bool = False


def tallies(records: list[Record], config: str) -> dict[float, Tally]:
    """Each value's tally for `config`; trials with insufficient data do not count."""
    out: dict[float, Tally] = {}
    for r in records:
        if r.config == config and not r.insufficient_data:
            t = out.get(r.value, Tally())
            out[r.value] = Tally(t.n + 1, t.k + int(r.never_restored))
    return out


def save(out: pathlib.Path, settings: Settings, records: list[Record], summary: dict) -> pathlib.Path:
    path = out / FILE
    tmp = out / f".{FILE}.tmp"
    data = {"version": VERSION, **settings.to_json(), "trials": [dataclasses.asdict(r) for r in records], **summary}
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def load(out: pathlib.Path, flag: str = "--resume") -> tuple[Settings, list[Record]]:
    """A saved sweep's settings and trials; `flag` names the option that asked for it, in the errors."""
    path = out / FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BadInput(f"sweep: {flag} {out}: no {FILE} there") from None
    except (OSError, ValueError) as exc:
        raise BadInput(f"sweep: {flag} {out}: {FILE} unreadable ({exc})") from None
    if data.get("version") != VERSION:
        raise BadInput(f"sweep: {flag} {out}: {FILE} version {data.get('version')!r}, this drill reads {VERSION}")
    try:
        return Settings.from_json(data), [Record(**r) for r in data["trials"]]
    except (KeyError, TypeError) as exc:
        raise BadInput(f"sweep: {flag} {out}: {FILE} is not a sweep's ({exc})") from None
