"""The runner's hook for a plan's link fault: the toxic set as the fault phase starts, removed as it ends.

The trial's links belong to its target (`stack.links.TrialLinks`, started with the topology or before the
stack's switch); this says when, from the phases a tick entered (a late tick that stepped over the whole
fault phase sets and removes it at once: the trial then says the fault held no connection). After a guard's
trip the fault is never set again (the trip's emergency stop removed it, one way).
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.drills.stack.targets import DrillTarget


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
