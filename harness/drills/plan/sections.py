"""The sections every plan has: the hops a topology starts, traffic, fault, phases, SLO, probe.

Each is a `Section`: unknown keys are errors, values are frozen, and every number is finite and within a
bound of `harness.core.limits`, which says why. `model.PlanFile` puts them together with the stack
(`stack.py`) and the guards (`guards.py`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from harness.core import headers as h
from harness.core import limits as lim
from harness.core.faults import MAX_ATTEMPTS, DirectiveError, parse_directive
from harness.core.reasons import explain
from harness.core.status import STATUS_NAMES
from harness.drills.plan.base import HOP_NAME, Section
from harness.drills.plan.links import LinkFault, TopologyLink, check_links
from harness.interceptors import Tagging

DEFAULT_HOPS = ("gateway", "order", "account", "ledger")


# --- the chain the runner starts ---------------------------------------------------------
class HopSpec(Section):
    """One hop of the chain: its replicas and their bounded capacity."""

    name: str = Field(min_length=1, pattern=HOP_NAME)
    replicas: int = Field(1, ge=1, le=lim.MAX_REPLICAS)
    work_ms: float = Field(5.0, ge=0, le=lim.MAX_DEADLINE_S * 1000)
    concurrency: int = Field(16, ge=1, le=lim.MAX_INFLIGHT)
    queue: int = Field(64, ge=0, le=lim.MAX_QUEUE)
    shed_code: str = "RESOURCE_EXHAUSTED"
    #: every attempt pays capacity, even one the fault aborts (see harness.demo.service)
    admission: bool = True
    #: admitted work goes on after the caller is gone (see harness.demo.service)
    orphan_work: bool = False
    keepalive_ms: int | None = Field(None, ge=1, le=lim.MAX_CHANNEL_MS)
    max_idle_ms: int | None = Field(None, ge=1, le=lim.MAX_CHANNEL_MS)

    @field_validator("shed_code")
    @classmethod
    def _known_code(cls, v: str) -> str:
        if v not in STATUS_NAMES or v == "OK":
            raise ValueError(f"{v!r} is not a gRPC status name")
        return v


class Topology(Section):
    hops: tuple[HopSpec, ...] = tuple(HopSpec(name=n) for n in DEFAULT_HOPS)
    #: downstream timeout when no resilience configuration is named
    timeout_s: float | None = Field(None, gt=0, le=lim.MAX_DEADLINE_S)
    #: links the runner starts in front of replicas, each trial (plan.links; the hop above dials the link)
    links: tuple[TopologyLink, ...] = ()

    @field_validator("hops")
    @classmethod
    def _unique(cls, v: tuple[HopSpec, ...]) -> tuple[HopSpec, ...]:
        names = [hop.name for hop in v]
        if not names:
            raise ValueError("at least one hop")
        if len(set(names)) != len(names):
            raise ValueError(f"hop names must be unique: {names}")
        return v

    @model_validator(mode="after")
    def _links_name_replicas(self) -> Topology:
        check_links(self.links, {hop.name: hop.replicas for hop in self.hops}, self.hops[0].name)
        return self


# --- what every plan sends, injects, runs for and holds -----------------------------------
class Traffic(Section):
    organic_users: int = Field(4, ge=0, le=lim.MAX_USERS)
    organic_rate: float = Field(10.0, ge=0, le=lim.MAX_USER_RATE)  # per user, req/s
    drill_users: int = Field(1, ge=0, le=lim.MAX_USERS)
    drill_rate: float = Field(10.0, ge=0, le=lim.MAX_USER_RATE)  # per user, req/s
    timeout_s: float = Field(2.0, gt=0, le=lim.MAX_DEADLINE_S)
    #: the demo's method (a topology's load; a stack names its own in stack.edge.method)
    method: Literal["Call", "Write", "Stream", "Exchange"] = "Call"
    cancel_ms: float | None = Field(None, gt=0, le=lim.MAX_DEADLINE_S * 1000)  # drill users cancel after this
    max_inflight: int = Field(64, ge=1, le=lim.MAX_INFLIGHT)
    driver: Literal["aio", "locust"] = "aio"
    profile: str | None = None  # Locust profile name (loadtests/profiles/NAME.conf)
    #: Locust processes on this machine (driver locust): above 1, Locust's master with that many workers
    workers: int = Field(1, ge=1, le=lim.MAX_WORKERS)

    @model_validator(mode="after")
    def _offerable(self) -> Traffic:
        """All users together offer no more than the load's processes can send (harness.core.limits)."""
        offered = self.organic_users * self.organic_rate + self.drill_users * self.drill_rate
        processes = self.workers if self.driver == "locust" else 1
        if offered > lim.MAX_LOAD_RPS * processes:
            raise ValueError(
                f"users × rate offer {offered:g} calls/s in all; one load process offers at most "
                f"{lim.MAX_LOAD_RPS:g}" + (f" ({processes} Locust workers: {lim.MAX_LOAD_RPS * processes:g})"
                                          if processes > 1 else "")
            )  # fmt: skip
        return self


