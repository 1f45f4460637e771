"""Synthetic per-second series for analysis and report tests (no processes)."""

from __future__ import annotations

from harness.drills.plan.outputs import SeriesKey as K
from harness.drills.readings.series import RunSeries


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
    slow: list[float] | None = None,
    deadline: list[float] | None = None,
) -> RunSeries:
    """One sample per second at t = 1..n; `error_rates[i]` applies to organic and drill alike.

    Latency: half the OK calls within 0.1 s, every other call within 1 s, except `slow[i]`, a share of
    each second's calls that succeeded in (1, 2] s, and `deadline[i]`, a share that ended
    DEADLINE_EXCEEDED in (2, 3] s (on top of the `error_rates` share, which fails UNAVAILABLE fast).
    """
    n = len(error_rates)
    t = [float(i + 1) for i in range(n)]
    slow = slow or [0.0] * n
    deadline = deadline or [0.0] * n
    values: dict[K, list[float | None]] = {}
    for traffic, share in (("organic", organic_share), ("drill", 1 - organic_share)):
        ok, err, late, dead, can = [], [], [], [], []
        for rate, s, d in zip(error_rates, slow, deadline, strict=True):
            total = 0.0 if rate is None else rps * share
            e, sl, de = total * (rate or 0.0), total * s, total * d
            ok.append(total - e - de)
            err.append(e)
            late.append(sl)
            dead.append(de)
            can.append(cancelled * share)
        fast = [o - sl for o, sl in zip(ok, late, strict=True)]
        values[K("calls", traffic=traffic, status="OK", mode="none")] = ok
        values[K("calls", traffic=traffic, status="UNAVAILABLE", mode="none")] = err
        values[K("calls", traffic=traffic, status="CANCELLED", mode="none")] = can
        values[K("calls", traffic=traffic, status="DEADLINE_EXCEEDED", mode="none")] = dead
        within_1s = [f + e for f, e in zip(fast, err, strict=True)]
        within_2s = [w + sl for w, sl in zip(within_1s, late, strict=True)]
        within_3s = [w + de for w, de in zip(within_2s, dead, strict=True)]
        values[K("lat", traffic=traffic, mode="none", le="0.1")] = [x * 0.5 for x in fast]
        values[K("lat", traffic=traffic, mode="none", le="1.0")] = within_1s
        values[K("lat", traffic=traffic, mode="none", le="2.0")] = within_2s
        values[K("lat", traffic=traffic, mode="none", le="3.0")] = within_3s
        values[K("lat", traffic=traffic, mode="none", le="+Inf")] = within_3s
    for hop, series in (hops or {"gateway": [rps] * n, "ledger": [rps] * n}).items():
        values[K("srv", service=hop)] = list(series)
        values[K("fds", service=hop)] = [20.0 + i % 3 for i in range(n)]
    return RunSeries(config=config, t=t, fault_on=fault_on, fault_off=fault_off, values=values)


def rates(spec: dict[tuple[int, int], float], n: int = 40) -> list[float]:
    """Error rate per second t=1..n; spec maps (first t, last t) inclusive to a rate."""
    out = [0.0] * n
    for (lo, hi), r in spec.items():
        for t in range(lo, hi + 1):
            out[t - 1] = r
    return out


def read_back(
    series: RunSeries, edge: float | list[float], fault: tuple[float, float] = (0.0, 0.0), resolution: float = 1.0
) -> RunSeries:
    """The series as a Prometheus read-back would give it: every edge uncertain by `edge` s (or per sample)."""
    series.edge_error = list(edge) if isinstance(edge, list) else [edge] * len(series.t)
    series.fault_error = fault
    series.resolution_s = resolution
    return series
