"""MTTR analysis (DESIGN §10): TTD, TTM, TTR, MTTR, amplification, goodput, blast radius, from per-second series.

Pure functions over a `RunSeries`; no I/O, no clocks. Definitions:

- a sample at time t covers the second (t−1, t]. The **fault window** is the
  samples whose second lies in [fault-on, fault-off): fault-on + ½ ≤ t < fault-off + ½
  (so the last fault second is in and the last warm-up second is out).
- a second is **bad** when its error rate (server-fault / (all − CANCELLED),
  `harness.core.status.error_rate`) on the SLO's traffic exceeds the SLO, or its
  p99 exceeds the latency SLO when one is set; **good** when it has at least
  `min_calls` calls and is not bad; otherwise it is *unknown* (neither).
- **held** at t: the `hold_s` seconds starting at t are all good.
- **detection range**: the fault window plus a grace (`slo.grace_s`, default
  hold_s + window_s). **TTD** = first bad second in that range − fault-on.
  A breach that starts after the range is a **post-fault breach**
  (`{start_s: seconds after fault-off, duration_s: until held again, null if never}`):
  a finding of its own, not TTD, and it does not make the trial `breached`.
- **TTM** = first breach → first held point whose hold window ends while the
  fault is still on (mitigation: breaker, balancer, budget).
- **TTR** = fault-off → first held point after fault-off (0 when the system was
  already holding the SLO when the fault went off).
- **MTTR** = first breach → the held point after the breach's last bad second
  (restored for good). `None` when never restored. `None` too, with
  `breached: False`, when the SLO held: never 0. Times are sample end-times.
- **insufficient data**: fewer than 80 % of the fault window's seconds are
  known, or no edge calls in it, or the load fell behind. Such a trial is never
  ranked as holding.
- **offered load**: per traffic class, `planned` requests/s (what the load
  driver was asked to send) and `achieved`: the calls the edge client *started*
  in the fault window ÷ its length. Calls are counted when they end, so each
  second's completions are moved back by their latency (spread over their
  latency bucket) before counting: a slow fault does not look like a load drop.
  **load fell behind** when achieved < 90 % of planned for a class: the
  generator slowed down with the system (coordinated omission) and the drill
  cannot say a configuration held.
- **amplification** per hop = the hop's attempts (server calls, shed included)
  ÷ edge first attempts (every call users sent: organic and drill, the load
  before any retry), summed over the fault window. The drill's amplification is
  the deepest hop's. One definition for the runner, `drill analyze`, the
  recording rules and the dashboards.
- **goodput** beside it: `success_rate` = OK ÷ (all − CANCELLED) at the edge
  over the fault window (all traffic; `success_rate_by_traffic` per class), and
  `attempts_per_success` = deepest-hop attempts ÷ edge OK calls over the fault
  window (shedding everything gives low amplification but no success).
- **blast radius** = error rate of organic traffic over the fault window.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from harness.core.status import error_rate
from harness.drills.model import SeriesKey, Slo
from harness.drills.series import RunSeries
from harness.drills.stats import summary_key


# --- per-second series -------------------------------------------------------------------
def status_counts(series: RunSeries, i: int, traffic: str = "all") -> dict[str, float]:
    """Client calls in second i by status name, for one traffic class (or all)."""
    counts: dict[str, float] = {}
    for key in series.select("calls"):
        if traffic != "all" and key.traffic != traffic:
            continue
        v = series.values[key][i]
        if v:
            counts[key.status] = counts.get(key.status, 0.0) + v
    return counts


def error_rate_series(
    series: RunSeries, traffic: str = "all", min_calls: float = 0.0, window: int = 1
) -> list[float | None]:
    """Per second: error rate over the `window` seconds ending there (None below `min_calls` calls)."""
    per_second = [status_counts(series, i, traffic) for i in range(len(series.t))]
    out: list[float | None] = []
    for i in range(len(series.t)):
        counts: dict[str, float] = {}
        for c in per_second[max(0, i - max(1, window) + 1) : i + 1]:
            for k, v in c.items():
                counts[k] = counts.get(k, 0.0) + v
        total = sum(v for k, v in counts.items() if k != "CANCELLED")
        out.append(error_rate(counts) if total >= max(min_calls, 1e-9) else None)
    return out


def rps_series(series: RunSeries, traffic: str = "all") -> list[float]:
    """Edge requests/s (client calls, every status) of one traffic class or all."""
    out = []
    for i in range(len(series.t)):
        out.append(sum(status_counts(series, i, traffic).values()))
    return out


def hop_series(series: RunSeries) -> dict[str, list[float]]:
    """Server calls/s per hop (every replica, every status)."""
    return {k.service: [v or 0.0 for v in series.values[k]] for k in series.select("srv")}


def quantile_from_buckets(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus-style histogram_quantile over (upper bound, cumulative count) pairs."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return prev_le
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return buckets[-1][0]


def p99_series(series: RunSeries, traffic: str = "all", mode: str | None = None) -> list[float | None]:
    """Per-second p99 of edge client latency for a traffic class (and fault mode, None = any)."""
    groups: dict[float, list[SeriesKey]] = {}
    for key in series.select("lat"):
        if traffic != "all" and key.traffic != traffic:
            continue
        if mode is not None and key.mode != mode:
            continue
        groups.setdefault(float(key.le), []).append(key)
    out: list[float | None] = []
    for i in range(len(series.t)):
        buckets = [(le, sum(series.values[k][i] or 0.0 for k in keys)) for le, keys in groups.items()]
        out.append(quantile_from_buckets(0.99, buckets))
    return out


def rolling_mean(values: Sequence[float | None], width: int) -> list[float | None]:
    out: list[float | None] = []
    for i in range(len(values)):
        window = [v for v in values[max(0, i - width + 1) : i + 1] if v is not None]
        out.append(sum(window) / len(window) if window else None)
    return out


# --- SLO state machine -------------------------------------------------------------------
GOOD, BAD, UNKNOWN = 1, -1, 0


def slo_states(series: RunSeries, slo: Slo) -> list[int]:
    """Per second: GOOD, BAD or UNKNOWN against the SLO."""
    rates = error_rate_series(series, slo.traffic, slo.min_calls, slo.window_s)
    p99s = p99_series(series, slo.traffic) if slo.max_p99_s is not None else [None] * len(series.t)
    states = []
    for rate, p99 in zip(rates, p99s, strict=True):
        if rate is None:
            states.append(UNKNOWN)
        elif rate > slo.max_error_rate or (slo.max_p99_s is not None and (p99 or 0.0) > slo.max_p99_s):
            states.append(BAD)
        else:
            states.append(GOOD)
    return states


def first_held(states: Sequence[int], start: int, hold: int) -> int | None:
    """First index ≥ start where `hold` consecutive seconds are GOOD."""
    run = 0
    for i in range(max(0, start), len(states)):
        run = run + 1 if states[i] == GOOD else 0
        if run >= hold:
            return i - hold + 1
    return None


def _index_at(t: Sequence[float], when: float) -> int:
    """First sample index whose time is ≥ when (len(t) if none)."""
    for i, x in enumerate(t):
        if x >= when - 1e-9:
            return i
    return len(t)


def _window(series: RunSeries, start: float, end: float) -> range:
    """Samples whose second (t−1, t] lies in [start, end): start + ½ ≤ t < end + ½."""
    return range(_index_at(series.t, start + 0.5), _index_at(series.t, end + 0.5))


def grace_s(slo: Slo) -> float:
    """Detection grace after fault-off: `slo.grace_s`, default hold + window."""
    return float(slo.grace_s) if slo.grace_s is not None else float(slo.hold_s + slo.window_s)


#: a fault window with fewer known seconds than this share is `insufficient_data`
MIN_KNOWN_SHARE = 0.8
#: achieved below this share of the planned rate is `load_fell_behind` (and `insufficient_data`)
MIN_OFFERED_SHARE = 0.9
#: how long past its timeout a call may still be seen ending (deadline timer, scheduling)
TIMEOUT_SLACK_S = 0.1


@dataclasses.dataclass
class Recovery:
    breached: bool
    ttd_s: float | None
    ttm_s: float | None
    ttr_s: float | None
    mttr_s: float | None
    first_breach_s: float | None
    restored_s: float | None
    flaps: int
    insufficient_data: bool = False
    known_share: float | None = None
    post_fault_breach: dict | None = None
    #: never restored: run end − first breach, a lower bound of the MTTR (for statistics only)
    mttr_lower_bound_s: float | None = None


def _post_fault_breach(states: Sequence[int], t: Sequence[float], start: int, hold: int, off: float) -> dict | None:
    later = [i for i in range(start, len(states)) if states[i] == BAD]
    if not later:
        return None
    restored = first_held(states, later[0] + 1, hold)
    if restored is not None:  # the breach ends at the first hold after its last bad second
        last = max((i for i in later if i < restored), default=later[0])
        restored = first_held(states, last + 1, hold)
    return {
        "start_s": round(t[later[0]] - off, 3),
        "duration_s": None if restored is None else round(t[restored] - t[later[0]], 3),
    }


def recovery(series: RunSeries, slo: Slo) -> Recovery:
    """TTD, TTM, TTR, MTTR of one run (see the module docstring)."""
    t = series.t
    states = slo_states(series, slo)
    hold = max(1, int(slo.hold_s))
    win = _window(series, series.fault_on, series.fault_off)
    expected = max(len(win), int(round(series.fault_off - series.fault_on)))
    known = sum(1 for i in win if states[i] != UNKNOWN)
    share = known / expected if expected else 0.0
    edge_calls = sum(rps_series(series, "all")[i] for i in win)
    insufficient = share < MIN_KNOWN_SHARE or edge_calls <= 0
    on, off = win.start, win.stop
    detect_end = _index_at(t, series.fault_off + grace_s(slo) + 0.5)
    bad = [i for i in range(on, detect_end) if states[i] == BAD]
    if not bad:
        post = _post_fault_breach(states, t, detect_end, hold, series.fault_off)
        return Recovery(False, None, None, None, None, None, None, 0, insufficient, round(share, 3), post)
    first = bad[0]
    first_t = t[first]
    ttd = first_t - series.fault_on
    ttm = None
    held = first_held(states, first, hold)
    if held is not None and held + hold - 1 < off:
        ttm = t[held] - first_t
    ttr = None
    if off < len(t):
        if off > 0 and first_held(states, off - 1, hold) == off - 1:
            ttr = 0.0  # already holding when the fault went off
        else:
            h = first_held(states, off, hold)
            if h is not None:
                ttr = max(0.0, t[h] - series.fault_off)
    restored = first_held(states, bad[-1] + 1, hold)
    mttr = t[restored] - first_t if restored is not None else None
    end_of_breach = restored if restored is not None else len(t)
    flaps = 0
    for i in range(first + 1, end_of_breach):
        if states[i] == BAD and states[i - 1] != BAD:
            flaps += 1
    post = None
    if restored is not None:
        post = _post_fault_breach(states, t, max(restored, detect_end), hold, series.fault_off)
    bound = None if mttr is not None else (t[-1] - first_t)
    return Recovery(
        True, ttd, ttm, ttr, mttr, first_t, t[restored] if restored is not None else None, flaps, insufficient,
        round(share, 3), post, bound,
    )  # fmt: skip


# --- load shape and goodput ------------------------------------------------------------------
def _sum_counts(series: RunSeries, win: range, traffic: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for i in win:
        for k, v in status_counts(series, i, traffic).items():
            counts[k] = counts.get(k, 0.0) + v
    return counts


def aggregate_error_rate(series: RunSeries, start: float, end: float, traffic: str = "all") -> float | None:
    return error_rate(_sum_counts(series, _window(series, start, end), traffic))


def success_rate(series: RunSeries, start: float, end: float, traffic: str = "all") -> float | None:
    """OK ÷ (all − CANCELLED) of edge calls in [start, end); None without calls."""
    counts = _sum_counts(series, _window(series, start, end), traffic)
    den = sum(v for k, v in counts.items() if k != "CANCELLED")
    return counts.get("OK", 0.0) / den if den > 0 else None


def amplification(series: RunSeries, hops: Sequence[str] | None = None) -> dict[str, float | None]:
    """Per hop: the hop's attempts ÷ edge first attempts (all traffic), summed over the fault window."""
    win = _window(series, series.fault_on, series.fault_off)
    if not win:
        return {}
    ingress = sum(rps_series(series, "all")[i] for i in win)
    per_hop = hop_series(series)
    out: dict[str, float | None] = {}
    for hop in hops or sorted(per_hop):
        values = per_hop.get(hop)
        if values is None or ingress <= 0:
            out[hop] = None
            continue
        out[hop] = round(sum(values[i] for i in win) / ingress, 3)
    return out