class Fault(Section):
    #: the `x-fault` directive (contracts §3); empty for plans whose fault is a probe (half-open)
    directive: str = ""
    ratio: int = Field(100, ge=0, le=100)
    target: str | None = None
    instances: int | None = Field(None, ge=0, le=100)
    tenant: str = h.DEFAULT_DRILL_TENANT
    scope: Literal["request", "attempt"] = "request"
    attempts: int | None = Field(None, ge=1, le=MAX_ATTEMPTS)
    #: a fault below the call: a toxic on one of the plan's links (plan.links), instead of a directive
    link: LinkFault | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Fault:
        if self.link is not None and self.directive:
            raise ValueError("a fault is a directive (on calls) or a link toxic (on connections), not both")
        return self

    @field_validator("directive")
    @classmethod
    def _parses(cls, v: str) -> str:
        if v == "":
            return v
        try:
            parse_directive(v)
        except DirectiveError as exc:
            raise ValueError(f"{v!r}: {explain(exc)}") from None
        return v

    @field_validator("tenant")
    @classmethod
    def _no_wildcard(cls, v: str) -> str:
        if not v or "*" in v:
            raise ValueError("a drill tenant is one name, no wildcard")
        return v

    def tagging(self) -> Tagging:
        return Tagging(
            tenant=self.tenant, directive=self.directive, ratio=self.ratio, target=self.target,
            instances=self.instances, scope=self.scope, attempts=self.attempts,
        )  # fmt: skip


class Phases(Section):
    warmup: float = Field(8.0, ge=0, le=lim.MAX_PHASE_S)
    fault: float = Field(15.0, gt=0, le=lim.MAX_PHASE_S)
    recovery: float = Field(15.0, ge=0, le=lim.MAX_PHASE_S)

    @property
    def total(self) -> float:
        return self.warmup + self.fault + self.recovery

    def at(self, t: float) -> str:
        if t < self.warmup:
            return "warmup"
        if t < self.warmup + self.fault:
            return "fault"
        if t < self.total:
            return "recovery"
        return "done"

    def start_of(self, phase: str) -> float:
        """Seconds from a trial's first second to where `phase` starts ("done": where the trial ends)."""
        return {"warmup": 0.0, "fault": self.warmup, "recovery": self.warmup + self.fault, "done": self.total}[phase]

    def entered(self, last: str | None, now: str) -> list[str]:
        """Every phase a trial entered after `last` (None: none yet) up to `now`, in order; a phase of no length
        is never entered. A clock read late (a starved loop's tick) still names each boundary it crossed."""
        order = ("warmup", "fault", "recovery", "done")
        crossed = order[order.index(last) + 1 if last else 0 : order.index(now) + 1]
        return [p for p in crossed if p == "done" or self.start_of(p) < self.start_of(order[order.index(p) + 1])]


class Slo(Section):
    """Service-level objective the drill holds the run against."""

    max_error_rate: float = Field(0.05, ge=0, le=1)
    #: p99 latency bound in seconds; None = error rate only.
    max_p99_s: float | None = Field(None, gt=0, le=lim.MAX_P99_S)
    hold_s: int = Field(3, ge=1, le=int(lim.MAX_PHASE_S))
    #: which traffic the SLO is measured on
    traffic: Literal["organic", "drill", "all"] = "all"
    #: seconds with fewer calls than this are unknown (neither good nor bad)
    min_calls: float = Field(3.0, ge=0, le=lim.MAX_LOAD_RPS)
    #: the error rate of second t is taken over the `window_s` seconds ending at t (1 = that second)
    window_s: int = Field(1, ge=1, le=int(lim.MAX_PHASE_S))
    #: a breach is detection (TTD) when it starts in the fault window or this many seconds after it;
    #: later it is a post-fault breach. None = hold_s + window_s.
    grace_s: float | None = Field(None, ge=0, le=lim.MAX_PHASE_S)


class Probe(Section):
    kind: Literal["half-open"] = "half-open"
    count: int = Field(100, ge=1, le=lim.MAX_PROBE_CONNECTIONS)
    timeout_s: float = Field(8.0, gt=0, le=lim.MAX_PHASE_S)
    preface: bool = True
