"""The two traffic classes of a drill profile: `OrganicUser` (untagged) and `DrillUser` (tagged).

Both call `drill.v1.Demo/Call`, tagged and counted as the harness client interceptor would, open loop
when a rate is set (`GrpcUser.next_call`), each call with a seed-derived request
id. A drill user always sends its tenant (so its traffic is counted as `drill`) and adds the
directive, ratio, target and instances only while the process's `PhaseState`
says the fault is on. During the fault it also cancels a deterministic share of
its calls (`--drill-cancel-share`) after `--drill-cancel-ms`, and logs the ids it
sent with the directive (`--drill-ids-dir`, for the expected hits). Weights come from
`--drill-weights` (set by `configure_weights` on the process that dispatches users).
"""

from __future__ import annotations

from locust import task

from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import Tagging
from loadtests import openloop
from loadtests import options as drill_options
from loadtests.grpc_user import GrpcUser
from loadtests.phase import STATE


class DemoUser(GrpcUser):
    """Calls `Demo/Call` with an empty request (answers OK on `drill serve`)."""

    abstract = True
    stub_class = drill_pb2_grpc.DemoStub
    method = "Call"

    def request(self) -> drill_pb2.CallRequest:
        return drill_pb2.CallRequest()


class OrganicUser(DemoUser):
    """Untagged traffic: no tenant, no directive. Its latency and errors are the blast radius."""

    traffic = "organic"

    @task
    def unary(self) -> None:
        self.next_call(self.send)

    def send(self, n: int) -> None:
        self.call(self.method, self.request(), request_id=self.request_id(n))


class DrillUser(DemoUser):
    """Drill-tenant traffic; sends the directive only while the fault phase is on."""

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
    def unary(self) -> None:
        self.next_call(self.send)

    def send(self, n: int) -> None:
        fault = STATE.fault_active and self.opts.directive is not None
        rid = self.request_id(n)
        if fault:
            openloop.TAGGED_IDS.write(self.opts.ids_dir, rid)
        # no gevent switch between retagging and `call` reading the tagging
        self.tagging = self._fault if fault else self._quiet
        cancel = self.opts.cancel_ms if STATE.fault_active and self._cancel_now() else None
        self.call(self.method, self.request(), cancel_after_ms=cancel, request_id=rid)


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
