"""The drill timeline as one Locust process sees it: current phase and whether the fault is on.

`PhaseState` is the single place drill users ask "send the directive now?" and
the single writer of `drill_phase{plan,phase}` and `drill_fault_active{plan}`.
The shape (on the master or a standalone process) decides the phase; workers
receive it by message. No locust or gevent import here.
"""

from __future__ import annotations

import threading

from harness.core import metrics as m
from loadtests.options import DONE_PHASE, STEADY_FAULT_PHASE, STEADY_PHASE, DrillOptions


class PhaseState:
    """Current phase of this process; exported as gauges when `export` is on."""

    def __init__(self) -> None:
        self.plan = "adhoc"
        self.phase = STEADY_PHASE
        self.fault_active = False
        self.export = False
        #: the unix second the phases start at (set by the shape, sent to workers with the first phase)
        self.start_unix: float | None = None
        self._phases: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def reset(self, opts: DrillOptions, *, export: bool) -> None:
        """Initial state from the profile: a shapeless run sends its directive from the first second."""
        self.plan = opts.plan
        self.export = export
        self._phases = tuple(p.name for p in opts.phases)
        if opts.phases:
            first = opts.phases[0]
            self.set(first.name, first.fault)
        elif opts.directive:
            self.set(STEADY_FAULT_PHASE, True)
        else:
            self.set(STEADY_PHASE, False)

    def set(self, phase: str, fault_active: bool) -> None:
        with self._lock:
            self.phase = phase
            self.fault_active = bool(fault_active)
            if not self.export:
                return
            names = set(self._phases) | {phase} if self._phases else {phase, STEADY_PHASE, STEADY_FAULT_PHASE}
            for name in names:
                m.PHASE.labels(self.plan, name).set(1 if name == phase else 0)
            m.FAULT_ACTIVE.labels(self.plan).set(1 if fault_active else 0)

    def finish(self) -> None:
        self.set(DONE_PHASE, False)


#: The one state per Locust process.
STATE = PhaseState()


def mark_trial(opts: DrillOptions, start_unix: float) -> None:
    """Export when each phase of this trial starts (and `done`), as the drill runner's own load does."""
    starts: dict[str, float] = {}
    at = start_unix
    for phase in opts.phases:
        starts.setdefault(phase.name, at)
        at += phase.seconds
    starts["done"] = at
    for name, when in starts.items():
        m.TRIAL_PHASE_START.labels(opts.plan, opts.config, str(opts.trial), name).set(when)
