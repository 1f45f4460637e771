"""The gRPC user base for Locust: gevent-patched grpc, `events.request`, drill tagging and client metrics.

Follows Locust's own gRPC recipe (`examples/grpc`: `grpc.experimental.gevent`,
one request event per call) with changes that make it fit for drills and cheap
enough to offer thousands of calls per second from one process:

* calls complete without a thread per call (`loadtests.grpc_gevent`): grpc's
  future API on a channel shared by the users of one traffic class, completed by
  one native thread per channel into a gevent waiter. No hub threadpool holds the
  calls, so slow calls of one class cannot stall the other (no confounding), and
  drill and organic users never share a connection;
* every call is tagged and counted exactly as the harness client interceptor
  would (`CallTags`, `ClientRecorder`: the same `x-request-id`, tenant, directive
  keys, token and origin deadline, the same `drill_client_calls_total` and
  `drill_client_latency_seconds` series) without grpc's interceptor machinery;
* every call is reported once to `events.request` with its gRPC status;
  CANCELLED is reported under its own request type (`grpc-cancelled`), never as a
  failure; other non-OK statuses are failures whose message is the status name,
  its class and whether the server marked it as injected (the `x-drill-fault`
  trailer): `UNAVAILABLE (server-fault, injected)` and `UNAVAILABLE (server-fault,
  collateral)` are separate rows of the failure table, and the request context
  carries `injected` ("true"/"false");
* with a rate (`--drill-rate`), a user is open loop (`loadtests.openloop`): call
  n is scheduled at a fixed time and runs in its own greenlet, so slow responses
  never slow the arrivals down (no coordinated omission); every call carries a
  seed-derived `x-request-id`;
* a streaming call (`call_stream`) is one call too, tagged, counted and reported
  once: a client stream's messages are sent at their rate by grpc's sender (a
  greenlet under gevent), a response stream is read to its end.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import grpc
import grpc.experimental.gevent as grpc_gevent

grpc_gevent.init_gevent()  # before any channel exists (Locust's recipe); blocking calls stay cooperative

import gevent  # noqa: E402
import gevent.pool  # noqa: E402
from locust import User, constant  # noqa: E402
from locust.runners import WorkerRunner  # noqa: E402

from harness.core.faults import Kind  # noqa: E402
from harness.core.headers import has_fault_marker  # noqa: E402
from harness.core.metrics import method_label  # noqa: E402
from harness.core.status import classify, status_name  # noqa: E402
from harness.interceptors import ORGANIC, CallTags, ClientRecorder, Tagging  # noqa: E402
from loadtests import openloop  # noqa: E402
from loadtests import options as drill_options  # noqa: E402
from loadtests.grpc_gevent import completions  # noqa: E402
from loadtests.phase import STATE  # noqa: E402

#: Request type of calls that ended CANCELLED: their own row in Locust's stats, never failures.
CANCELLED_TYPE = "grpc-cancelled"
REQUEST_TYPE = "grpc"
#: Service label of the load generator on client metrics.
CLIENT_SERVICE = "locust"

_OK = grpc.StatusCode.OK
_CANCELLED = grpc.StatusCode.CANCELLED
_INJECTED = {True: "true", False: "false"}


class GrpcStatusError(Exception):
    """A non-OK, non-CANCELLED final status, as Locust records the failure (no traceback)."""

    def __init__(self, code: str, injected: bool = False) -> None:
        origin = "injected" if injected else "collateral"
        super().__init__(f"{code} ({classify(code).value}, {origin})")
        self.code = code
        self.injected = injected


def target_of(host: str | None) -> str:
    """`HOST:PORT` from Locust's `--host` (a `grpc://` or `http://` scheme is tolerated)."""
    if not host:
        raise ValueError("set the gRPC target with --host HOST:PORT")
    for scheme in ("grpc://", "http://", "dns:///"):
        if host.startswith(scheme):
            host = host[len(scheme) :]
    return host.rstrip("/")


def _paced(messages: tuple[bytes, ...], rate: float | None, sent: list[int]):
    """A client stream's messages, message i at i / rate s after the first (at once without a rate).

    grpc pulls it from its own sender (a greenlet under gevent), so the wait yields; `sent[0]` counts
    what was handed over."""
    first = time.monotonic()
    for i, message in enumerate(messages):
        if rate and i:
            wait = first + i / rate - time.monotonic()
            if wait > 0:
                gevent.sleep(wait)
        sent[0] = i + 1
        yield message


