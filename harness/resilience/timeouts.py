"""Per-attempt timeouts per method: fixed, or derived from the observed p99 × factor.

The derived rule is the "TP99 + 50%" rule of thumb: `clamp(p99(last N attempts) ×
1.5, floor, cap)`. Until `min_samples` latencies are seen it answers `cap`, so a
cold client is not cut short by a guess. `MethodTimeouts` maps method names
(`Call`, or the full `pkg.Service/Call`) to a strategy, with a default.
`LatencyWindow` keeps a method's recent successful latencies for the caller's
early give-up (a retry is not started with less time left than the method's p50).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from typing import Protocol


class Timeout(Protocol):
    def timeout(self) -> float | None: ...

    def observe(self, seconds: float) -> None: ...


class NoTimeout:
    """No per-attempt timeout (only the call's deadline, if any, applies)."""

    def timeout(self) -> float | None:
        return None

    def observe(self, seconds: float) -> None:
        pass


class FixedTimeout:
    """The same per-attempt timeout every time."""

    def __init__(self, seconds: float) -> None:
        if seconds <= 0:
            raise ValueError("a fixed timeout must be positive")
        self.seconds = seconds

    def timeout(self) -> float | None:
        return self.seconds

    def observe(self, seconds: float) -> None:
        pass


class LatencyWindow:
    """The last `size` latencies of one method; `quantile(q)` once `min_samples` are in (else None)."""

    def __init__(self, size: int = 100, min_samples: int = 10) -> None:
        self.min_samples = max(1, min_samples)
        self._samples: deque[float] = deque(maxlen=max(1, size))
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        with self._lock:
            self._samples.append(seconds)

    def quantile(self, q: float) -> float | None:
        with self._lock:
            data = sorted(self._samples)
        if len(data) < self.min_samples:
            return None
        return data[max(0, math.ceil(q * len(data)) - 1)]


class P99Timeout:
    """`clamp(p99 of the last `window` attempt latencies × factor, floor, cap)`."""

    def __init__(
        self,
        *,
        factor: float = 1.5,
        floor_s: float = 0.05,
        cap_s: float = 2.0,
        window: int = 200,
        min_samples: int = 20,
    ) -> None:
        if not 0 < floor_s <= cap_s:
            raise ValueError("p99 timeout needs 0 < floor_s <= cap_s")
        self.factor, self.floor_s, self.cap_s = factor, floor_s, cap_s
        self.min_samples = max(1, min_samples)
        self._samples: deque[float] = deque(maxlen=max(1, window))
        self._lock = threading.Lock()

    def p99(self) -> float | None:
        with self._lock:
            data = sorted(self._samples)
        if len(data) < self.min_samples:
            return None
        return data[max(0, math.ceil(0.99 * len(data)) - 1)]

    def timeout(self) -> float | None:
        p99 = self.p99()
        if p99 is None:
            return self.cap_s
        return min(self.cap_s, max(self.floor_s, p99 * self.factor))

    def observe(self, seconds: float) -> None:
        with self._lock:
            self._samples.append(seconds)


def build(spec: dict | None) -> Timeout:
    """`{kind: none}`, `{kind: fixed, seconds}` or `{kind: p99, factor, floor_s, cap_s, window}`."""
    spec = dict(spec or {})
    kind = str(spec.pop("kind", "none")).lower()
    if kind == "none":
        return NoTimeout()
    if kind == "fixed":
        return FixedTimeout(float(spec["seconds"]))
    if kind == "p99":
        return P99Timeout(**{k: (int(v) if k in ("window", "min_samples") else float(v)) for k, v in spec.items()})
    raise ValueError(f"unknown timeout kind {kind!r}")


class MethodTimeouts:
    """A timeout strategy per method (short name or `pkg.Service/Method`), else the default."""

    def __init__(self, default: dict | None = None, methods: dict[str, dict] | None = None) -> None:
        self._default_spec = default
        self._specs = dict(methods or {})
        self._built: dict[str, Timeout] = {}

    def for_method(self, method: str) -> Timeout:
        found = self._built.get(method)
        if found is None:
            short = method.rsplit("/", 1)[-1]
            spec = self._specs.get(method, self._specs.get(short, self._default_spec))
            found = self._built[method] = build(spec)
        return found