def attempts_per_success(series: RunSeries, hop: str | None) -> float | None:
    """The hop's attempts ÷ edge OK calls over the fault window (None when nothing succeeded)."""
    win = _window(series, series.fault_on, series.fault_off)
    values = hop_series(series).get(hop) if hop else None
    if values is None:
        return None
    ok = _sum_counts(series, win, "all").get("OK", 0.0)
    return round(sum(values[i] for i in win) / ok, 3) if ok > 0 else None


def deadline_gaps(series: RunSeries) -> dict[str, dict[str, float]]:
    """Per hop: calls finished after the edge deadline, and their mean gap (s), over the run."""
    out = {}
    for key in series.select("gap"):
        hop = key.service
        dt = _dts(series.t)
        count = sum((v or 0.0) * d for v, d in zip(series.values[key], dt, strict=True))
        total = sum((v or 0.0) * d for v, d in zip(series.get(SeriesKey("gapsum", hop)), dt, strict=True))
        out[hop] = {"count": round(count, 1), "mean_s": round(total / count, 4) if count else 0.0}
    return out


def fd_peaks(series: RunSeries) -> dict[str, float]:
    return {
        k.service: max((v for v in series.values[k] if v is not None), default=0.0) for k in series.select("fds")
    }


def _dts(t: Sequence[float]) -> list[float]:
    return [1.0] + [max(0.0, b - a) for a, b in zip(t, t[1:], strict=False)]


