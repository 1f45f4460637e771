"""Bisection for a boundary, and the interval that decides a point: pure functions of the outcomes so far.

A configuration's boundary is the smallest value on the axis where P(never restored) ≥ ½. Each value gets
trials until its Wilson 95 % interval excludes ½ or it has `max_trials`; it is then **failing** (the share of
trials never restored ≥ ½) or **recovering**. The search checks both ends first (a configuration that fails at
the low end, or recovers at the high end, has no bracket inside the range), then halves the bracket
(highest recovering value, lowest failing value) on the axis' grid until the two are one step apart.

Everything here is a function of the outcomes: after an interruption the same outcomes ask for the same next
trial, so a resumed sweep repeats nothing. It assumes, as bisection must, that failing is monotone in the
trigger; a value that fails below one that recovers is reported as it was measured (see `summary`).

What a value's trials say is an `Outcome`, where a configuration's boundary lies a `BoundaryKind`: str enums,
so sweep.json and sweep.html spell them as they always have.
"""

from __future__ import annotations

import dataclasses
import enum
import math

#: the normal quantile of a two-sided 95 % interval
Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials ((0, 1) for n = 0)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


class Outcome(enum.StrEnum):
    """What one value's trials say for one configuration (sweep.html colours its dot by it)."""

    FAILING = "failing"  # decided: P(never restored) ≥ ½
    RECOVERING = "recovering"  # decided: below ½
    OPEN = "open"  # not decided yet: more trials wanted


class BoundaryKind(enum.StrEnum):
    """Where a configuration's boundary lies on the axis, once its search is done (OPEN until then)."""

    BETWEEN = "between"  # a recovering value and a failing one, one step apart inside the range
    BELOW_RANGE = "below_range"  # fails already at the low end
    ABOVE_RANGE = "above_range"  # recovers still at the high end
    OPEN = "open"  # not bracketed yet


@dataclasses.dataclass(frozen=True)
class Tally:
    """A value's trials for one configuration: `n` that counted, `k` never restored."""

    n: int = 0
    k: int = 0

    def decided(self, max_trials: int) -> bool:
        lo, hi = wilson(self.k, self.n)
        return self.n >= max_trials or hi < 0.5 or lo > 0.5

    @property
    def failing(self) -> bool:
        """P(never restored) ≥ ½ as measured (a tie counts as failing: the boundary is where it *reaches* ½)."""
        return self.n > 0 and 2 * self.k >= self.n

    def outcome(self, max_trials: int) -> Outcome:
        if not self.decided(max_trials):
            return Outcome.OPEN
        return Outcome.FAILING if self.failing else Outcome.RECOVERING


@dataclasses.dataclass(frozen=True)
class Bracket:
    """Where a configuration's search stands: the values that recover and fail closest to each other."""

    recovering: float | None  # highest value measured recovering below the lowest failing one
    failing: float | None  # lowest value measured failing
    done: bool
    #: the value that needs a trial next (None when done)
    next_value: float | None

    @property
    def kind(self) -> BoundaryKind:
        if not self.done:
            return BoundaryKind.OPEN
        if self.failing is None:
            return BoundaryKind.ABOVE_RANGE
        if self.recovering is None:
            return BoundaryKind.BELOW_RANGE
        return BoundaryKind.BETWEEN


def grid(lo: float, hi: float, step: float) -> list[float]:
    """The axis' values: lo, lo + step, …, and hi (the last step may be shorter)."""
    n = math.floor((hi - lo) / step + 1e-9)
    values = [round(lo + i * step, 9) for i in range(n + 1)]
    if values[-1] < hi - 1e-9:
        values.append(hi)
    return values


def search(values: list[float], tallies: dict[float, Tally], max_trials: int) -> Bracket:
    """The next value one configuration needs a trial at, or its bracket when it is done.

    `values` is the axis' grid in increasing order; `tallies` what each value has so far."""

    def tally(v: float) -> Tally:
        return tallies.get(v, Tally())

    lo_i, hi_i = 0, len(values) - 1
    for end in (values[lo_i], values[hi_i]):  # both ends first
        if not tally(end).decided(max_trials):
            return Bracket(None, None, False, end)
    if tally(values[lo_i]).failing:  # fails at the low end: the boundary is at or below it
        return Bracket(None, values[lo_i], True, None)
    if not tally(values[hi_i]).failing:  # recovers at the high end: no boundary in range
        return Bracket(values[hi_i], None, True, None)
    # bracket: the highest decided recovering value below the lowest decided failing one
    while hi_i - lo_i > 1:
        decided = [i for i in range(lo_i + 1, hi_i) if tally(values[i]).decided(max_trials)]
        failing = [i for i in decided if tally(values[i]).failing]
        recovering = [i for i in decided if not tally(values[i]).failing]
        new_hi = min(failing, default=hi_i)
        new_lo = max((i for i in recovering if i < new_hi), default=lo_i)
        if (new_lo, new_hi) == (lo_i, hi_i):
            mid = (lo_i + hi_i) // 2
            return Bracket(values[lo_i], values[hi_i], False, values[mid])
        lo_i, hi_i = new_lo, new_hi
    return Bracket(values[lo_i], values[hi_i], True, None)
