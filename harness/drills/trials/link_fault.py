"""The runner's hook for a plan's link fault: the toxic set as the fault phase starts, removed as it ends.

The trial's links belong to its target (`stack.links.TrialLinks`, started with the topology or before the
stack's switch); this says when, from the phases a tick entered (a late tick that stepped over the whole
fault phase sets and removes it at once: the trial then says the fault held no connection). After a guard's
trip the fault is never set again (the trip's emergency stop removed it, one way). `describe` is the dry
run's word on what the fault will touch.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.drills.plan.model import Plan
from harness.drills.stack.targets import DrillTarget
from harness.link import preview

#: connections the dry run's preview of a seeded draw shows
PREVIEW = 16


def link_fault(target: DrillTarget, entered: Sequence[str], *, tripped: bool) -> None:
    """Set or remove the trial's link fault for the phases just `entered`, in order."""
    links = getattr(target, "links", None)
    if links is None:
        return
    for phase in entered:
        if phase == "fault" and not tripped:
            links.fault_on()
        elif phase in ("recovery", "done"):
            links.fault_off()


#: What each mode tests, in the dry run's words
USER = "a relay in user space: TCP still ACKs, so HTTP/2 keepalive is tested, not TCP_USER_TIMEOUT"
KERNEL = "kernel mode: nftables drops the connections' packets, so TCP gets no ACKs and TCP_USER_TIMEOUT is tested too"


def describe(plan: Plan) -> str | None:
    """The dry run's `fault` line for a link fault (None for a directive): what it touches and how."""
    f = plan.fault.link
    if f is None:
        return None
    spec = next(link for link in plan.links if link.name == f.link)
    if plan.stack is None:
        count = next(h.replicas for h in plan.hops if h.name == spec.hop)
        where = f"replica {spec.replica} of {count} of {spec.hop} behind link {spec.name}"
    else:
        where = (f"{spec.hop} replica {spec.replica} behind link {spec.name}, driven through {spec.admin}" if spec.admin
                 else f"{spec.hop} replica {spec.replica} ({spec.upstream}) behind link {spec.name} on "
                 f"127.0.0.1:{spec.port}")  # fmt: skip
    if f.toxicity >= 1:
        share = "every call on its connections, organic too"
    else:
        drawn = preview(plan.seed, f.toxic_json()["name"], f.toxicity, PREVIEW)
        share = (f"the connections a seeded draw picks (toxicity {f.toxicity:g}; its first {PREVIEW} by order: "
                 f"{drawn}), every call on them, organic too")  # fmt: skip
    expect = f"; expect: detect within {f.expect.detect_within_s:g} s" if f.expect else ""
    return (f"link toxic {f.describe()}, set at each trial's fault start and removed at its end, on {where}: "
            f"{share} ({KERNEL if f.mode == 'kernel' else USER})"
            f"{expect}")  # fmt: skip