def total_requests(series: RunSeries, traffic: str = "all") -> int:
    dt = _dts(series.t)
    return int(round(sum(r * d for r, d in zip(rps_series(series, traffic), dt, strict=True))))


def started_rps(series: RunSeries, start: float, end: float, traffic: str) -> float | None:
    """Calls of one traffic class the edge client started in [start, end), per second.

    A sample at t counts calls that ended in (t−1, t]; one in latency bucket
    (lo, hi] started in (t−1−hi, t−lo]. Each bucket's calls are spread evenly
    over that interval and the part inside [start, end) is counted. With the
    client's timeout known, no call is taken to have lasted longer than it
    (plus `TIMEOUT_SLACK_S`): calls that timed out at 2 s sit in the (2, 3] bucket.
    """
    if end <= start:
        return None
    keys = [k for k in series.select("lat") if k.traffic == traffic]
    if not keys:
        return None
    les = sorted({k.le for k in keys}, key=lambda le: math.inf if le == "+Inf" else float(le))
    bounds = [math.inf if le == "+Inf" else float(le) for le in les]
    dt = _dts(series.t)
    started = 0.0
    for i, t in enumerate(series.t):
        cum = [sum(series.values[k][i] or 0.0 for k in keys if k.le == le) for le in les]
        lo = 0.0
        prev = 0.0
        for le_cum, hi in zip(cum, bounds, strict=True):
            n = (le_cum - prev) * dt[i]
            prev = le_cum
            if hi == math.inf:
                hi = lo  # beyond the last bucket: taken as the last bound
            top, bottom = hi, lo
            if series.timeout_s is not None:
                top = min(hi, series.timeout_s + TIMEOUT_SLACK_S)
                bottom = min(lo, series.timeout_s)
            if n > 0:
                a, b = t - dt[i] - top, t - bottom
                overlap = max(0.0, min(b, end) - max(a, start))
                started += n * (overlap / (b - a) if b > a else float(start <= a < end))
            lo = hi
    return started / (end - start)


