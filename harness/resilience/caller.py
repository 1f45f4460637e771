"""The resilient grpc.aio caller: one logical call = retries, budget, breaker, deadline, balancing.

`ResilientCaller.call()` owns the attempt loop and only asks the strategies
questions (which backend, may I, how long, again?). Every attempt of one logical
call carries the same `x-request-id` plus `grpc-previous-rpc-attempts`; attempts
are recorded by the `DrillClientInterceptor` on each backend channel
(`record_calls=False`), the logical call once by a `ClientRecorder` whose
`config` label is the configuration's name. `downstream_for()` is what
`drill serve --config NAME` uses to call the next hop.
"""

from __future__ import annotations

import asyncio
import random as _random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from grpc import aio

from harness.core import headers as h
from harness.core import metrics as m
from harness.core import scope
from harness.core.headers import DEFAULT_DRILL_TENANT, traffic_of
from harness.demo.proto import drill_pb2_grpc
from harness.demo.service import Downstream
from harness.interceptors import ORGANIC, ClientRecorder, DrillClientInterceptor, Tagging
from harness.resilience import config as _config
from harness.resilience.balancer import Backend
from harness.resilience.breaker import CircuitBreaker, State
from harness.resilience.deadline import EarlyGiveUp
from harness.resilience.retry import NO_PUSHBACK, parse_pushback, short_method

#: grpc core strips application-set `grpc-*` metadata (checked with grpcio 1.85: the server never
#: sees `grpc-previous-rpc-attempts`), so the attempt number also travels under this key.
PREVIOUS_ATTEMPTS_FALLBACK = h.DRILL_PREVIOUS_RPC_ATTEMPTS

DEMO_SERVICE = "drill.v1.Demo"


def rpc_error(code: grpc.StatusCode, details: str, trailing: Sequence[tuple[str, str]] = ()) -> aio.AioRpcError:
    """An `AioRpcError` for a call answered locally (fail fast, early give-up)."""
    return aio.AioRpcError(code, aio.Metadata(), aio.Metadata(*trailing), details)


