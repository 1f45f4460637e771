"""The drill model: one typed, validated form of a plan and of what a run produces.

A plan file (YAML) is checked against `PlanFile` once, before anything starts:
unknown keys, wrong types and unknown configuration names are refused with the
key path (`traffic.drill_rate: Input should be a valid number`). The JSON Schema
editors can use is generated from the same models (
`harness/drills/plan.schema.json`). Everything that runs a drill (topology,
load, scraper, analysis, report) takes these types and never re-reads YAML.

Per-second series are keyed by `SeriesKey`, a small record, not a joined string;
`series.json` stores each key as an object (see docs/drills.md).
"""

from __future__ import annotations

import pathlib
from typing import Annotated, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.core import headers as h
from harness.core import limits as lim
from harness.core.faults import MAX_ATTEMPTS, DirectiveError, parse_directive
from harness.core.reasons import explain
from harness.core.status import STATUS_NAMES
from harness.interceptors import Tagging

DEFAULT_HOPS = ("gateway", "order", "account", "ledger")
#: a hop's name: the `service` label of its series and the `x-fault-target` that names it
HOP_NAME = r"^[a-z][a-z0-9-]*$"


class _Strict(BaseModel):
    # every number finite (no .inf or .nan) and within a bound of harness.core.limits, which says why
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# --- the plan ---------------------------------------------------------------------------
class HopSpec(_Strict):
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


class Topology(_Strict):
    hops: tuple[HopSpec, ...] = tuple(HopSpec(name=n) for n in DEFAULT_HOPS)
    #: downstream timeout when no resilience configuration is named
    timeout_s: float | None = Field(None, gt=0, le=lim.MAX_DEADLINE_S)

    @field_validator("hops")
    @classmethod
    def _unique(cls, v: tuple[HopSpec, ...]) -> tuple[HopSpec, ...]:
        names = [hop.name for hop in v]
        if not names:
            raise ValueError("at least one hop")
        if len(set(names)) != len(names):
            raise ValueError(f"hop names must be unique: {names}")
        return v


# --- a stack: services the runner did not start (contracts §13) -----------------------------------
class EdgeSpec(_Strict):
    """What the load calls: an address, a full method of any kind and a JSON request typed like ghz/grpcurl
    take it (for a client-streaming or bidi method, the stream's messages in order)."""

    #: HOST:PORT the load calls (a port-forward for a cluster)
    address: str = Field(pattern=r"^[^\s:]+:\d+$")
    #: full method name, `pkg.Service/Method`
    method: str = Field(pattern=r"^/?[A-Za-z_][\w.]*/[A-Za-z_]\w*$")
    #: the request as JSON (protobuf's JSON mapping); {} = the default message. For a client-streaming or bidi
    #: method a list of messages, sent in order (an object alone is a stream of one, [] a stream of none)
    request: dict | list[dict] = Field(default_factory=dict)
    #: messages/s within a client stream: message i leaves i / rate s after the call starts (None: each as
    #: soon as the stream takes it). Only for a client-streaming or bidi method.
    message_rate: float | None = Field(None, gt=0, le=lim.MAX_MESSAGE_RATE)
    #: where the request's type comes from: a .proto file (needs grpcio-tools), a descriptor set
    #: (`protoc --include_imports --descriptor_set_out=FILE`), or the server's reflection (default)
    proto: str | None = None
    descriptor_set: str | None = None
    #: import path for `proto` (default: the .proto's folder)
    proto_path: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_type_source(self) -> EdgeSpec:
        if self.proto and self.descriptor_set:
            raise ValueError("give proto or descriptor_set, not both (neither = server reflection)")
        return self


class StackHop(_Strict):
    """One hop of a running stack, in chain order: where its series come from."""

    name: str = Field(min_length=1, pattern=HOP_NAME)
    #: its replicas' /metrics URLs, scraped by the runner each second
    metrics: list[str] = Field(default_factory=list)
    #: or a PromQL label selector read from `stack.prometheus` after each trial, e.g. {namespace="d", app="x"}
    selector: str | None = Field(None, pattern=r"^\{.*\}$")

    @model_validator(mode="after")
    def _one_source(self) -> StackHop:
        if bool(self.metrics) == bool(self.selector):
            raise ValueError(f"hop {self.name!r}: give metrics (URLs) or selector (read from stack.prometheus)")
        for url in self.metrics:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"hop {self.name!r}: {url!r} is not an http:// URL")
        return self


class ReadyProbe(_Strict):
    """The edge serves a configuration once its gRPC health check passed `checks` times in a row."""

    checks: int = Field(3, ge=1, le=100)
    timeout_s: float = Field(60.0, gt=0, le=lim.MAX_WAIT_S)
    interval_s: float = Field(1.0, gt=0, le=60)