def _pin_threadpool(size: int) -> None:
    """`--drill-threadpool N`: fix gevent's hub threadpool (only grpc's blocking calls and the
    `greenlet` wait use it; the default native wait needs none). 0 leaves gevent's default."""
    if size > 0:
        gevent.get_hub().threadpool.maxsize = size


class GrpcUser(User):
    """Calls go through `call()` (unary) or `call_stream()`: tagged, counted, reported. Subclasses set `stub_class`.

    `tagging` may be swapped at any time (e.g. when the fault phase starts); a call uses
    the tagging it starts with.
    """

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
        self.tagging: Tagging = ORGANIC
        self.recorder: ClientRecorder | None = None
        self.drill_tenants = frozenset({self.opts.tenant})
        self._tags: dict[tuple[int, str], CallTags] = {}
        self._multicallables: dict[str, Any] = {}
        self.stub: Any = None

    def wait_time(self) -> float:
        return self._wait(self)

    def initial_tagging(self) -> Tagging:
        return ORGANIC

    def on_start(self) -> None:
        _pin_threadpool(self.opts.threadpool)
        runner = self.environment.runner
        worker = getattr(runner, "worker_index", -1) if isinstance(runner, WorkerRunner) else None
        if worker is not None and worker < 0:
            worker = os.getpid()  # index not known yet: the pid still keeps ids unique
        self.user_name, spread = openloop.NAMES.next(self.traffic, worker)
        if self.rate > 0:
            self.schedule = self._schedule(spread, worker)
            self._calls = gevent.pool.Pool(self.inflight)
        target = target_of(self.host or self.environment.host)
        self.tagging = self.initial_tagging()
        self.recorder = ClientRecorder(CLIENT_SERVICE, self.opts.config, target)
        self.completions = completions()
        self.stub = self.stub_class(self.completions.channel(target, self.traffic))

    def _schedule(self, spread: int, worker: int | None) -> openloop.Schedule:
        """This user's arrivals. With drill phases, at most the phases' length × rate calls, timed from the
        timeline's first second; on a standalone process, offset as the in-runner load offsets the same
        user (`openloop.runner_offset`), so both send the same ids at the same times of a trial."""
        o = self.opts
        if not o.phases:
            return openloop.Schedule(self.rate, spread)
        offset = None
        if worker is None:
            offset = openloop.runner_offset(o.users, o.weights, self.traffic, spread, self.rate)
        return openloop.Schedule(self.rate, spread, offset=offset, limit=int(o.total_seconds * self.rate),
                                 anchor=lambda: STATE.start_unix)  # fmt: skip

    def on_stop(self) -> None:
        if self._calls is not None:
            self._calls.kill(block=False)

    def next_call(self, send: Callable[[int], Any]) -> None:
        """Run `send(n)` for the next call: open loop, in its own greenlet at its scheduled time;
        closed loop (no rate), right here. The pool blocks only when `inflight` calls are out."""
        if self.schedule is None:
            self._closed_n += 1
            send(self._closed_n - 1)
            return
        if self.schedule.exhausted:  # every call of the phases is sent: idle until the shape stops the user
            gevent.sleep(1.0)
            return
        gevent.sleep(self.schedule.delay())
        self._calls.spawn(send, self.schedule.take())

    def request_id(self, n: int) -> str:
        """`PLAN-SEED-USER-N-MIX`: the in-runner load's id for the same call of this configuration's trial
        (`--drill-config`, `--drill-trial`), unique across processes."""
        o = self.opts
        return openloop.request_id(o.plan, o.seed, o.config, o.trial, self.user_name, n)

    def _call_tags(self, tagging: Tagging, method: str) -> CallTags:
        key = (id(tagging), method)
        tags = self._tags.get(key)
        if tags is None or tags.tagging is not tagging:
            multicallable = getattr(self.stub, method)
            full = getattr(multicallable, "_method", None) or method  # grpc's `/pkg.Service/Method`
            label = method_label(full.decode() if isinstance(full, bytes) else str(full))
            tags = self._tags[key] = CallTags(tagging, label, self.drill_tenants)
            self._multicallables[method] = multicallable
        return tags

    def call(
        self, method: str, request: Any, *, cancel_after_ms: float | None = None, request_id: str | None = None
    ) -> Any:
        """Call `method` on the stub; report to `events.request`; return the reply or None."""
        tags = self._call_tags(self.tagging, method)  # before the call: other greenlets may retag
        label = tags.method
        rec = self.recorder
        timeout = self.opts.timeout
        metadata = tags.metadata(request_id or str(uuid.uuid4()), timeout)  # the interceptor's default id
        rec.attempt_started(label)
        start = time.perf_counter()
        done = self.completions
        future = done.start(self._multicallables[method], request, timeout, metadata)
        if cancel_after_ms is not None:
            timer = done.cancel_after(future, cancel_after_ms / 1000.0)
            done.wait(future)
            timer.stop()
        else:
            done.wait(future)
        elapsed = time.perf_counter() - start
        reply = None
        if future.cancelled():
            code = _CANCELLED
            injected = False
        else:
            code = future.code()
            injected = has_fault_marker(future.trailing_metadata())
            if code is _OK:
                reply = future.result()
        rec.attempt_finished(label, code, elapsed)
        rec.call_finished(label, code, elapsed, tags.fault_mode, tags.traffic, injected=injected)
        length = 0 if reply is None else len(reply) if type(reply) is bytes else reply.ByteSize()
        self._report(method, code, elapsed * 1000.0, length, tags.fault_mode, injected)
        return reply

    def call_stream(
        self, target, *, cancel_after_ms: float | None = None, request_id: str | None = None
    ) -> tuple[int, int]:
        """One streaming call of `target` (`loadtests.method_target.Target`), tagged, counted and reported as
        one call like `call()`: a client stream sends `target.messages` (message i at i / message_rate s),
        then half-closes; a response stream is read to its end. Returns (messages sent, messages received).
        """
        method = target.method
        tags = self._call_tags(self.tagging, method)  # before the call: other greenlets may retag
        label = tags.method
        rec = self.recorder
        metadata = tags.metadata(request_id or str(uuid.uuid4()), self.opts.timeout)
        sent: list[int] = [0]
        request = target.request
        if target.kind.request_streaming:
            request = _paced(target.messages, target.message_rate, sent)
        received = length = 0
        rec.attempt_started(label)
        start = time.perf_counter()
        done = self.completions
        multicallable = self._multicallables[method]
        if target.kind == Kind.CLIENT_STREAMING:
            call = done.start(multicallable, request, self.opts.timeout, metadata)
        else:
            call = done.start_stream(multicallable, request, self.opts.timeout, metadata)
        timer = done.cancel_after(call, cancel_after_ms / 1000.0) if cancel_after_ms is not None else None
        if target.kind == Kind.CLIENT_STREAMING:
            done.wait(call)
        else:
            try:
                for reply in call:
                    received += 1
                    length += len(reply)
            except grpc.RpcError:
                pass  # the status is read below
        if timer is not None:
            timer.stop()
        elapsed = time.perf_counter() - start
        if call.cancelled():
            code, injected = _CANCELLED, False
        else:
            code = call.code()
            injected = has_fault_marker(call.trailing_metadata())
            if code is _OK and target.kind == Kind.CLIENT_STREAMING:
                received, length = 1, len(call.result())
        if not target.kind.request_streaming:
            sent[0] = 1
        rec.attempt_finished(label, code, elapsed)
        rec.call_finished(label, code, elapsed, tags.fault_mode, tags.traffic, injected=injected)
        self._report(method, code, elapsed * 1000.0, length, tags.fault_mode, injected,
                     messages_sent=sent[0], messages_received=received)  # fmt: skip
        return sent[0], received

    def _report(
        self, method: str, code, elapsed_ms: float, length: int, fault_mode: str, injected: bool, **extra: int
    ) -> None:
        """One `events.request` per call: OK, CANCELLED (its own type, no failure) or a grouped failure."""
        status = status_name(code)
        context = {
            "traffic": self.traffic,
            "grpc_status": status,
            "fault_mode": fault_mode,
            "injected": _INJECTED[injected],
            **extra,
        }
        if code is _OK:
            kind, exception = REQUEST_TYPE, None
        elif code is _CANCELLED:
            kind, length, exception = CANCELLED_TYPE, 0, None
        else:
            kind, length, exception = REQUEST_TYPE, 0, GrpcStatusError(status, injected)
        self.environment.events.request.fire(
            request_type=kind,
            name=f"{self.traffic}/{method}",
            response_time=elapsed_ms,
            response_length=length,
            exception=exception,
            context=context,
        )
