"""What a guard's trip does to a running trial (docs/drills.md, "Safeguards").

`TrialGuard` is one trial's guards, driven by the runner: `check(samples)` each tick
(the per-second conditions, `harness.drills.trials.guard.GuardWatch`), a task asking the
`prometheus` conditions once a second, and on the first trip, in the same tick:

1. the load stops tagging and cancels its tagged calls in flight (the runner's own load;
   a Locust or command load tags in its own processes: not reachable);
2. the services' one-way emergency stop where the runner reaches them
   (`DrillTarget.emergency_stop`: SIGUSR1 to the local hops, a stack's command), as a task;
   when neither it nor the load's tagging is reachable, the load itself stops;
3. the trip is logged, posted as a Grafana annotation and kept as the trial's record
   (`finish()`): `{name, kind, tripped_at_s, value, limit, text, at_unix, actions}`.
"""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import Callable, Sequence

from harness.drills.plan.guards import PrometheusGuard
from harness.drills.plan.model import Plan
from harness.drills.trials.guard import GuardWatch, PrometheusPoll, Trip


class TrialGuard:
    """The guards of one trial: checked each tick and polled each second; a trip stops the fault at once."""

    def __init__(
        self, plan: Plan, *, label: str, trial: int, load, target, workdir: pathlib.Path, start_unix: float,
        start_t: float, prometheus: Sequence[tuple[PrometheusGuard, str]], log: Callable[[str], None],
        annotate: Callable[..., None], on_trip: Callable[[], None] = lambda: None,
    ) -> None:  # fmt: skip
        self.label, self.trial, self.load, self.target, self.workdir = label, trial, load, target, workdir
        self.log, self.annotate, self.on_trip = log, annotate, on_trip
        self.watch = GuardWatch(plan.guard, plan.slo, start_t)
        self.poll = PrometheusPoll(prometheus, lambda: round(time.time() - start_unix, 3)) if prometheus else None
        #: the trip (once one happened) and what the runner did about it
        self.record: dict = {}
        self._stopping: asyncio.Future | None = None
        self._poll_task: asyncio.Task | None = None

    @property
    def tripped(self) -> bool:
        return bool(self.record)

    def start(self) -> None:
        """Start asking the `prometheus` conditions (each second, until `finish`)."""
        if self.poll is not None:
            self._poll_task = asyncio.ensure_future(self.poll.run(self.trip))

    def check(self, samples) -> None:
        """One tick: the per-second conditions against the samples so far."""
        if not self.tripped:
            found = self.watch.check(samples)
            if found is not None:
                self.trip(found)

    def trip(self, found: Trip) -> None:
        """A guard held: the directive off now (load and services), then mark, log and annotate."""
        if self.tripped:
            return
        cancelled = self.load.stop_tagging()
        self.record.update(found.to_json(), at_unix=round(time.time(), 3))  # when the directive stopped
        self.on_trip()
        if cancelled is None:
            said = "not reachable (its own processes tag calls)"
        else:
            said = "no longer tags calls" + (f"; cancelled {cancelled} tagged calls in flight" if cancelled else "")
        self.record["actions"] = {"load": said}
        self._stopping = asyncio.ensure_future(self._stop_injection(load_unreached=cancelled is None))
        self.log(f"[{self.label}] trial {self.trial}: guard {found.name} tripped at {found.tripped_at_s:g} s: "
                 f"{found.text}; the fault is stopped")  # fmt: skip
        self.annotate("event", f"{self.label} trial {self.trial}: guard {found.name} tripped: {found.text}",
                      phase="guard", at_s=time.time(), tags=(f"config:{self.label}", "guard"))  # fmt: skip

    async def _stop_injection(self, load_unreached: bool) -> dict:
        said = await self.target.emergency_stop(self.workdir, self.trial)
        out = {"services": said or "not reachable (no emergency stop command for this stack)"}
        if said is None and load_unreached:  # nothing else reaches the directive: end the load
            await self.load.stop()
            out["load"] = "stopped (nothing else reaches its directive)"
        return out

    def view(self) -> dict:
        """For the live view: each condition's value now, and the trip once one happened."""
        return {"watch": dict(self.watch.now), "tripped": dict(self.record) or None}

    async def finish(self) -> dict | None:
        """Stop polling; wait for the emergency stop (bounded by its own timeout); the trial's record, or None."""
        if self._poll_task is not None:
            self._poll_task.cancel()
        if self._stopping is not None:
            done = (await asyncio.gather(self._stopping, return_exceptions=True))[0]
            self.record["actions"].update(done if isinstance(done, dict) else {"services": f"failed: {done!r}"})
            self._stopping = None
        return dict(self.record) or None
