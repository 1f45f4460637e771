"""The gRPC user base for Locust: gevent-patched grpc, one channel per user, `events.request`.

Follows Locust's own gRPC recipe (`examples/grpc`) with three changes that make
it fit for drills:

* every call is reported to `events.request` with its gRPC status; CANCELLED is
  reported under its own request type (`grpc-cancelled`), never as a failure;
  other non-OK statuses are failures whose message is the status name and class,
  so the log gets no traceback per request and the failure table stays small;
* the gevent hub threadpool grows with the calls the process can have in flight.
  gevent-patched grpc parks each in-flight blocking call on a hub threadpool
  thread (default 10): with fewer threads than calls, slow calls of one user
  class stall every other user in the process and the load generator fakes
  blast radius;
* with a rate (`--drill-rate`), a user is open loop (`loadtests.openloop`): call
  n is scheduled at a fixed time and runs in its own greenlet, so slow responses
  never slow the arrivals down (no coordinated omission); every call carries a
  seed-derived `x-request-id`;
* the channel carries the harness client interceptor, so every call is tagged
  and counted in `drill_client_calls_total` / `drill_client_latency_seconds`;
* a failure is named by whether the server marked it as injected (the
  `x-drill-fault` trailer): `UNAVAILABLE (server-fault, injected)` and
  `UNAVAILABLE (server-fault, collateral)` are separate rows of the failure table,
  and the request context carries `injected` ("true"/"false"), so a report splits
  the drill's own failures from the damage it did.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import grpc
import grpc.experimental.gevent as grpc_gevent

grpc_gevent.init_gevent()  # before any channel exists (Locust's recipe)

import gevent  # noqa: E402
import gevent.pool  # noqa: E402
from locust import User, constant  # noqa: E402
from locust.runners import WorkerRunner  # noqa: E402

from harness.core.headers import REQUEST_ID, has_fault_marker  # noqa: E402
from harness.core.status import classify, status_name  # noqa: E402
from harness.interceptors import ORGANIC, SyncDrillClientInterceptor, Tagging, call_with_cancel  # noqa: E402
from loadtests import openloop  # noqa: E402
from loadtests import options as drill_options  # noqa: E402

#: Request type of calls that ended CANCELLED: their own row in Locust's stats, never failures.
CANCELLED_TYPE = "grpc-cancelled"
REQUEST_TYPE = "grpc"
#: Threads kept beyond the live users (metrics server, spawning, cancel timers).
THREADPOOL_MARGIN = 8
#: Service label of the load generator on client metrics.
CLIENT_SERVICE = "locust"


class GrpcStatusError(Exception):
    """A non-OK, non-CANCELLED final status, as Locust records the failure (no traceback)."""

    def __init__(self, code: str, injected: bool = False) -> None:
        origin = "injected" if injected else "collateral"
        super().__init__(f"{code} ({classify(code).value}, {origin})")
        self.code = code
        self.injected = injected


class _Threadpool:
    """Keeps the hub threadpool at least as large as the in-flight calls the process can have."""

    live_users = 0
    fixed = 0

    @classmethod
    def grow(cls, delta: int) -> None:
        cls.live_users += delta
        pool = gevent.get_hub().threadpool
        want = cls.fixed or (cls.live_users + THREADPOOL_MARGIN)
        if cls.fixed or want > pool.maxsize:
            pool.maxsize = want


def target_of(host: str | None) -> str:
    """`HOST:PORT` from Locust's `--host` (a `grpc://` or `http://` scheme is tolerated)."""
    if not host:
        raise ValueError("set the gRPC target with --host HOST:PORT")
    for scheme in ("grpc://", "http://", "dns:///"):
        if host.startswith(scheme):
            host = host[len(scheme) :]
    return host.rstrip("/")


