"""Backoff strategies: how long to sleep before retry number `n` (n = 1 for the first retry).

Each strategy is a tiny callable with one job, in the spirit of tenacity's `wait_*`:
`strategy(n, previous_sleep) -> seconds`. Random strategies take a `random.Random`
so tests can seed them. Formulas follow AWS "Exponential Backoff and Jitter" and
gRFC A6 (`random(0, min(initial·multiplier^(n−1), max))`).
"""

from __future__ import annotations

import random as _random
from typing import Protocol


class Backoff(Protocol):
    def __call__(self, n: int, previous: float) -> float: ...


class NoBackoff:
    """Retry at once (the naive configuration)."""

    def __call__(self, n: int, previous: float) -> float:
        return 0.0

    def __repr__(self) -> str:
        return "NoBackoff()"


class Fixed:
    """Sleep the same `delay` before every retry."""

    def __init__(self, delay: float) -> None:
        self.delay = max(0.0, delay)

    def __call__(self, n: int, previous: float) -> float:
        return self.delay


def _exp(base: float, cap: float, multiplier: float, n: int) -> float:
    # Guard the exponent: 2**1000 overflows a float, and the cap wins long before.
    exponent = min(max(n - 1, 0), 64)
    return min(cap, base * multiplier**exponent)


class Exponential:
    """`min(cap, base·multiplier^(n−1))`: no jitter (synchronised retries; kept for comparison)."""

    def __init__(self, base: float, cap: float, multiplier: float = 2.0) -> None:
        self.base, self.cap, self.multiplier = base, cap, multiplier

    def __call__(self, n: int, previous: float) -> float:
        return _exp(self.base, self.cap, self.multiplier, n)


class FullJitter:
    """`uniform(0, min(cap, base·2^(n−1)))`: the AWS winner and gRFC A6's formula."""

    def __init__(self, base: float, cap: float, multiplier: float = 2.0, rng: _random.Random | None = None) -> None:
        self.base, self.cap, self.multiplier = base, cap, multiplier
        self.rng = rng or _random.Random()

    def __call__(self, n: int, previous: float) -> float:
        return self.rng.uniform(0.0, _exp(self.base, self.cap, self.multiplier, n))


class Decorrelated:
    """`min(cap, uniform(base, previous·3))` (AWS decorrelated jitter); first sleep in [base, 3·base]."""

    def __init__(self, base: float, cap: float, rng: _random.Random | None = None) -> None:
        self.base, self.cap = base, cap
        self.rng = rng or _random.Random()

    def __call__(self, n: int, previous: float) -> float:
        prev = previous if previous > 0 else self.base
        return min(self.cap, self.rng.uniform(self.base, max(self.base, prev * 3.0)))


def build(spec: dict | None, rng: _random.Random | None = None) -> Backoff:
    """A strategy from a config mapping: `{kind: none|fixed|exponential|full_jitter|decorrelated, ...}`."""
    spec = dict(spec or {})
    kind = str(spec.pop("kind", "none")).lower().replace("-", "_")
    base = float(spec.get("base_s", 0.025))
    cap = float(spec.get("cap_s", 1.0))
    mult = float(spec.get("multiplier", 2.0))
    if kind == "none":
        return NoBackoff()
    if kind == "fixed":
        return Fixed(float(spec.get("delay_s", base)))
    if kind == "exponential":
        return Exponential(base, cap, mult)
    if kind in ("full_jitter", "jitter"):
        return FullJitter(base, cap, mult, rng)
    if kind == "decorrelated":
        return Decorrelated(base, cap, rng)
    raise ValueError(f"unknown backoff kind {kind!r}")
