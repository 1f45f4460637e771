"""The two traffic classes of a drill profile: `OrganicUser` (untagged) and `DrillUser` (tagged).

Both call the process's target (`loadtests.method_target`): the demo's `Demo/Call`, or with
`--drill-method` any method of any service, unary or streaming, with the JSON request
`--drill-request` gives. Calls are tagged and counted as the harness client interceptor would,
open loop when a rate is set (`GrpcUser.next_call`), each with a seed-derived request id.
A drill user always sends its tenant (so its traffic is counted as `drill`) and adds the
directive, ratio, target and instances to the calls the fault phase covers: with drill phases
and a rate, those *scheduled* inside the fault phase (as the in-runner load decides, so both
tag the same ids); otherwise those sent while the process's `PhaseState` says the fault is on.
During the fault it also cancels a deterministic share of its calls (`--drill-cancel-share`)
after `--drill-cancel-ms`, and logs the ids it sent with the directive (`--drill-ids-dir`, for
the expected hits). Weights come from `--drill-weights` (set by `configure_weights` on the
process that dispatches users).
"""

from __future__ import annotations

from locust import task
from locust.exception import StopUser

from harness.interceptors import Tagging
from loadtests import method_target, openloop
from loadtests import options as drill_options
from loadtests.grpc_user import GrpcUser, target_of
from loadtests.phase import STATE


class TargetUser(GrpcUser):
    """Calls the process's target (`method_target.resolve`): the demo's `Call`, or `--drill-method`."""

    abstract = True
    target: method_target.Target = method_target.DEMO

    def on_start(self) -> None:
        if method_target.FAILED:  # a worker whose options did not resolve: it said so once, in one line
            raise StopUser()
        self.target = method_target.resolve(self.opts, target_of(self.host or self.environment.host))
        self.stub_class = self.target.stub_class
        super().on_start()

    def send_target(self, request_id: str, cancel_after_ms: float | None = None) -> None:
        t = self.target
        if t.unary:
            self.call(t.method, t.request, cancel_after_ms=cancel_after_ms, request_id=request_id)
        else:
            self.call_stream(t, cancel_after_ms=cancel_after_ms, request_id=request_id)


class OrganicUser(TargetUser):
    """Untagged traffic: no tenant, no directive. Its latency and errors are the blast radius."""

    traffic = "organic"

    @task
    def arrivals(self) -> None:
        self.next_call(self.send)

    def send(self, n: int) -> None:
        self.send_target(self.request_id(n))


class DrillUser(TargetUser):
    """Drill-tenant traffic; sends the directive only on the calls the fault phase covers."""

    traffic = "drill"

    def on_start(self) -> None:
        o = self.opts
        self._quiet = Tagging(tenant=o.tenant)
        self._fault = Tagging(
            tenant=o.tenant,
            directive=o.directive,
            ratio=o.ratio,
            target=o.target,
            instances=o.instances,
            scope=o.scope,
            attempts=o.attempts,
        )
        self._cancel_credit = 0
        super().on_start()

    def initial_tagging(self) -> Tagging:
        return self._fault if STATE.fault_active and self.opts.directive else self._quiet

    def in_fault_phase(self, n: int) -> bool:
        """Whether the fault phase covers call n: by its scheduled time on the drill's timeline when there is
        one (the in-runner load's rule), else by the phase this process is in now."""
        s = self.schedule
        if s is not None and s.start_unix is not None and self.opts.phases:
            return drill_options.phase_at(self.opts.phases, s.at(n)) == drill_options.FAULT_PHASE
        return STATE.fault_active

    def _cancel_now(self) -> bool:
        """Deterministic share: every call adds `share`, a call is cancelled each time 100 is reached."""
        if self.opts.cancel_ms is None or self.opts.cancel_share <= 0:
            return False
        self._cancel_credit += self.opts.cancel_share
        if self._cancel_credit >= 100:
            self._cancel_credit -= 100
            return True
        return False

    @task
    def arrivals(self) -> None:
        self.next_call(self.send)

    def send(self, n: int) -> None:
        in_fault = self.in_fault_phase(n)
        fault = in_fault and self.opts.directive is not None
        rid = self.request_id(n)
        if fault:
            openloop.TAGGED_IDS.write(self.opts.ids_dir, rid)
        # no gevent switch between retagging and `call` reading the tagging
        self.tagging = self._fault if fault else self._quiet
        cancel = self.opts.cancel_ms if in_fault and self._cancel_now() else None
        self.send_target(rid, cancel_after_ms=cancel)


def configure_weights(opts: drill_options.DrillOptions) -> None:
    """Apply `--drill-weights` to the user classes (read by the dispatcher when a run starts).

    A weight of 0 cannot be a Locust weight: such a class keeps weight 1 and the
    shape leaves it out of the dispatch (`selected_classes`).
    """
    OrganicUser.weight = max(1, opts.weights["organic"])
    DrillUser.weight = max(1, opts.weights["drill"])


def selected_classes(user_classes: list, opts: drill_options.DrillOptions) -> list:
    """The user classes to dispatch: those whose traffic class has a weight above 0."""
    return [c for c in user_classes if opts.weights.get(getattr(c, "traffic", ""), 1) > 0]