class ResilientCaller:
    """Calls the unary methods of the demo service on N replicas under one configuration."""

    def __init__(
        self,
        addresses: Sequence[str],
        config: _config.ResilienceConfig,
        *,
        service: str,
        tagging: Tagging = ORGANIC,
        drill_tenants: frozenset[str] = frozenset({DEFAULT_DRILL_TENANT}),
        rng: _random.Random | None = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.addresses = list(addresses)
        self.config = config
        self.service = service
        self.drill_tenants = drill_tenants
        self._tagging = tagging
        self._sleep = sleep
        name = config.name
        self._interceptors: dict[str, DrillClientInterceptor] = {}
        self._channels: dict[str, aio.Channel] = {}
        self._stubs: dict[str, drill_pb2_grpc.DemoStub] = {}
        for addr in self.addresses:
            ic = DrillClientInterceptor(
                tagging,
                service=service,
                config=name,
                target=addr,
                drill_tenants=drill_tenants,
                record_calls=False,
            )
            channel = aio.insecure_channel(addr, interceptors=[ic])
            self._interceptors[addr] = ic
            self._channels[addr] = channel
            self._stubs[addr] = drill_pb2_grpc.DemoStub(channel)
        self.recorder = ClientRecorder(service, name, ",".join(self.addresses))
        self.balancer = config.build_balancer(self.addresses, rng)
        self.breakers = config.build_breakers(self._on_transition)
        self.budget = config.build_budget()
        self.backoff = config.build_backoff(rng)
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
        for ic in self._interceptors.values():
            ic.tagging = value

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
        """One logical unary call of `method` (`Call`, `Write`); raises `aio.AioRpcError` on failure."""
        short = short_method(method)
        label = f"{DEMO_SERVICE}/{short}"
        cur = scope.current()
        md_in = [(k, v) for k, v in (metadata or ()) if k != h.REQUEST_ID]
        present = dict(metadata or ())
        request_id = present.get(h.REQUEST_ID) or (cur.request_id if cur is not None else "") or str(uuid.uuid4())
        fault_mode, traffic = self._labels(present, cur)
        start = time.perf_counter()
        code: grpc.StatusCode = grpc.StatusCode.OK
        try:
            return await self._attempts(short, label, request, md_in, request_id, cur, timeout)
        except aio.AioRpcError as err:
            code = err.code()
            raise
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        finally:
            self.recorder.call_finished(label, code, time.perf_counter() - start, fault_mode, traffic)

    def _choose(self, avoid: frozenset[str]) -> tuple[Backend | None, CircuitBreaker | None, str]:
        """A backend whose breaker lets the call through (preferring ones not tried yet), or a reason."""
        excluded = set(avoid)
        if not self.balancer.available(frozenset(excluded)):
            excluded.clear()  # nothing new to try: an already-tried backend beats none
        reason = "no_backend"
        for _ in range(len(self.addresses)):
            backend = self.balancer.pick(frozenset(excluded))
            if backend is None:
                break
            breaker = self.breakers.for_backend(backend.address) if self.breakers is not None else None
            if breaker is None or breaker.allow():
                self._picks(self.service, backend.address, self.config.name).inc()
                return backend, breaker, ""
            reason = "breaker"
            if self.breakers is not None and self.breakers.per == "service":
                break
            excluded.add(backend.address)
        return None, None, reason

    async def _attempts(self, short, label, request, md_in, request_id, cur, timeout) -> Any:
        cfg = self.config
        policy = cfg.retry
        name = cfg.name
        incoming = cur.time_remaining() if cur is not None else None
        try:
            budget_s = cfg.deadline.call_budget(incoming, timeout)
        except EarlyGiveUp as exc:
            self._fail_fast(self.service, label, name, "deadline").inc()
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, f"early give-up: {exc}") from None
        deadline = None if budget_s is None else time.monotonic() + budget_s
        if budget_s is not None and (cur is None or cur.origin_deadline is None):
            if all(k != h.ORIGIN_DEADLINE for k, _ in md_in):
                # We are the edge: the origin deadline is the logical call's, not one attempt's.
                md_in = [*md_in, (h.ORIGIN_DEADLINE, f"{time.time() + budget_s:.3f}")]
        self.budget.record_request()
        strategy = self.timeouts.for_method(label)
        previous_sleep = 0.0
        last: aio.AioRpcError | None = None
        tried: set[str] = set()
        for n in range(policy.max_attempts):
            backend, breaker, reason = self._choose(frozenset(tried))
            if backend is None:
                self._fail_fast(self.service, label, name, reason).inc()
                raise last or rpc_error(grpc.StatusCode.UNAVAILABLE, f"{reason}: no backend may be called")
            attempt_timeout = strategy.timeout()
            if deadline is not None:
                left = deadline - time.monotonic()
                if left < max(cfg.deadline.min_remaining_s, 0.001):
                    if breaker is not None:
                        breaker.release()
                    self._fail_fast(self.service, label, name, "deadline").inc()
                    raise last or rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "early give-up: deadline too close")
                attempt_timeout = left if attempt_timeout is None else min(attempt_timeout, left)
            md = [*md_in, (h.REQUEST_ID, request_id), (h.CONFIG, name)]
            if n:
                md += [(h.PREVIOUS_RPC_ATTEMPTS, str(n)), (PREVIOUS_ATTEMPTS_FALLBACK, str(n))]
            tried.add(backend.address)
            code = grpc.StatusCode.OK
            pushback = NO_PUSHBACK
            self.balancer.started(backend)
            t0 = time.monotonic()
            try:
                reply = await getattr(self._stubs[backend.address], short)(
                    request, timeout=attempt_timeout, metadata=tuple(md)
                )
            except aio.AioRpcError as err:
                code, last = err.code(), err
                pushback = parse_pushback(err.trailing_metadata())
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            finally:
                rtt = time.monotonic() - t0
                self.balancer.finished(backend, rtt, code)
                if breaker is not None:
                    breaker.record(code)
                if code is not grpc.StatusCode.CANCELLED:
                    strategy.observe(rtt)
            if code is grpc.StatusCode.OK:
                return reply
            assert last is not None
            if not policy.retryable(label, code, n + 1, pushback):
                raise last
            if policy.honour_pushback and pushback.sleep_s is not None:
                sleep_s = pushback.sleep_s
            else:
                sleep_s = self.backoff(n + 1, previous_sleep)
            if deadline is not None and time.monotonic() + sleep_s >= deadline - cfg.deadline.min_remaining_s:
                raise last  # the next attempt could not start before the deadline
            if not self.budget.try_acquire():
                self._exhausted(self.service, label, name).inc()
                raise last
            self._retries(self.service, label, name).inc()
            previous_sleep = sleep_s
            if sleep_s > 0:
                await self._sleep(sleep_s)
        assert last is not None
        raise last

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()


def as_downstream(caller: ResilientCaller) -> Downstream:
    """Adapt a caller to the demo servicer's `Downstream`: failures become this hop's status.

    With `pushback_on_give_up` the status carries `grpc-retry-pushback-ms: -1`, so a caller
    above that honours pushback does not retry what this hop already retried (retry at one layer).
    """
    trailing = ((h.RETRY_PUSHBACK_MS, "-1"),) if caller.config.retry.pushback_on_give_up else ()

    async def call(method: str, request, context: aio.ServicerContext):
        try:
            return await caller.call(method, request)
        except aio.AioRpcError as err:
            await context.abort(err.code(), err.details() or "downstream failed", trailing)

    return call


def parse_addresses(addresses: str) -> list[str]:
    out = [a.strip() for a in addresses.split(",") if a.strip()]
    if not out:
        raise ValueError("no downstream address given")
    return out


async def downstream_for(addresses: str, config: str, *, service: str) -> tuple[Downstream, ResilientCaller]:
    """(downstream, closeable) for `drill serve --downstream A,B --config NAME|PATH`."""
    cfg = _config.load(config)
    caller = ResilientCaller(parse_addresses(addresses), cfg, service=service)
    return as_downstream(caller), caller