def offered_load(series: RunSeries) -> tuple[dict[str, dict], bool | None]:
    """Per class `{planned, achieved, fell_behind}` over the fault window, and whether any class fell behind."""
    if not series.planned_rps:
        return {}, None
    out = {}
    for traffic, planned in sorted(series.planned_rps.items()):
        if planned <= 0:
            continue
        achieved = started_rps(series, series.fault_on, series.fault_off, traffic) or 0.0
        out[traffic] = {
            "planned": round(planned, 3),
            "achieved": round(achieved, 3),
            "fell_behind": achieved < MIN_OFFERED_SHARE * planned,
        }
    return out, any(c["fell_behind"] for c in out.values())


def analyze_run(series: RunSeries, slo: Slo, hops: Sequence[str] | None = None) -> dict:
    """Every number results.json carries for one trial of one configuration."""
    rec = recovery(series, slo)
    amp = amplification(series, hops)
    if hops:
        deepest = list(hops)[-1]
    else:  # order unknown (e.g. read from Prometheus): in a chain the deepest hop is the busiest
        deepest = max((h for h in amp if amp[h] is not None), key=lambda h: amp[h], default=None)

    on, off = series.fault_on, series.fault_off
    offered, fell_behind = offered_load(series)

    def r(x):
        return None if x is None else round(x, 3)

    return {
        "breached": rec.breached,
        "insufficient_data": rec.insufficient_data or bool(fell_behind),
        "known_share": rec.known_share,
        "offered_rps": offered,
        "load_fell_behind": fell_behind,
        "ttd_s": r(rec.ttd_s),
        "ttm_s": r(rec.ttm_s),
        "ttr_s": r(rec.ttr_s),
        "mttr_s": r(rec.mttr_s),
        "mttr_lower_bound_s": r(rec.mttr_lower_bound_s),
        "post_fault_breach": rec.post_fault_breach,
        "flaps": rec.flaps,
        "amplification": amp.get(deepest) if deepest else None,
        "deepest_hop": deepest,
        "amplification_by_hop": amp,
        "success_rate": r(success_rate(series, on, off, "all")),
        "success_rate_by_traffic": {tr: r(success_rate(series, on, off, tr)) for tr in ("organic", "drill")},
        "attempts_per_success": attempts_per_success(series, deepest),
        "blast_radius": r(aggregate_error_rate(series, on, off, "organic")),
        "error_rate_during_fault": r(aggregate_error_rate(series, on, off, "all")),
        "drill_error_rate_during_fault": r(aggregate_error_rate(series, on, off, "drill")),
        "requests": total_requests(series),
        "requests_by_traffic": {tr: total_requests(series, tr) for tr in ("organic", "drill")},
        "deadline_gaps": deadline_gaps(series),
        "fd_peaks": fd_peaks(series),
    }


def trial_key(c: dict) -> tuple:
    """Sort key of one trial (or one configuration's representative numbers), best first:
    held the SLO, then MTTR ascending, then never restored, then insufficient data (never "held")."""
    if c.get("insufficient_data"):
        return (3, 0.0)
    if not c.get("breached"):
        return (0, 0.0)
    if c.get("mttr_s") is None:
        return (2, 0.0)
    return (1, c["mttr_s"])


def rank(configs: dict[str, dict]) -> list[str]:
    """Configurations, fastest recovery first (by their summary when they have one, see `stats.summary_key`)."""

    def key(name: str):
        c = configs[name]
        summary = c.get("summary")
        if summary is not None:
            return (*summary_key(summary), name)
        return (*trial_key(c), name)

    return sorted(configs, key=key)