class StackConfig(_Strict):
    """One configuration of a stack and how to switch the stack to it."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    #: shell command the runner runs (with a timeout) before each trial of this configuration; it returns
    #: once the stack serves it (e.g. `kubectl apply -k … && kubectl rollout status …`). None: nothing to switch.
    switch: str | None = None
    switch_timeout_s: float = Field(300.0, gt=0, le=lim.MAX_WAIT_S)
    ready: ReadyProbe = ReadyProbe()


class AuditSource(_Strict):
    """Where the stack's audit lines can be read after a trial: the hit set the services themselves report."""

    #: globs of log files on this machine holding the services' audit lines
    files: list[str] = Field(default_factory=list)
    #: or a command that prints them (e.g. `kubectl -n drill logs -l app=ledger --since=10m`)
    command: str | None = None
    timeout_s: float = Field(60.0, gt=0, le=600)

    @model_validator(mode="after")
    def _one(self) -> AuditSource:
        if bool(self.files) == bool(self.command):
            raise ValueError("audit: give files (globs) or command")
        return self


class ExternalLoad(_Strict):
    """A Locust (or any load speaking the `--drill-*` options) the runner starts per trial with a command.

    The command gets the trial in `LOCUST_DRILL_*` variables (what Locust reads for each `--drill-*` option:
    plan, config, trial, phases, directive, ratio, target, tenant, seed, users, weights, rates, timeout) and
    `DRILL_CONFIG`/`DRILL_TRIAL`; it may run the load itself (until its phases end) or start it elsewhere
    (`kubectl apply -k deploy/k8s/load`) and return. Its client counters are read from `metrics` (/metrics
    URLs of its master and workers, scraped each second) or `selector` (from `stack.prometheus`).
    """

    command: str
    stop: str | None = None
    metrics: list[str] = Field(default_factory=list)
    selector: str | None = Field(None, pattern=r"^\{.*\}$")
    #: how long its timeline may take to start (image pulls, worker joins) before the trial fails
    start_timeout_s: float = Field(120.0, gt=0, le=lim.MAX_WAIT_S)

    @model_validator(mode="after")
    def _one_source(self) -> ExternalLoad:
        if bool(self.metrics) == bool(self.selector):
            raise ValueError("load: give metrics (its /metrics URLs) or selector (read from stack.prometheus)")
        return self


class Stack(_Strict):
    """Services the runner did not start: the edge, the hops' series, the configurations' switches."""

    edge: EdgeSpec
    hops: tuple[StackHop, ...] = Field(min_length=1)
    #: Prometheus base URL for hops given by `selector`
    prometheus: str | None = Field(None, pattern=r"^https?://")
    #: the services' audit lines (their own word on which requests they hit); without it, the hits are the
    #: calls answered with the `x-drill-fault` marker (set by the hop that injects, when that is the edge)
    audit: AuditSource | None = None
    #: one entry per configuration; a stack without switch commands runs one, named by the user
    configs: tuple[StackConfig, ...] = Field(default_factory=lambda: (StackConfig(name="stack"),), min_length=1)
    #: a load started per trial by a command (default: the runner's own aio load to the edge)
    load: ExternalLoad | None = None
    #: shell command that trips the services' one-way emergency stop when a guard trips (e.g.
    #: `docker compose -f compose/docker-compose.yml kill -s SIGUSR1 gateway order account ledger`); the
    #: services then inject nothing until they restart. None: only the load's directive is stopped
    emergency_stop: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Stack:
        names = [h.name for h in self.hops]
        if len(set(names)) != len(names):
            raise ValueError(f"hop names must be unique: {names}")
        configs = [c.name for c in self.configs]
        if len(set(configs)) != len(configs):
            raise ValueError(f"configuration names must be unique: {configs}")
        if (any(h.selector for h in self.hops) or (self.load and self.load.selector)) and not self.prometheus:
            raise ValueError("a selector (hops or load) needs stack.prometheus (the Prometheus to read it from)")
        return self


# --- guards: stop conditions watched while a trial runs (docs/drills.md, "Safeguards") -----------
_GUARD_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class ErrorRateGuard(_Strict):
    """Trip when `traffic`'s error rate is above `above` in `for_s` one-second samples in a row."""

    kind: Literal["error_rate"]
    name: str | None = Field(None, pattern=_GUARD_NAME)
    above: float = Field(ge=0, lt=1)
    for_s: int = Field(3, ge=1, le=3600)
    traffic: Literal["organic", "drill", "all"] = "organic"


class BurnRateGuard(_Strict):
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


