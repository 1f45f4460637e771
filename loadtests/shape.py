"""`DrillShape`: the load shape that runs a profile's drill phases (warm-up, fault, recovery).

With `--drill-phases` set, it holds `--drill-users` users for the sum of the
phase durations and publishes each phase at its boundary (a timeline greenlet,
not the 1 s shape tick): locally by setting `PhaseState`, to workers by the
`drill_phase` message. The timeline starts on the next whole unix second and
exports every phase's start time (`drill_trial_phase_start_seconds`, the drill
runner's convention), so a reader finds the trial and its exact fault window.
With `--drill-phases` empty it is inert: it reads Locust's own `-u/-r/-t`
(`use_common_options`) and stops at the run time, so one locustfile serves both
shaped drills and shapeless profiles such as `smoke`.
"""

from __future__ import annotations

import logging
import math
import time

import gevent
from locust import LoadTestShape
from locust.runners import MasterRunner

from loadtests import options as drill_options
from loadtests.phase import STATE, mark_trial
from loadtests.users import selected_classes

log = logging.getLogger("drill.loadtests")

#: Custom message type carrying {"phase": name, "fault": bool} from master to workers.
PHASE_MESSAGE = "drill_phase"


def publish(runner, phase: str, fault: bool, start_unix: float | None = None) -> None:
    """Set the phase here and tell every worker (a local runner delivers to itself), with the timeline's start."""
    if start_unix is not None:
        STATE.start_unix = start_unix
    STATE.set(phase, fault)
    if isinstance(runner, MasterRunner):
        runner.send_message(PHASE_MESSAGE, {"phase": phase, "fault": fault, "start": STATE.start_unix})
    log.info("drill phase %s (fault %s)", phase, "on" if fault else "off")


def on_phase_message(environment, msg, **_kw) -> None:
    """Worker side of `publish`: the users' schedules start at the timeline's first second."""
    if msg.data.get("start") is not None:
        STATE.start_unix = float(msg.data["start"])
    STATE.set(str(msg.data["phase"]), bool(msg.data["fault"]))


class DrillShape(LoadTestShape):
    """Phases from `--drill-phases`; inert (plain -u/-r/-t) when there are none."""

    use_common_options = True

    def __init__(self) -> None:
        super().__init__()
        self._timeline: gevent.Greenlet | None = None
        #: unix time the phases start (a whole second), once the timeline runs
        self.start_unix: float | None = None

    def reset_time(self) -> None:
        super().reset_time()
        if self._timeline is not None:
            self._timeline.kill(block=False)
        self._timeline = None
        self.start_unix = None

    def _options(self):
        return self.runner.environment.parsed_options

    def _run_timeline(self, opts: drill_options.DrillOptions) -> None:
        """Publish each phase at its boundary, on the wall clock from `start_unix` (not the 1 s tick)."""
        at = self.start_unix
        for i, phase in enumerate(opts.phases):
            if i:
                gevent.sleep(max(0.0, at - time.time()))
                publish(self.runner, phase.name, phase.fault)
            at += phase.seconds
        gevent.sleep(max(0.0, at - time.time()))
        STATE.finish()
        if isinstance(self.runner, MasterRunner):
            self.runner.send_message(PHASE_MESSAGE, {"phase": drill_options.DONE_PHASE, "fault": False})

    def tick(self):
        parsed = self._options()
        opts = drill_options.from_namespace(parsed)
        run_time = self.get_run_time()
        if not opts.phases:
            limit = getattr(parsed, "run_time", None)
            if limit and run_time >= limit:
                return None
            return (int(parsed.num_users or 1), float(parsed.spawn_rate or 1), self._classes(opts))
        if self._timeline is None:
            self.start_unix = float(math.floor(time.time()) + 1)  # phase edges on whole seconds
            mark_trial(opts, self.start_unix)
            first = opts.phases[0]
            publish(self.runner, first.name, first.fault, self.start_unix)
            self._timeline = gevent.spawn(self._run_timeline, opts)
        if time.time() >= self.start_unix + opts.total_seconds:
            return None
        return (opts.users, float(max(opts.users, 1)), self._classes(opts))

    def _classes(self, opts: drill_options.DrillOptions) -> list:
        return selected_classes(list(self.runner.user_classes), opts)
