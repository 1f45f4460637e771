"""The plan as a whole: `PlanFile` (what a user writes) and `Plan` (what runs, every variant resolved).

A plan file (YAML) is checked against `PlanFile` once, before anything starts:
unknown keys, wrong types and unknown configuration names are refused with the
key path (`traffic.drill_rate: Input should be a valid number`). The JSON Schema
editors can use is generated from the same models
(`harness/drills/plan.schema.json`). Everything that runs a drill (topology,
load, scraper, analysis, report) takes these types and never re-reads YAML.
The sections live beside this module (`sections`, `stack`, `guards`); the types
of what a run produces in `outputs`.
"""

from __future__ import annotations

import pathlib

from pydantic import Field, model_validator

from harness.core import limits as lim
from harness.drills.plan.guards import BurnRateGuard, ErrorRateGuard, Guard
from harness.drills.plan.links import TopologyLink
from harness.drills.plan.sections import Fault, HopSpec, Phases, Probe, Section, Slo, Topology, Traffic
from harness.drills.plan.stack import Stack


class VariantSpec(Section):
    """A run that differs from the plan by more than its configuration; merged over the plan."""

    name: str | None = None
    config: str | None = None
    fault: dict = Field(default_factory=dict)
    traffic: dict = Field(default_factory=dict)
    hops: dict[str, dict] = Field(default_factory=dict)
    probe: dict | None = None


class PlanFile(Section):
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
        links = [link.name for link in (self.topology or self.stack).links]
        if self.fault.link is not None and self.fault.link.link not in links:
            where = "topology.links" if self.topology else "stack.links"
            raise ValueError(f"fault.link.link {self.fault.link.link!r} is not a link ({where}: {links})")
        return self


class Variant(Section):
    """One run of a plan: a name (the `config` label), the resilience config, and what differs."""

    name: str
    #: a shipped configuration name, an absolute path to a YAML file, or None (no resilience layer)
    config: str | None
    fault: Fault
    traffic: Traffic
    hops: tuple[HopSpec, ...]
    probe: Probe | None = None


class Plan(Section):
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
    #: the links the runner starts in front of replicas of its topology (a stack's are `stack.links`)
    topology_links: tuple[TopologyLink, ...] = ()

    @property
    def hop_names(self) -> list[str]:
        return [hop.name for hop in self.stack.hops] if self.stack else [hop.name for hop in self.hops]

    @property
    def links(self) -> tuple:
        """Every link a trial starts: the topology's, or the stack's (`StackLink`s)."""
        return self.stack.links if self.stack else self.topology_links

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
            "links": [link.model_dump() for link in self.links],
        }