class PrometheusGuard(_Strict):
    """Trip when a PromQL expression returns anything (an alert firing, a latency above a bound)."""

    kind: Literal["prometheus"]
    name: str | None = Field(None, pattern=_GUARD_NAME)
    expr: str = Field(min_length=1, max_length=4000)
    #: the Prometheus to ask (default: stack.prometheus, else the run's --prometheus)
    url: str | None = Field(None, pattern=r"^https?://")
    #: trip when the Prometheus has not answered for this many seconds in a row (a guard that cannot see
    #: stops the drill); None: never
    unreachable_s: int | None = Field(5, ge=1, le=3600)


class WallClockGuard(_Strict):
    """Trip once a trial has run `after_s` seconds (from its first second): no trial acts on the stack longer."""

    kind: Literal["wall_clock"]
    name: str | None = Field(None, pattern=_GUARD_NAME)
    after_s: float = Field(gt=0, le=86400)


GuardCondition = Annotated[
    ErrorRateGuard | BurnRateGuard | PrometheusGuard | WallClockGuard, Field(discriminator="kind")
]


class Guard(_Strict):
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


class Traffic(_Strict):
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


class Fault(_Strict):
    #: the `x-fault` directive (contracts §3); empty for plans whose fault is a probe (half-open)
    directive: str = ""
    ratio: int = Field(100, ge=0, le=100)
    target: str | None = None
    instances: int | None = Field(None, ge=0, le=100)
    tenant: str = h.DEFAULT_DRILL_TENANT
    scope: Literal["request", "attempt"] = "request"
    attempts: int | None = Field(None, ge=1, le=MAX_ATTEMPTS)

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


class Phases(_Strict):
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


class Slo(_Strict):
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


class Probe(_Strict):
    kind: Literal["half-open"] = "half-open"
    count: int = Field(100, ge=1, le=lim.MAX_PROBE_CONNECTIONS)
    timeout_s: float = Field(8.0, gt=0, le=lim.MAX_PHASE_S)
    preface: bool = True


class VariantSpec(_Strict):
    """A run that differs from the plan by more than its configuration; merged over the plan."""

    name: str | None = None
    config: str | None = None
    fault: dict = Field(default_factory=dict)
    traffic: dict = Field(default_factory=dict)
    hops: dict[str, dict] = Field(default_factory=dict)
    probe: dict | None = None


class PlanFile(_Strict):
    """The YAML a user writes (contracts §10). `quick` is a partial plan merged over it by `--quick`."""

    name: str | None = None
    description: str = ""
    seed: int = Field(42, ge=lim.MIN_SEED, le=lim.MAX_SEED)
    #: the chain the runner starts itself (demo hops), or `stack`: services already running
    topology: Topology | None = None
    stack: Stack | None = None
    traffic: Traffic = Traffic()
    fault: Fault = Fault()
    phases: Phases = Phases()
    slo: Slo = Slo()
    configs: list[str | None] = Field(default_factory=lambda: [None])
    #: trials per configuration, run interleaved (A B C A B C …), all under the same seed
    trials: int = Field(1, ge=1, le=lim.MAX_TRIALS)
    variants: list[VariantSpec] = Field(default_factory=list)
    probe: Probe | None = None
    #: stop conditions watched while each trial runs (None: none)
    guard: Guard | None = None
    quick: dict | None = None

    @model_validator(mode="after")
    def _guards_can_see(self) -> PlanFile:
        for g in self.guard.stop_when if self.guard else ():
            name = g.name or g.kind
            if isinstance(g, BurnRateGuard) and self.slo.max_error_rate <= 0:
                raise ValueError(f"guard {name!r}: a burn rate needs an error budget (slo.max_error_rate > 0)")
            live = isinstance(g, ErrorRateGuard | BurnRateGuard)
            if live and self.stack is not None and self.stack.load is not None and self.stack.load.selector:
                raise ValueError(
                    f"guard {name!r}: the edge's calls are read from Prometheus after each trial (stack.load."
                    "selector), so they cannot be watched while it runs; give the load's metrics URLs or use a "
                    "prometheus guard"
                )
        return self

    @model_validator(mode="after")
    def _target_is_a_hop(self) -> PlanFile:
        if (self.topology is None) == (self.stack is None):
            raise ValueError(
                "a plan needs a topology (hops the runner starts) or a stack (services already running), "
                "not both" if self.topology and self.stack else
                "a plan needs a topology (hops the runner starts) or a stack (services already running)"
            )  # fmt: skip
        if self.stack is not None:
            if self.variants or self.configs != [None]:
                raise ValueError("a stack names its configurations in stack.configs (not configs or variants)")
            if self.probe is not None:
                raise ValueError("probe: the half-open probe is for topologies the runner starts")
        names = [hop.name for hop in (self.topology or self.stack).hops]
        if self.fault.target and self.fault.target not in names:
            raise ValueError(f"fault.target {self.fault.target!r} is not a hop ({names})")
        return self