class GrpcUser(User):
    """One channel per user; `call()` makes a unary call and reports it. Subclasses set `stub_class`."""

    abstract = True
    stub_class: Any = None
    #: Traffic class this user reports under (the Locust stats name prefix).
    traffic = "organic"

    def __init__(self, environment) -> None:
        super().__init__(environment)
        self.opts = drill_options.from_namespace(environment.parsed_options)
        rate = self.opts.rate
        if self.traffic == "organic" and self.opts.organic_rate is not None:
            rate = self.opts.organic_rate
        self.rate = rate
        # open loop: the task itself waits for each scheduled arrival; closed loop (rate 0): flat out
        self._wait = constant(0)
        self.schedule: openloop.Schedule | None = None
        self.inflight = openloop.inflight_bound(rate, self.opts.timeout) if rate > 0 else 1
        self._calls: gevent.pool.Pool | None = None
        self._closed_n = 0
        self.user_name = ""
        self.interceptor: SyncDrillClientInterceptor | None = None
        self._channel: grpc.Channel | None = None
        self.stub: Any = None

    def wait_time(self) -> float:
        return self._wait(self)

    def initial_tagging(self) -> Tagging:
        return ORGANIC

    def on_start(self) -> None:
        _Threadpool.fixed = self.opts.threadpool
        _Threadpool.grow(self.inflight)
        runner = self.environment.runner
        worker = getattr(runner, "worker_index", -1) if isinstance(runner, WorkerRunner) else None
        if worker is not None and worker < 0:
            worker = os.getpid()  # index not known yet: the pid still keeps ids unique
        self.user_name, spread = openloop.NAMES.next(self.traffic, worker)
        if self.rate > 0:
            self.schedule = openloop.Schedule(self.rate, spread)
            self._calls = gevent.pool.Pool(self.inflight)
        target = target_of(self.host or self.environment.host)
        self.interceptor = SyncDrillClientInterceptor(
            self.initial_tagging(),
            service=CLIENT_SERVICE,
            config=self.opts.config,
            target=target,
            drill_tenants=frozenset({self.opts.tenant}),
        )
        self._channel = grpc.insecure_channel(target)
        self.stub = self.stub_class(grpc.intercept_channel(self._channel, self.interceptor))

    def on_stop(self) -> None:
        _Threadpool.grow(-self.inflight)
        if self._calls is not None:
            self._calls.kill(block=False)
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def next_call(self, send: Callable[[int], Any]) -> None:
        """Run `send(n)` for the next call: open loop, in its own greenlet at its scheduled time;
        closed loop (no rate), right here. The pool blocks only when `inflight` calls are out."""
        if self.schedule is None:
            self._closed_n += 1
            send(self._closed_n - 1)
            return
        gevent.sleep(self.schedule.delay())
        self._calls.spawn(send, self.schedule.take())

    def request_id(self, n: int) -> str:
        """`PLAN-SEED-USER-N`: the same form as the in-runner load's ids, unique across processes."""
        return openloop.request_id(self.opts.plan, self.opts.seed, self.user_name, n)

    def call(
        self, method: str, request: Any, *, cancel_after_ms: float | None = None, request_id: str | None = None
    ) -> Any:
        """Call `method` on the stub; report to `events.request`; return the reply or None."""
        multicallable = getattr(self.stub, method)
        metadata = ((REQUEST_ID, request_id),) if request_id else None
        fault_mode = self.interceptor.tagging.fault_mode  # before the call: other greenlets may retag
        start = time.perf_counter()
        reply = None
        code = "OK"
        injected = False
        try:
            if cancel_after_ms is not None:
                reply = call_with_cancel(
                    multicallable, request, cancel_after_ms, timeout=self.opts.timeout, metadata=metadata
                )
            else:
                reply, call = multicallable.with_call(request, timeout=self.opts.timeout, metadata=metadata)
                injected = has_fault_marker(call.trailing_metadata())
        except grpc.RpcError as e:
            code = status_name(e.code()) if hasattr(e, "code") else "UNKNOWN"
            trailing = getattr(e, "trailing_metadata", None)
            injected = has_fault_marker(trailing() if callable(trailing) else None)
        elapsed_ms = (time.perf_counter() - start) * 1000.0
        context = {
            "traffic": self.traffic,
            "grpc_status": code,
            "fault_mode": fault_mode,
            "injected": "true" if injected else "false",
        }
        name = f"{self.traffic}/{method}"
        events = self.environment.events.request
        if code == "OK":
            events.fire(
                request_type=REQUEST_TYPE,
                name=name,
                response_time=elapsed_ms,
                response_length=reply.ByteSize() if reply is not None else 0,
                exception=None,
                context=context,
            )
        elif code == "CANCELLED":
            events.fire(
                request_type=CANCELLED_TYPE,
                name=name,
                response_time=elapsed_ms,
                response_length=0,
                exception=None,
                context=context,
            )
        else:
            events.fire(
                request_type=REQUEST_TYPE,
                name=name,
                response_time=elapsed_ms,
                response_length=0,
                exception=GrpcStatusError(code, injected),
                context=context,
            )
        return reply
