"""What the runner does each second of a running trial, after the scraper's reading of that second.

In order: stop at once if the run was interrupted or a service crashed; let the guards look (first: a
trip's stop does not wait for the live view); at each phase boundary, post its annotation (also for a
boundary a late tick stepped over), set or remove a link fault (`link_fault`), start the probe when the
fault starts, and set the phase gauges (`drill_phase`, `drill_fault_active`: the dashboards' annotation
source); then hand the live view its sample.
"""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import time
from collections.abc import Callable

from harness.core import metrics as m
from harness.core.errors import RunFailed
from harness.drills.load.schedule import LoadDriver
from harness.drills.plan.model import Plan, Variant
from harness.drills.readings.scraper import Scraper
from harness.drills.stack.targets import DrillTarget
from harness.drills.trials.link_fault import link_fault
from harness.drills.trials.probe import start_probe
from harness.drills.trials.trip import TrialGuard


class PhaseGauges:
    """The plan's `drill_phase{plan,phase}` and `drill_fault_active{plan}` gauges: which phase a trial is in and
    whether its fault is on (0 everywhere between trials)."""

    def __init__(self, plan: str) -> None:
        self.phases = {p: m.PHASE.labels(plan, p) for p in ("warmup", "fault", "recovery")}
        self.fault = m.FAULT_ACTIVE.labels(plan)

    def enter(self, phase: str, fault_on: bool) -> None:
        for p, g in self.phases.items():
            g.set(1 if p == phase else 0)
        self.fault.set(1 if fault_on else 0)

    def fault_off(self) -> None:
        """A guard's trip: the fault is off from now on, whatever the phase."""
        self.fault.set(0)

    def clear(self) -> None:
        for g in self.phases.values():
            g.set(0)
        self.fault.set(0)


class TrialTick:
    """The runner's per-second callback for one trial (`Scraper.run`'s `tick`); `probe` is the probe it started."""

    def __init__(
        self, plan: Plan, variant: Variant, *, index: int, trial: int, start_unix: float, scraper: Scraper,
        load: LoadDriver, target: DrillTarget, guard: TrialGuard | None, gauges: PhaseGauges,
        workdir: pathlib.Path, interrupted: Callable[[], str | None], annotate: Callable[..., None],
        on_sample: Callable[[dict], None] | None, log: Callable[[str], None],
    ) -> None:  # fmt: skip
        self.plan, self.variant, self.index, self.trial = plan, variant, index, trial
        self.start_unix, self.scraper, self.load, self.target = start_unix, scraper, load, target
        self.guard, self.gauges, self.workdir = guard, gauges, workdir
        self.interrupted, self.annotate, self.on_sample, self.log = interrupted, annotate, on_sample, log
        self.phase: str | None = None
        self.phase_before: str | None = None
        self.probe: subprocess.Popen | None = None

    def __call__(self) -> None:
        why = self.interrupted()
        if why:  # a cancel that something swallowed still stops the drill within a tick
            raise asyncio.CancelledError(why)
        crashed = self.target.crashed()
        if crashed:
            raise RunFailed(f"service crashed during the drill: {', '.join(crashed)}")
        if self.guard is not None:  # first: a trip's stop does not wait for the live view
            self.guard.check(self.scraper.samples)
        elapsed = time.time() - self.start_unix
        phase = self.plan.phases.at(elapsed)
        if phase != self.phase:
            self._enter(phase)
        if self.on_sample is not None:
            self.on_sample(self._sample(phase, elapsed))

    def _enter(self, phase: str) -> None:
        ph, label, v = self.plan.phases, self.variant.name, self.variant
        # each boundary at its own time, also those a late tick stepped over (once in CI, a trial's first tick
        # came after its 2-s warm-up: the warm-up's annotation was never posted)
        self.phase_before = self.phase
        for entered in ph.entered(self.phase, phase):
            self.annotate("event", f"{label} trial {self.trial}: {entered}", phase=entered,
                          at_s=self.start_unix + ph.start_of(entered), tags=(f"config:{label}",))  # fmt: skip
        self.phase = phase
        link_fault(self.target, ph.entered(self.phase_before, phase), tripped=bool(self.guard and self.guard.tripped))
        if phase == "fault" and v.probe and self.probe is None:
            self.probe = start_probe(v.probe, self.target.edge()[0], self.workdir, self.log)
        self.gauges.enter(phase, fault_on=phase == "fault" and not (self.guard and self.guard.tripped))

    def _sample(self, phase: str, elapsed: float) -> dict:
        """What the live view shows of this second (trials.live)."""
        plan, label = self.plan, self.variant.name
        return {
            "config": label if plan.trials == 1 else f"{label} #{self.trial}/{plan.trials}",
            "index": self.index, "count": len(plan.variants), "phase": phase,
            "elapsed": elapsed, "total": plan.phases.total, "samples": self.scraper.samples,
            "hops": plan.hop_names, "stack": plan.stack, "planned_rps": self.load.planned_rps(),
            "timeout_s": self.variant.traffic.timeout_s,
            "guard": self.guard.view() if self.guard else None,
        }  # fmt: skip
