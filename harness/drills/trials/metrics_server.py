"""The runner's one /metrics server, and what the run's Prometheus scrapes through it.

One server per process serves the runner's own series (its phase gauges, the plan's info gauge, the `drill_link_*`
series of the links its trials run in it), the aio
load's per-second edge counts stamped with their second (`harness.core.snapshots`), and a relay to each
trial's hops and load (`readings.relay`): Prometheus keeps the same targets from trial to trial, so it reads
a new trial's hops within a scrape interval instead of discovering new ports on its 5-s tick.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from harness.core import metrics as m
from harness.core.snapshots import EdgeCounts, LoadExport
from harness.drills.load.schedule import planned_rps
from harness.drills.plan.model import Plan
from harness.drills.readings.relay import Relay, relayed
from harness.drills.readings.relay import serve as serve_metrics
from harness.link import metrics as link_metrics

_METRICS: tuple[str, EdgeCounts, str, Relay] | None = None

#: How long a trial waits for Prometheus to read its hops once: a changed target set is discovered on
#: Prometheus' 5-s tick, then scraped within its interval (1 s here; a user's may be longer).
WAIT_SCRAPED_S = 15.0


def runner_metrics() -> tuple[str, EdgeCounts]:
    """The runner's own /metrics and the aio load's per-second edge counts it serves, stamped with their
    second (harness.core.snapshots), beside every other series of the process, live."""
    return _runner_server()[:2]


def runner_metrics_url() -> str:
    return runner_metrics()[0]


def initial_targets(plan: Plan) -> list[tuple]:
    """What Prometheus scrapes from the start: the runner, and the relay paths of the first trial's hops when
    the runner starts them (named as it will name them), so their discovery overlaps Prometheus' start."""
    own, _, base, _ = _runner_server()
    hops = [] if plan.stack else [(h.name, "") for h in plan.variants[0].hops for _ in range(h.replicas)]
    return [(None, own), *relayed(base, hops)[1]]


def _runner_server() -> tuple[str, EdgeCounts, str, Relay]:
    """(metrics URL, edge counts, base URL, hop relay) of the one metrics server of this process."""
    global _METRICS
    if _METRICS is None:
        counts = EdgeCounts("loadgen")
        # the links a plan's trials run in this process (`fault.link`, `stack.links` without `admin`) are read
        # here, as a running `drill link` is on its own --metrics-port
        base, relay = serve_metrics(LoadExport(counts, extra=link_metrics.FAMILIES).registry())
        _METRICS = (f"{base}/metrics", counts, base, relay)
    return _METRICS


def export_plan(plan: Plan) -> None:
    """The plan's SLO and each configuration's planned load as an info gauge on the runner's /metrics:
    `drill analyze --prometheus` reads them back and judges the run as the runner does."""
    slo = plan.slo
    for v in plan.variants:
        rps = planned_rps(v.traffic)
        p99 = "" if slo.max_p99_s is None else repr(slo.max_p99_s)
        grace = "" if slo.grace_s is None else repr(slo.grace_s)
        m.PLAN_INFO.labels(
            plan.name, v.name, slo.traffic, repr(slo.max_error_rate), p99, str(slo.hold_s), str(slo.window_s),
            repr(slo.min_calls), grace, repr(rps["organic"]), repr(rps["drill"]), repr(v.traffic.timeout_s),
        ).set(1)  # fmt: skip


async def point_prometheus(prometheus, endpoints: list[tuple[str | None, str]], say: Callable[[str], None]) -> None:
    """Every hop and load of this trial through the relay: the same targets each trial of the same shape. Waits
    until each was read once, or the hops' first seconds (all of warm-up in a short plan) would be missing from
    Prometheus; says so when that did not happen within WAIT_SCRAPED_S."""
    own = runner_metrics_url()
    *_, base, relay = _runner_server()
    urls, relay_targets = relayed(base, [(svc, url) for svc, url in endpoints if url != own])
    relay.set(urls)
    prometheus.set_targets([(None, own), *relay_targets])
    if not await asyncio.to_thread(relay.wait_served, urls, WAIT_SCRAPED_S):
        say("prometheus has not scraped every replica yet: first seconds may be missing")
