"""Link faults in a plan: the links a trial starts (`topology.links`, `stack.links`) and `fault.link`.

A link is `drill link`'s relay (harness.link) between a caller and one replica of a hop: the runner starts
it for every trial and the caller dials it instead of the replica, so a fault on the link acts below the
call, on every call of that connection, organic ones too. `fault.link` names the link and the toxic
(Toxiproxy's JSON: `toxic` is its type, `attributes`, `stream`, `toxicity`): set when the fault phase
starts and removed when it ends, every trial. The toxic is checked here by the link's own parser
(`harness.link.parse_toxic`), so a plan with a toxic `drill link` would refuse never starts.

`expect` is what the configuration under test should achieve (issue 48 §5): `detect_within_s` bounds the
time from the fault's start until the callers closed the connections the fault held (what keepalive
detection does: the link sees each close; docs/link-drills.md says how it is measured).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from harness.core import limits as lim
from harness.drills.plan.base import HOP_NAME, Section
from harness.link.toxics import ToxicError, parse_toxic

#: a link's name: a hop-like name (its series' `link` label)
LINK_NAME = r"^[a-z][a-z0-9-]*$"


class TopologyLink(Section):
    """A link the runner starts in front of replica `replica` of hop `hop`; the hop above dials it."""

    name: str = Field(pattern=LINK_NAME, max_length=64)
    hop: str = Field(pattern=HOP_NAME)
    #: which replica (0-based, as its instance id `HOP-N` says)
    replica: int = Field(0, ge=0, le=lim.MAX_REPLICAS - 1)


class StackLink(Section):
    """A link the runner starts for each trial on 127.0.0.1:`port`, relaying to `upstream` (one replica of `hop`);
    or, with `admin`, a `drill link` already running (a compose service, a sidecar) that the runner drives
    through its admin API (Toxiproxy's): `name` is the link's name there, and `upstream`/`port` are its own.

    The stack's caller must already dial `port` (or the running link) for that replica (its own configuration
    says so)."""

    name: str = Field(pattern=LINK_NAME, max_length=64)
    hop: str = Field(pattern=HOP_NAME)
    replica: int = Field(0, ge=0, le=lim.MAX_REPLICAS - 1)
    upstream: str | None = Field(None, pattern=r"^[^\s:]+:\d+$")
    port: int | None = Field(None, ge=1, le=lim.MAX_PORT)
    #: the running link's admin API, `http://HOST:PORT` (its `--admin-port`); the runner starts no link then
    admin: str | None = Field(None, pattern=r"^http://[^\s/:]+:\d+$")

    @model_validator(mode="after")
    def _started_or_running(self) -> StackLink:
        if self.admin is None and (self.upstream is None or self.port is None):
            raise ValueError(f"link {self.name!r}: give upstream and port (a link the runner starts), "
                             "or admin (a running link's API)")  # fmt: skip
        if self.admin is not None and (self.upstream is not None or self.port is not None):
            raise ValueError(f"link {self.name!r}: admin names a running link: its upstream and port are its own "
                             "(leave them out)")  # fmt: skip
        return self


class Expect(Section):
    """What the configuration under test should achieve against a link fault; the report says met or not."""

    #: seconds from the fault's start by which every connection the fault held was closed by its caller
    detect_within_s: float = Field(gt=0, le=lim.MAX_PHASE_S)


class LinkFault(Section):
    """A toxic on a named link, for the fault phase (Toxiproxy's toxic JSON, with the link it is set on)."""

    link: str = Field(pattern=LINK_NAME)
    #: the toxic's type: Toxiproxy's (`timeout`, `latency`, `reset_peer`, …) or an HTTP/2 one (docs/link.md)
    toxic: str
    attributes: dict[str, int | float | str] = Field(default_factory=dict)
    stream: Literal["upstream", "downstream"] = "downstream"
    #: the share of the link's connections it acts on: a seeded draw by connection order (the plan's seed)
    toxicity: float = Field(1.0, ge=0, le=1)
    expect: Expect | None = None

    @property
    def mode(self) -> str:
        """Where the toxic acts: `kernel` (a `timeout` with `mode: kernel`: nftables drops the packets) or `user
        space` (the relay)."""
        return parse_toxic(self.toxic_json()).mode

    def toxic_json(self) -> dict:
        """The toxic as Toxiproxy's JSON (what `drill link`'s API takes)."""
        return {"name": f"drill_{self.toxic}_{self.stream}", "type": self.toxic, "stream": self.stream,
                "toxicity": self.toxicity, "attributes": dict(self.attributes)}  # fmt: skip

    @model_validator(mode="after")
    def _toxic_parses(self) -> LinkFault:
        try:
            parse_toxic(self.toxic_json())
        except ToxicError as exc:
            raise ValueError(str(exc)) from None
        return self

    def describe(self) -> str:
        """`timeout {timeout: 0} downstream` (toxicity when below 1)."""
        attrs = ", ".join(f"{k}: {v}" for k, v in self.attributes.items())
        share = f", toxicity {self.toxicity:g}" if self.toxicity < 1 else ""
        return f"{self.toxic} {{{attrs}}} {self.stream}{share}"


def check_links(links: tuple[TopologyLink, ...] | tuple[StackLink, ...], hops: dict[str, int | None],
                edge: str | None) -> None:  # fmt: skip
    """Each link names a hop (not the edge, whose caller is the load) and one of its replicas; names unique.

    `hops`: hop name → its replica count (None: not known, a stack's)."""
    names = [link.name for link in links]
    if len(set(names)) != len(names):
        raise ValueError(f"link names must be unique: {names}")
    seen = set()
    for link in links:
        if link.hop not in hops:
            raise ValueError(f"link {link.name!r}: hop {link.hop!r} is not a hop ({list(hops)})")
        if link.hop == edge:
            raise ValueError(f"link {link.name!r}: {link.hop!r} is the edge (its caller is the load, not a hop)")
        count = hops[link.hop]
        if count is not None and link.replica >= count:
            raise ValueError(f"link {link.name!r}: {link.hop!r} has {count} replica(s), no replica {link.replica}")
        if (link.hop, link.replica) in seen:
            raise ValueError(f"link {link.name!r}: replica {link.replica} of {link.hop!r} already has a link")
        seen.add((link.hop, link.replica))
