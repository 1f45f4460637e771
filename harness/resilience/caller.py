"""The resilient grpc.aio caller: one logical call = retries, budget, breaker, deadline, balancing.

Transport-agnostic: the caller never builds a stub. It is given, per method, an
`Invoke` — `await invoke(target, request, timeout, metadata)` returning the reply
or raising `grpc.aio.AioRpcError` — and `unary_invoker()` builds one from any
channel factory and a full method name with its serializers, so no generated
code is needed. `ChannelPool` is such a factory: one channel per target, each
with a `DrillClientInterceptor` that records attempts (`record_calls=False`).

`ResilientCaller.call()` owns the attempt loop and only asks the strategies
questions (which backend, may I, how long, again?). Every attempt of one logical
call carries the same `x-request-id` plus `grpc-previous-rpc-attempts`; the
logical call is recorded once by a `ClientRecorder` whose `config` label is the
configuration's name.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random as _random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import grpc
from grpc import aio

from harness.core import headers as h
from harness.core import metrics as m
from harness.core import scope
from harness.core.headers import DEFAULT_DRILL_TENANT, traffic_of
from harness.core.status import status_name
from harness.interceptors import ORGANIC, ClientRecorder, DrillClientInterceptor, Tagging
from harness.resilience import config as _config
from harness.resilience.balancer import Backend
from harness.resilience.breaker import CircuitBreaker, State
from harness.resilience.deadline import EarlyGiveUp
from harness.resilience.retry import NO_PUSHBACK, parse_pushback
from harness.resilience.timeouts import LatencyWindow

#: grpc core strips application-set `grpc-*` metadata (checked with grpcio 1.85: the server never
#: sees `grpc-previous-rpc-attempts`), so the attempt number also travels under this key.
PREVIOUS_ATTEMPTS_FALLBACK = h.DRILL_PREVIOUS_RPC_ATTEMPTS


class Invoke(Protocol):
    """One attempt of one method on one target: the reply, or `grpc.aio.AioRpcError`/`grpc.RpcError`."""

    def __call__(
        self, target: str, request: Any, timeout: float | None, metadata: Sequence[tuple[str, str]]
    ) -> Awaitable[Any]: ...


def rpc_error(code: grpc.StatusCode, details: str, trailing: Sequence[tuple[str, str]] = ()) -> aio.AioRpcError:
    """An `AioRpcError` for a call answered locally (fail fast, early give-up)."""
    return aio.AioRpcError(code, aio.Metadata(), aio.Metadata(*trailing), details)


def full_method(method: str) -> str:
    """`pkg.Service/Method` or `/pkg.Service/Method` -> `/pkg.Service/Method` (grpc's form)."""
    name = method.lstrip("/")
    if "/" not in name:
        raise ValueError(f"{method!r} is not a full method name (/pkg.Service/Method)")
    return "/" + name


def unary_invoker(
    channel_for_target: Callable[[str], aio.Channel],
    method: str,
    request_serializer: Callable[[Any], bytes] | None = None,
    response_deserializer: Callable[[bytes], Any] | None = None,
) -> Invoke:
    """An `Invoke` for the unary method `/pkg.Service/Method` through `channel.unary_unary(...)`.

    No serializers = bytes in, bytes out. The multicallable is made once per target.
    """
    path = full_method(method)
    calls: dict[str, Any] = {}

    async def invoke(target: str, request: Any, timeout: float | None, metadata: Sequence[tuple[str, str]]) -> Any:
        call = calls.get(target)
        if call is None:
            call = calls[target] = channel_for_target(target).unary_unary(
                path, request_serializer=request_serializer, response_deserializer=response_deserializer
            )
        return await call(request, timeout=timeout, metadata=tuple(metadata))

    return invoke


class ChannelPool:
    """One insecure grpc.aio channel per target, each with a `DrillClientInterceptor` recording attempts.

    Call it with a target to get its channel; `tagging` may be swapped at any time.
    """

    def __init__(
        self,
        *,
        service: str,
        config: str = "none",
        tagging: Tagging = ORGANIC,
        drill_tenants: frozenset[str] = frozenset({DEFAULT_DRILL_TENANT}),
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self.service, self.config, self.drill_tenants = service, config, drill_tenants
        self.options = tuple(options)
        self._tagging = tagging
        self._interceptors: dict[str, DrillClientInterceptor] = {}
        self._channels: dict[str, aio.Channel] = {}

    def __call__(self, target: str) -> aio.Channel:
        channel = self._channels.get(target)
        if channel is None:
            ic = DrillClientInterceptor(
                self._tagging,
                service=self.service,
                config=self.config,
                target=target,
                drill_tenants=self.drill_tenants,
                record_calls=False,
            )
            channel = aio.insecure_channel(target, options=self.options, interceptors=[ic])
            self._interceptors[target], self._channels[target] = ic, channel
        return channel

    @property
    def tagging(self) -> Tagging:
        return self._tagging

    @tagging.setter
    def tagging(self, value: Tagging) -> None:
        self._tagging = value
        for ic in self._interceptors.values():
            ic.tagging = value

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        self._interceptors = {}
        for channel in channels:
            await channel.close()


@dataclasses.dataclass
class _Plan:
    """What one method gets from the configuration, built once per caller."""

    label: str
    policy: Any
    backoff: Any
    deadline: Any
    timeout: Any
    #: Recent successful latencies: the expected latency a retry must still have time for.
    latency: LatencyWindow = dataclasses.field(default_factory=LatencyWindow)


class ResilientCaller:
    """Calls unary methods on N replicas (targets) under one configuration, through given invokes.

    `invokers` maps full method names (`/pkg.Service/Method`) to an `Invoke`;
    `call()` takes the full name or, when unambiguous, the short one. Backends,
    breakers, budget and balancer are shared by all methods. With `channels` (a
    `ChannelPool`) the caller keeps its tagging in sync and closes it on `close()`.
    `picks` counts the backends the balancer chose and the breaker let through.
    """

    def __init__(
        self,
        targets: Sequence[str],
        config: _config.ResilienceConfig,
        invokers: Mapping[str, Invoke],
        *,
        service: str,
        tagging: Tagging = ORGANIC,
        drill_tenants: frozenset[str] = frozenset({DEFAULT_DRILL_TENANT}),
        rng: _random.Random | None = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        channels: ChannelPool | None = None,
    ) -> None:
        if not targets:
            raise ValueError("a caller needs at least one target")
        if not invokers:
            raise ValueError("a caller needs at least one method to invoke")
        self.addresses = list(targets)
        self.config = config
        self.service = service
        self.drill_tenants = drill_tenants
        self.channels = channels
        self._tagging = tagging
        if channels is not None:
            channels.tagging = tagging
        self._sleep = sleep
        self._rng = rng
        self._invokers = {full_method(k).lstrip("/"): v for k, v in invokers.items()}
        by_short: dict[str, list[str]] = collections.defaultdict(list)
        for label in self._invokers:
            by_short[label.rsplit("/", 1)[-1]].append(label)
        self._short = {k: v[0] for k, v in by_short.items() if len(v) == 1}
        self._plans: dict[str, _Plan] = {}
        name = config.name
        self.recorder = ClientRecorder(service, name, ",".join(self.addresses))
        self.picks: collections.Counter[str] = collections.Counter()
        self.balancer = config.build_balancer(self.addresses, rng)
        self.breakers = config.build_breakers(self._on_transition)
        self.budget = config.build_budget()
        self.throttle = config.build_throttle()
        self.timeouts = config.build_timeouts()
        self._picks = m.ChildCache(m.BALANCER_PICKS)
        self._retries = m.ChildCache(m.RETRY_ATTEMPTS)
        self._exhausted = m.ChildCache(m.RETRY_BUDGET_EXHAUSTED)
        self._fail_fast = m.ChildCache(m.FAIL_FAST)
        self._state = m.ChildCache(m.BREAKER_STATE)
        self._transitions = m.ChildCache(m.BREAKER_TRANSITIONS)
        if self.breakers is not None:
            for addr in self.addresses:
                self._state(service, self.breakers.key(addr), name).set(State.CLOSED.value)

    def _plan(self, method: str) -> _Plan:
        """The invoke label (`pkg.Service/Method`) and its strategies, for a full or short name."""
        key = method.lstrip("/")
        label = key if key in self._invokers else self._short.get(key)
        if label is None:
            raise ValueError(f"{method!r}: not a method of this caller ({', '.join(sorted(self._invokers))})")
        plan = self._plans.get(label)
        if plan is None:
            cfg = self.config
            mp = cfg.for_method(label)
            plan = self._plans[label] = _Plan(
                label,
                mp.retry,
                cfg.build_backoff(self._rng, mp.backoff),
                dataclasses.replace(cfg.deadline, total_s=mp.timeout_s),
                self.timeouts.for_method(label),
            )
        return plan

    # -- observability hooks ----------------------------------------------------------------
    def _on_transition(self, key: str) -> Callable[[State, State], None]:
        def record(frm: State, to: State) -> None:
            name = self.config.name
            self._state(self.service, key, name).set(to.value)
            self._transitions(self.service, key, name, frm.name.lower(), to.name.lower()).inc()

        return record

    @property
    def tagging(self) -> Tagging:
        return self._tagging

    @tagging.setter
    def tagging(self, value: Tagging) -> None:
        """Swap what this caller puts on the wire (e.g. when a drill enters its fault phase)."""
        self._tagging = value
        if self.channels is not None:
            self.channels.tagging = value

    def _labels(self, present: dict[str, str], cur: scope.CallScope | None) -> tuple[str, str]:
        """(fault_mode, traffic) of a logical call: explicit metadata, then the served scope, then tagging."""
        propagated = dict(cur.propagate) if cur is not None else {}
        directive = present.get(h.FAULT) or propagated.get(h.FAULT) or self._tagging.directive
        fault_mode = Tagging(directive=directive).fault_mode
        if cur is not None:
            return fault_mode, cur.traffic
        tenant = present.get(h.TENANT) or self._tagging.tenant
        return fault_mode, traffic_of(tenant, self.drill_tenants)

    # -- the logical call ---------------------------------------------------------------------
    async def call(
        self,
        method: str,
        request: Any,
        *,
        metadata: Sequence[tuple[str, str]] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """One logical unary call of `method` (`/pkg.Service/Method` or its short name).

        Raises `aio.AioRpcError` on failure (a `grpc.RpcError` from an invoke is re-raised as one).
        """
        plan = self._plan(method)
        label = plan.label
        cur = scope.current()
        md_in = [(k, v) for k, v in (metadata or ()) if k != h.REQUEST_ID]
        present = dict(metadata or ())
        request_id = present.get(h.REQUEST_ID) or (cur.request_id if cur is not None else "") or str(uuid.uuid4())
        fault_mode, traffic = self._labels(present, cur)
        start = time.perf_counter()
        code: grpc.StatusCode = grpc.StatusCode.OK
        injected = False  # a reply carries no trailers here: only a failure can be seen as injected
        try:
            return await self._attempts(plan, request, md_in, request_id, cur, timeout)
        except aio.AioRpcError as err:
            code = err.code()
            injected = h.has_fault_marker(err.trailing_metadata())
            raise
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except Exception:
            code = grpc.StatusCode.UNKNOWN  # not a gRPC outcome, but never an OK
            raise
        finally:
            self.recorder.call_finished(
                label, code, time.perf_counter() - start, fault_mode, traffic, injected=injected
            )

    def _choose(self, avoid: frozenset[str]) -> tuple[Backend | None, CircuitBreaker | None, str]:
        """A backend whose breaker lets the call through, or a reason.

        Backends not tried yet come first; when none of them may be called, an
        already-tried one whose breaker lets the call through beats failing fast.
        """
        refused: set[str] = set()
        reason = "no_backend"
        for exclude_tried in (True, False):
            while True:
                backend = self.balancer.pick(frozenset(refused | avoid if exclude_tried else refused))
                if backend is None:
                    break
                breaker = self.breakers.for_backend(backend.address) if self.breakers is not None else None
                if breaker is None or breaker.allow():
                    self._picks(self.service, backend.address, self.config.name).inc()
                    self.picks[backend.address] += 1
                    return backend, breaker, ""
                reason = "breaker"
                if self.breakers is not None and self.breakers.per == "service":
                    return None, None, reason
                refused.add(backend.address)
        return None, None, reason

    def _expected_s(self, plan: _Plan) -> float:
        """Least time worth starting a retry with: the method's p50 (once known), at least `minRemaining`."""
        p50 = plan.latency.quantile(0.5)
        return max(self.config.deadline.min_remaining_s, 0.001, p50 or 0.0)

    async def _attempts(self, plan: _Plan, request, md_in, request_id, cur, timeout) -> Any:
        cfg = self.config
        policy, label, invoke = plan.policy, plan.label, self._invokers[plan.label]
        name = cfg.name
        incoming = cur.time_remaining() if cur is not None else None
        try:
            budget_s = plan.deadline.call_budget(incoming, timeout)
        except EarlyGiveUp as exc:
            self._fail_fast(self.service, label, name, "deadline").inc()
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, f"early give-up: {exc}") from None
        deadline = None if budget_s is None else time.monotonic() + budget_s
        if budget_s is not None and (cur is None or cur.origin_deadline is None):
            if all(k != h.ORIGIN_DEADLINE for k, _ in md_in):
                # We are the edge: the origin deadline is the logical call's, not one attempt's.
                md_in = [*md_in, (h.ORIGIN_DEADLINE, f"{time.time() + budget_s:.3f}")]
        self.budget.record_request()
        strategy = plan.timeout
        backoff_n = 0  # retries since the call began or since the last pushback (A6 resets the backoff there)
        previous_sleep = 0.0
        last: aio.AioRpcError | None = None
        tried: set[str] = set()
        for n in range(policy.max_attempts):
            backend, breaker, reason = self._choose(frozenset(tried))
            if backend is None:
                self._fail_fast(self.service, label, name, reason).inc()
                raise last or rpc_error(grpc.StatusCode.UNAVAILABLE, f"{reason}: no backend may be called")
            per_try = strategy.timeout()
            attempt_timeout = per_try
            per_try_binding = per_try is not None
            if deadline is not None:
                left = deadline - time.monotonic()
                # A first attempt needs the floor; a retry needs the method's expected latency.
                need = self._expected_s(plan) if n else max(cfg.deadline.min_remaining_s, 0.001)
                if left < need:
                    if breaker is not None:
                        breaker.release()
                    self._fail_fast(self.service, label, name, "deadline").inc()
                    raise last or rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "early give-up: deadline too close")
                per_try_binding = per_try is not None and per_try < left
                attempt_timeout = per_try if per_try_binding else left
            if n:
                # The retry is going out now: only now does it take a budget token and count.
                if not self.budget.try_acquire():
                    if breaker is not None:
                        breaker.release()
                    self._exhausted(self.service, label, name).inc()
                    raise last or rpc_error(grpc.StatusCode.UNAVAILABLE, "retry budget exhausted")
                self._retries(self.service, label, name).inc()
            md = [*md_in, (h.REQUEST_ID, request_id), (h.CONFIG, name)]
            if n:
                md += [(h.PREVIOUS_RPC_ATTEMPTS, str(n)), (PREVIOUS_ATTEMPTS_FALLBACK, str(n))]
            tried.add(backend.address)
            code = grpc.StatusCode.OK
            pushback = NO_PUSHBACK
            local_error = False
            self.balancer.started(backend)
            t0 = time.monotonic()
            try:
                reply = await invoke(backend.address, request, attempt_timeout, tuple(md))
            except grpc.RpcError as err:
                last = err if isinstance(err, aio.AioRpcError) else _as_aio_error(err)
                code = last.code()
                pushback = parse_pushback(last.trailing_metadata())
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except Exception:
                # Not a gRPC outcome (a typo'd method, a closed channel...): it says nothing about
                # the backend. Re-raised as is; `call()` records the logical call as UNKNOWN.
                local_error = True
                raise
            finally:
                rtt = time.monotonic() - t0
                self._attempt_finished(plan, backend, breaker, code, rtt, local_error, per_try_binding)
            if code is grpc.StatusCode.OK:
                return reply
            assert last is not None
            timed_out = per_try_binding and code is grpc.StatusCode.DEADLINE_EXCEEDED
            if not policy.retryable(label, code, n + 1, pushback, per_try_timeout=timed_out):
                raise last
            if policy.honour_pushback and pushback.sleep_s is not None:
                sleep_s = pushback.sleep_s
                if sleep_s > policy.max_pushback_s:
                    raise last  # the server asks for longer than we will wait
                backoff_n, previous_sleep = 0, 0.0  # A6 (grpc core): the backoff starts again after pushback
            else:
                backoff_n += 1
                sleep_s = previous_sleep = plan.backoff(backoff_n, previous_sleep)
            if deadline is not None and time.monotonic() + sleep_s + self._expected_s(plan) > deadline:
                raise last  # the next attempt could not finish before the deadline
            throttled = self.throttle is not None and not self.throttle.allows_retry()
            if throttled or not self.budget.can_acquire():
                self._exhausted(self.service, label, name).inc()
                raise last
            if sleep_s > 0:
                await self._sleep(sleep_s)
        assert last is not None
        raise last

    def _attempt_finished(
        self,
        plan: _Plan,
        backend: Backend,
        breaker: CircuitBreaker | None,
        code: grpc.StatusCode,
        rtt: float,
        local_error: bool,
        per_try_binding: bool,
    ) -> None:
        """Tell the strategies one attempt's outcome (a local error tells them nothing)."""
        if local_error:
            self.balancer.abandoned(backend)
            if breaker is not None:
                breaker.release()
            return
        self.balancer.finished(backend, rtt, code)
        if breaker is not None:
            breaker.record(code)
        if code is grpc.StatusCode.CANCELLED:
            return
        plan.timeout.observe(rtt)
        if code is grpc.StatusCode.OK:
            plan.latency.observe(rtt)
        if self.throttle is not None:
            timed_out = per_try_binding and code is grpc.StatusCode.DEADLINE_EXCEEDED
            self.throttle.record(failed=timed_out or status_name(code) in plan.policy.codes)

    async def close(self) -> None:
        """Close the `ChannelPool` given at construction, if any."""
        if self.channels is not None:
            await self.channels.close()


def _as_aio_error(err: grpc.RpcError) -> aio.AioRpcError:
    """A sync `grpc.RpcError` (a `grpc.Call`) as the `AioRpcError` the caller raises."""
    code = getattr(err, "code", lambda: grpc.StatusCode.UNKNOWN)()
    details = getattr(err, "details", lambda: str(err))() or ""
    trailing = getattr(err, "trailing_metadata", lambda: ())() or ()
    return rpc_error(code, details, tuple((k, v) for k, v in trailing))
