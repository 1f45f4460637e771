"""Guards: stop conditions watched every second while a trial runs (docs/drills.md, "Safeguards")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from harness.drills.plan.sections import Section

_GUARD_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class ErrorRateGuard(Section):
    """Trip when `traffic`'s error rate is above `above` in `for_s` one-second samples in a row."""

    kind: Literal["error_rate"]
    name: str | None = Field(None, pattern=_GUARD_NAME)
    above: float = Field(ge=0, lt=1)
    for_s: int = Field(3, ge=1, le=3600)
    traffic: Literal["organic", "drill", "all"] = "organic"


class BurnRateGuard(Section):
    """Trip when the error budget burns faster than `above` × the SLO's allowance over both windows
    (the SRE workbook's multiwindow burn-rate alert, on the trial's per-second series)."""

    kind: Literal["burn_rate"]
    name: str | None = Field(None, pattern=_GUARD_NAME)
    above: float = Field(gt=0, le=1000)
    long_s: int = Field(36, ge=1, le=3600)
    short_s: int = Field(3, ge=1, le=3600)
    traffic: Literal["organic", "drill", "all"] = "organic"

    @model_validator(mode="after")
    def _windows(self) -> BurnRateGuard:
        if self.short_s > self.long_s:
            raise ValueError(f"short_s ({self.short_s}) must not exceed long_s ({self.long_s})")
        return self


class PrometheusGuard(Section):
    """Trip when a PromQL expression returns anything (an alert firing, a latency above a bound)."""

    kind: Literal["prometheus"]
    name: str | None = Field(None, pattern=_GUARD_NAME)
    expr: str = Field(min_length=1, max_length=4000)
    #: the Prometheus to ask (default: stack.prometheus, else the run's --prometheus)
    url: str | None = Field(None, pattern=r"^https?://")
    #: trip when the Prometheus has not answered for this many seconds in a row (a guard that cannot see
    #: stops the drill); None: never
    unreachable_s: int | None = Field(5, ge=1, le=3600)


class WallClockGuard(Section):
    """Trip once a trial has run `after_s` seconds (from its first second): no trial acts on the stack longer."""

    kind: Literal["wall_clock"]
    name: str | None = Field(None, pattern=_GUARD_NAME)
    after_s: float = Field(gt=0, le=86400)


GuardCondition = Annotated[
    ErrorRateGuard | BurnRateGuard | PrometheusGuard | WallClockGuard, Field(discriminator="kind")
]


class Guard(Section):
    """Stop conditions checked every second of every trial; the first that holds stops the drill's fault."""

    stop_when: list[GuardCondition] = Field(min_length=1, max_length=32)
    #: later trials of a configuration one of whose trials tripped: `skip` them (so one bad configuration
    #: cannot keep hurting users) or `run` them
    after_trip: Literal["skip", "run"] = "skip"

    @model_validator(mode="after")
    def _unique_names(self) -> Guard:
        names = [g.name or g.kind for g in self.stop_when]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"guard names must be unique (a kind used twice needs a name each): {twice}")
        return self

    def names(self) -> list[str]:
        return [g.name or g.kind for g in self.stop_when]
