"""The types of what a run produces: the key of each per-second series, and results.json.

Per-second series are keyed by `SeriesKey`, a small record, not a joined string;
`series.json` stores each key as an object (see docs/drills.md).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

# --- per-second series ------------------------------------------------------------------
SeriesKind = Literal[
    "calls", "lat", "srv", "gap", "gapsum", "hits", "retry", "refused", "fds", "breaker", "tcp", "active"
]


class SeriesKey(NamedTuple):
    """What one per-second series measures. Unused fields are empty strings.

    - `calls` edge client calls by traffic, status, mode (counter)
    - `lat` edge client latency bucket by traffic, mode, le (counter)
    - `started` edge client calls started by traffic, filed under the second they started (counter)
    - `srv` server calls per hop, shed calls included (counter)
    - `gap` / `gapsum` deadline-gap observations / seconds per hop (counter)
    - `hits`, `retry` per hop (counter); `fds` open fds per hop (gauge, summed over replicas)
    - `refused` calls a hop's process refused at its own limits, in-flight and backlog (counter)
    - `breaker` worst breaker state of a hop (gauge, max); `tcp` connections by state (gauge)
    - `active` the load driver's drill_fault_active (gauge, max)
    """

    kind: str
    service: str = ""
    traffic: str = ""
    status: str = ""
    mode: str = ""
    le: str = ""

    @property
    def is_gauge(self) -> bool:
        return self.kind in _GAUGES

    @property
    def takes_max(self) -> bool:
        return self.kind in _MAXED

    def to_json(self) -> dict[str, str]:
        return {f: v for f, v in zip(self._fields, self, strict=True) if v}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> SeriesKey:
        return cls(**data)


_GAUGES = frozenset({"fds", "breaker", "tcp", "active"})
_MAXED = frozenset({"breaker", "active"})


# --- results ----------------------------------------------------------------------------
class Results(BaseModel):
    """results.json: the plan's identity, per-configuration numbers, ranking and verdict.

    Built in one place (`harness.drills.analysis.results.assemble`) by `drill run` and
    `drill analyze` alike; `configs[NAME]` holds `harness.drills.analysis.trial.analyze_run`'s
    numbers (docs/drills.md lists them).
    """

    model_config = ConfigDict(extra="forbid")

    plan: str | None
    seed: int | None
    fault: dict
    slo: dict
    hops: list[str]
    configs: dict[str, dict]
    ranking: list[str]
    #: `harness.drills.analysis.stats.verdict`: {text, winner, conclusive, trials, comparisons, ...}
    verdict: dict
    finished_at: str
    notes: list[str] = Field(default_factory=list)
    phases: dict | None = None
    probe: dict | None = None
    started_at: str | None = None
    duration_s: float | None = None
    plan_spec: dict | None = None
    source: dict | None = None
    prometheus: dict | None = None
    #: the run stopped here: {config, trial, error}; configs hold only the trials that finished before
    failed: dict | None = None
