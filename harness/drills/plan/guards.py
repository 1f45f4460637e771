"""Guards: stop conditions watched every second while a trial runs (docs/drills.md, "Safeguards")."""

from __future__ import annotations

import re
import urllib.parse
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from harness.drills.plan.sections import Section

_GUARD_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
#: A PromQL number literal (decimal, hex, Inf, NaN; signed): a scalar, never a guard's instant vector.
_NUMBER = re.compile(r"[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?|0x[0-9a-f]+|inf|nan)", re.I)
#: A PromQL string literal: "…", '…' or `…`.
_STRING = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|`[^`]*`", re.S)
#: PromQL functions whose value is a scalar, whatever their argument.
_SCALAR_FUNCTIONS = ("scalar", "time", "pi")


def url_problem(text: str) -> str | None:
    """Why `text` is not an http(s) URL a request can go to (None: it is one): a scheme other than http or
    https, no host, a port that is not a number 1-65535, or a space or control character anywhere (urllib
    would refuse it only when the request is sent, as `InvalidURL`)."""
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text):
        return "it holds a space or a control character"
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("http", "https"):
        return "not an http:// or https:// URL"
    if not parts.hostname:
        return "it names no host"
    if port == 0:
        return "port 0"
    return None


def _unwrapped(expr: str) -> str:
    """`expr` without whitespace around it and without parentheses that enclose all of it."""
    expr = expr.strip()
    while expr.startswith("(") and _closing(expr, 0) == len(expr) - 1:
        expr = expr[1:-1].strip()
    return expr


def _closing(expr: str, at: int) -> int:
    """The index of the parenthesis that closes the one at `at` (-1: none), skipping string literals."""
    depth, i = 0, at
    while i < len(expr):
        c = expr[i]
        if c in "\"'`":
            m = _STRING.match(expr, i)
            if m is None:
                return -1
            i = m.end()
            continue
        depth += c == "("
        depth -= c == ")"
        if depth == 0:
            return i
        i += 1
    return -1


def not_a_vector(expr: str) -> str | None:
    """What a guard's expression evaluates to when that is plainly not an instant vector, from its text alone
    (None: it may be one; Prometheus' own `resultType` settles the rest before the first fault). A guard trips
    when its expression returns series; a scalar or a string always "returns" a value, so it would trip in the
    first second of every trial."""
    e = _unwrapped(expr)
    if _NUMBER.fullmatch(e):
        return "a number (a scalar)"
    if _STRING.fullmatch(e):
        return "a string"
    m = re.match(r"(\w+)\s*\(", e)
    if m and m.group(1) in _SCALAR_FUNCTIONS and _closing(e, m.end() - 1) == len(e) - 1:
        return f"a scalar ({m.group(1)}() returns one)"
    return None


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

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        problem = None if v is None else url_problem(v)
        if problem:
            raise ValueError(f"{v!r} is not a URL a request can go to: {problem}")
        return v

    @field_validator("expr")
    @classmethod
    def _instant_vector(cls, v: str) -> str:
        what = not_a_vector(v)
        if what:
            raise ValueError(f"{v!r} is {what}: a guard needs an instant vector, which trips it by returning "
                             "series (e.g. 'up == 0' or an ALERTS{…} selector)")  # fmt: skip
        return v


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
