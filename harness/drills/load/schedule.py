"""The load's schedule, one for every driver: who sends what when, and with which request id.

Request ids are `harness.core.ids`' (`PLAN-SEED-USER-N-MIX`, the mix a hash of the seed, configuration,
trial, user and call number, so hits scatter as the ratio says) and the drill tagging is chosen from each
call's *scheduled* time, so two runs of a trial with the same seed send the same ids and the same ids
carry the directive: the hit set is a pure function of the plan, the configuration and the trial
(`tagged_ids`, which the dry run and `drill hits` agree with). Every
driver says what it planned to offer (`planned_rps`); the analysis checks it
against what the edge client actually sent (`offered_rps`, `load_fell_behind`).
A trial's timeline starts on a whole unix second, exported for any reader
(`mark_trial`) and read back by the drivers that run in other processes
(`announced_start`).
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from harness.core import ids
from harness.core import metrics as m
from harness.core.snapshots import EdgeCounts
from harness.drills.plan.sections import Fault, Phases, Traffic


class LoadDriver(Protocol):
    """What the runner asks a load generator. Each driver answers for itself; None is "not known here" (a load
    whose calls are made in other processes knows less than the runner's own), and the runner only asks."""

    #: results.json's `driver`
    name: str
    #: the unix second the trial's timeline starts at, once `start` returned (every phase boundary is a whole
    #: second after it)
    start_unix: float | None

    async def start(self, edge: list[str]) -> None:
        """Start the trial's load on `edge`'s addresses; return once `start_unix` is known."""
        ...

    def metrics_endpoints(self) -> list[tuple[str | None, str]]:
        """The load's own /metrics, as (service, URL), for the scraper and Prometheus."""
        ...

    def exact_counts(self) -> EdgeCounts | None:
        """The edge's calls filed by the whole second they ended in, exact, straight from the load; None when
        they are read from its /metrics like a hop's."""
        ...

    def edge_selector(self) -> str | None:
        """The selector of the edge's calls in the stack's Prometheus, when they are read from there after the
        trial (the load's own /metrics are not reachable); None otherwise."""
        ...

    async def wait(self, timeout_s: float) -> None:
        """After the trial's last second: wait (bounded) for the schedule to end and the calls in flight to
        finish, where this process holds them."""
        ...

    async def stop(self) -> None: ...

    def expected_hits(self) -> list[str] | None:
        """The ids the load sent with the directive that the hit function says are hit; None: not known here."""
        ...

    def observed_hits(self) -> list[str] | None:
        """The ids answered with the `x-drill-fault` marker (the injecting hop's own word); None: not known here."""
        ...

    def message_counts(self) -> dict | None:
        """A streaming edge's messages each way (results.json `messages`); None for a unary edge, or not known."""
        ...

    def planned_rps(self) -> dict[str, float]: ...

    def stop_tagging(self) -> int | None:
        """A guard tripped: send no more directives; the tagged calls cancelled, or None where it cannot."""
        ...


def planned_rps(traffic: Traffic) -> dict[str, float]:
    """Requests/s the plan offers per traffic class (users × per-user rate)."""
    return {
        "organic": traffic.organic_users * traffic.organic_rate,
        "drill": traffic.drill_users * traffic.drill_rate,
    }


def request_id(plan: str, seed: int, config: str, trial: int, user: str, n: int) -> str:
    """Call `n` of `user` in trial `trial` of configuration `config` (`harness.core.ids.request_id`)."""
    return ids.request_id(plan, seed, config, trial, user, n)


def users(traffic: Traffic) -> list[tuple[str, str, float, float]]:
    """The aio load's users in order: (user name, traffic class, calls/s, offset of its first call in s).

    User k of K sends call n at `offset + n / rate` after the schedule's start, offset = k / K / rate: the
    users of a trial spread over one period, never two on the same instant."""
    everyone = [("organic", i, traffic.organic_rate) for i in range(traffic.organic_users)]
    everyone += [("drill", i, traffic.drill_rate) for i in range(traffic.drill_users)]
    return [(f"{kind}{i}", kind, rate, k / max(1, len(everyone)) / max(rate, 1e-6))
            for k, (kind, i, rate) in enumerate(everyone)]  # fmt: skip


def calls_of(phases: Phases, rate: float) -> int:
    """How many calls one user sends over the trial (its schedule is bounded in count)."""
    return int(phases.total * rate)


def tagged_ids(
    plan: str, seed: int, config: str, trial: int, traffic: Traffic, fault: Fault, phases: Phases
) -> list[str]:
    """Every id the aio load sends with the directive in trial `trial` of configuration `config`: the drill
    users' calls scheduled in the fault phase.

    A pure function of the plan, the configuration's label and the trial: what a trial tags unless a guard
    stops the directive early (the dry run predicts a trial's hits from it, as `drill hits` would for these
    ids)."""
    if not fault.directive:
        return []
    return [request_id(plan, seed, config, trial, user, n) for user, kind, rate, offset in users(traffic)
            if kind == "drill" for n in range(calls_of(phases, rate))
            if phases.at(offset + n / rate) == "fault"]  # fmt: skip


def ids_digest(request_ids) -> str:
    """16 hex digits naming a set of ids (results.json `hits.*_digest`, the dry run's `digest`)."""
    return hashlib.sha256("\n".join(sorted(request_ids)).encode()).hexdigest()[:16]


def mark_trial(plan: str, config: str, trial: int, start_unix: float, phases: Phases) -> None:
    """Export when each phase of this trial starts (`drill_trial_phase_start_seconds`), for any reader."""
    at = start_unix
    for phase, seconds in zip(m.TRIAL_PHASES, (phases.warmup, phases.fault, phases.recovery, 0.0), strict=True):
        m.TRIAL_PHASE_START.labels(plan, config, str(trial), phase).set(at)
        at += seconds


def announced_start(text: str, config: str, trial: int) -> float | None:
    """The unix second a trial's timeline starts at, as its load exported it (`mark_trial`, or Locust's phase
    clock) in a /metrics text; None while the text does not say it yet."""
    from prometheus_client.parser import text_string_to_metric_families

    name = m.sample_name(m.TRIAL_PHASE_START)
    want = {"phase": "warmup", "trial": str(trial), "config": config}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in want.items()):
                return sample.value
    return None
