"""Synthetic per-second series for analysis and report tests (no processes)."""

from __future__ import annotations

from harness.drills.model import SeriesKey as K
from harness.drills.series import RunSeries


def make_series(
    error_rates: list[float | None],
    *,
    config: str = "cfg",
    fault_on: float = 10,
    fault_off: float = 20,
    rps: float = 100.0,
    organic_share: float = 0.9,
    hops: dict[str, list[float]] | None = None,
    cancelled: float = 0.0,
) -> RunSeries:
    """One sample per second at t = 1..n; `error_rates[i]` applies to organic and drill alike."""
    n = len(error_rates)
    t = [float(i + 1) for i in range(n)]
    values: dict[str, list[float | None]] = {}
    for traffic, share in (("organic", organic_share), ("drill", 1 - organic_share)):
        ok, err, can = [], [], []
        for rate in error_rates:
            total = 0.0 if rate is None else rps * share
            e = total * (rate or 0.0)
            ok.append(total - e)
            err.append(e)
            can.append(cancelled * share)
        values[K('calls', traffic=traffic, status='OK', mode='none')] = ok
        values[K('calls', traffic=traffic, status='UNAVAILABLE', mode='none')] = err
        values[K('calls', traffic=traffic, status='CANCELLED', mode='none')] = can
        values[K('lat', traffic=traffic, mode='none', le='0.1')] = [x * 0.5 for x in ok]
        values[K('lat', traffic=traffic, mode='none', le='1.0')] = [x + y for x, y in zip(ok, err, strict=False)]
        values[K('lat', traffic=traffic, mode='none', le='+Inf')] = [x + y for x, y in zip(ok, err, strict=False)]
    for hop, series in (hops or {"gateway": [rps] * n, "ledger": [rps] * n}).items():
        values[K('srv', service=hop)] = list(series)
        values[K('fds', service=hop)] = [20.0 + i % 3 for i in range(n)]
    return RunSeries(config=config, t=t, fault_on=fault_on, fault_off=fault_off, values=values)