class Variant(_Strict):
    """One run of a plan: a name (the `config` label), the resilience config, and what differs."""

    name: str
    #: a shipped configuration name, an absolute path to a YAML file, or None (no resilience layer)
    config: str | None
    fault: Fault
    traffic: Traffic
    hops: tuple[HopSpec, ...]
    probe: Probe | None = None


class Plan(_Strict):
    """A validated plan, ready to run: every variant resolved."""

    name: str
    seed: int
    hops: tuple[HopSpec, ...]
    timeout_s: float | None
    traffic: Traffic
    fault: Fault
    phases: Phases
    slo: Slo
    variants: tuple[Variant, ...]
    trials: int = 1
    description: str = ""
    probe: Probe | None = None
    source: str = ""
    #: services already running (None: the runner starts `hops` itself)
    stack: Stack | None = None
    #: stop conditions watched while each trial runs (None: none)
    guard: Guard | None = None

    @property
    def hop_names(self) -> list[str]:
        return [hop.name for hop in self.stack.hops] if self.stack else [hop.name for hop in self.hops]

    def to_dict(self) -> dict:
        """The plan as results.json's `plan_spec` carries it."""
        return {
            "name": self.name,
            "seed": self.seed,
            "description": self.description,
            "hops": [hop.model_dump() for hop in self.hops] if not self.stack else [h.name for h in self.stack.hops],
            "traffic": self.traffic.model_dump(),
            "fault": self.fault.model_dump(),
            "phases": self.phases.model_dump(),
            "slo": self.slo.model_dump(),
            "configs": [v.config and pathlib.Path(v.config).name or "plain" for v in self.variants],
            "variants": [v.name for v in self.variants],
            "trials": self.trials,
            "probe": self.probe.model_dump() if self.probe else None,
            "stack": self.stack.model_dump() if self.stack else None,
            "guard": self.guard.model_dump() if self.guard else None,
        }


# --- per-second series ------------------------------------------------------------------
SeriesKind = Literal["calls", "lat", "srv", "gap", "gapsum", "hits", "retry", "fds", "breaker", "tcp", "active"]


class SeriesKey(NamedTuple):
    """What one per-second series measures. Unused fields are empty strings.

    - `calls` edge client calls by traffic, status, mode (counter)
    - `lat` edge client latency bucket by traffic, mode, le (counter)
    - `started` edge client calls started by traffic, filed under the second they started (counter)
    - `srv` server calls per hop, shed calls included (counter)
    - `gap` / `gapsum` deadline-gap observations / seconds per hop (counter)
    - `hits`, `retry` per hop (counter); `fds` open fds per hop (gauge, summed over replicas)
    - `breaker` worst breaker state of a hop (gauge, max); `tcp` connections by state (gauge)
    - `active` the load driver's drill_fault_active (gauge, max)
    """

    kind: str
    service: str = ""
    traffic: str = ""
    status: str = ""
    mode: str = ""
    le: str = ""

    @property
    def is_gauge(self) -> bool:
        return self.kind in _GAUGES

    @property
    def takes_max(self) -> bool:
        return self.kind in _MAXED

    def to_json(self) -> dict[str, str]:
        return {f: v for f, v in zip(self._fields, self, strict=True) if v}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> SeriesKey:
        return cls(**data)


_GAUGES = frozenset({"fds", "breaker", "tcp", "active"})
_MAXED = frozenset({"breaker", "active"})


# --- results ----------------------------------------------------------------------------
class Results(BaseModel):
    """results.json: the plan's identity, per-configuration numbers, ranking and verdict.

    Built in one place (`harness.drills.results.assemble`) by `drill run` and
    `drill analyze` alike; `configs[NAME]` holds `harness.drills.analysis.analyze_run`'s
    numbers (docs/drills.md lists them).
    """

    model_config = ConfigDict(extra="forbid")

    plan: str | None
    seed: int | None
    fault: dict
    slo: dict
    hops: list[str]
    configs: dict[str, dict]
    ranking: list[str]
    #: `harness.drills.stats.verdict`: {text, winner, conclusive, trials, comparisons, ...}
    verdict: dict
    finished_at: str
    notes: list[str] = Field(default_factory=list)
    phases: dict | None = None
    probe: dict | None = None
    started_at: str | None = None
    duration_s: float | None = None
    plan_spec: dict | None = None
    source: dict | None = None
    prometheus: dict | None = None
    #: the run stopped here: {config, trial, error}; configs hold only the trials that finished before
    failed: dict | None = None
