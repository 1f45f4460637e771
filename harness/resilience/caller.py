"""The resilient grpc.aio caller: one logical call = attempts that its strategies allow, judge and space.

`ResilientCaller.call()` owns the attempt loop and only asks questions
(`harness.resilience.attempt`): may the next attempt go out (`allow`: deadline,
adaptive throttle, budget), which backend (the balancer, whose pick each backend's
breaker must allow), what did it say (`on_outcome`, with the answer classified once
by the configuration's `OutcomeClassifier`), and how long until the next one
(`delay`: the retry schedule proposes, the deadline, token bucket and budget may
refuse). Every attempt of one logical call carries the same `x-request-id` plus
`grpc-previous-rpc-attempts`; the logical call is recorded once by a
`ClientRecorder` whose `config` label is the configuration's name. How attempts
reach a backend is `harness.resilience.invoke`'s job.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random as _random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import grpc
from grpc import aio

from harness.core import headers as h
from harness.core import metrics as m
from harness.core import scope
from harness.core.headers import DEFAULT_DRILL_TENANT, traffic_of
from harness.interceptors import ORGANIC, ClientRecorder, Tagging
from harness.resilience import config as _config
from harness.resilience.attempt import (
    BUDGET_REFUSALS,
    BudgetGate,
    CallState,
    DeadlineGate,
    Outcome,
    RetrySchedule,
    Strategy,
    ThrottleGate,
    TokenGate,
    outcome_code,
)
from harness.resilience.balancer import Backend
from harness.resilience.breaker import CircuitBreaker, State
from harness.resilience.deadline import EarlyGiveUp
from harness.resilience.invoke import ChannelPool, Invoke, as_aio_error, full_method, rpc_error
from harness.resilience.retry import NO_PUSHBACK, parse_pushback
from harness.resilience.timeouts import Timeout

#: grpc core strips application-set `grpc-*` metadata (checked with grpcio 1.85: the server never
#: sees `grpc-previous-rpc-attempts`), so the attempt number also travels under this key.
PREVIOUS_ATTEMPTS_FALLBACK = h.DRILL_PREVIOUS_RPC_ATTEMPTS

#: What a locally answered call says (no attempt's error to relay): status and details per refusal.
_LOCAL_ANSWERS: dict[str, tuple[grpc.StatusCode, str]] = {
    "deadline": (grpc.StatusCode.DEADLINE_EXCEEDED, "early give-up: deadline too close"),
    "throttle": (grpc.StatusCode.UNAVAILABLE, "adaptive throttling: rejected locally"),
    "breaker": (grpc.StatusCode.UNAVAILABLE, "breaker: no backend may be called"),
    "no_backend": (grpc.StatusCode.UNAVAILABLE, "no_backend: no backend may be called"),
    "budget": (grpc.StatusCode.UNAVAILABLE, "retry budget exhausted"),
    "throttling": (grpc.StatusCode.UNAVAILABLE, "retry throttling: no tokens"),
}


@dataclasses.dataclass
class _Plan:
    """What one method gets from the configuration, built once per caller."""

    label: str
    #: per-attempt timeout (fixed, p99-derived, none)
    timeout: Timeout
    #: the call's deadline rule for this method (methodConfig timeout, propagation)
    deadline: Any
    #: asked before an attempt, before the pick / after it (in this order)
    before_pick: tuple[Strategy, ...]
    after_pick: tuple[Strategy, ...]
    #: told every outcome
    observers: tuple[Strategy, ...]
    #: asked after a failure, in this order: the schedule proposes, the rest may refuse
    retry: tuple[Strategy, ...]


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not targets:
            raise ValueError("a caller needs at least one target")
        if not invokers:
            raise ValueError("a caller needs at least one method to invoke")
        self.addresses = config.targets(list(targets))
        self.config = config
        self.service = service
        self.drill_tenants = drill_tenants
        self.channels = channels
        self._tagging = tagging
        if channels is not None:
            channels.tagging = tagging
            channels.add_options(config.channel_options())  # keepalive: before the first channel is made
        self._sleep = sleep
        self._rng = rng
        self._clock = clock
        self._invokers = {full_method(k).lstrip("/"): v for k, v in invokers.items()}
        by_short: dict[str, list[str]] = collections.defaultdict(list)
        for label in self._invokers:
            by_short[label.rsplit("/", 1)[-1]].append(label)
        self._short = {k: v[0] for k, v in by_short.items() if len(v) == 1}
        self._plans: dict[str, _Plan] = {}
        name = config.name
        self.recorder = ClientRecorder(service, name, ",".join(self.addresses))
        self.picks: collections.Counter[str] = collections.Counter()
        self.classifier = config.build_classifier()
        self.balancer = config.build_balancer(self.addresses, rng, clock=clock)
        self.breakers = config.build_breakers(self._on_transition, clock=clock)
        self.budget = config.build_budget(clock=clock)
        self.throttle = config.build_throttle()
        self.adaptive = config.build_adaptive_throttle(clock=clock, rng=rng)
        self.timeouts = config.build_timeouts()
        # strategies shared by every method of this caller (per-method ones are built in `_plan`)
        self._throttle_gate: tuple[Strategy, ...] = (ThrottleGate(self.adaptive),) if self.adaptive else ()
        self._budget_gate = BudgetGate(self.budget)
        self._picks = m.ChildCache(m.BALANCER_PICKS)
        self._retries = m.ChildCache(m.RETRY_ATTEMPTS)
        self._exhausted = m.ChildCache(m.RETRY_BUDGET_EXHAUSTED)
        self._fail_fast = m.ChildCache(m.FAIL_FAST)
        self._state = m.ChildCache(m.BREAKER_STATE)
        self._adaptive_p = m.ChildCache(m.ADAPTIVE_THROTTLE_PROBABILITY)
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
            deadline = dataclasses.replace(cfg.deadline, total_s=mp.timeout_s)
            gate = DeadlineGate(deadline, clock=self._clock)
            schedule = RetrySchedule(mp.retry, cfg.build_backoff(self._rng, mp.backoff))
            # the caller's one token bucket, judging failures by this method's retryable codes
            token = (TokenGate(self.throttle, mp.retry.codes),) if self.throttle is not None else ()
            plan = self._plans[label] = _Plan(
                label,
                self.timeouts.for_method(label),
                deadline,
                before_pick=(gate, *self._throttle_gate),
                after_pick=(self._budget_gate,),
                observers=(gate, *self._throttle_gate, *token),
                retry=(schedule, gate, *token, self._budget_gate),
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

    def _refuse(self, label: str, reason: str, last: aio.AioRpcError | None) -> aio.AioRpcError:
        """Count a refusal and return what the call ends with: the last attempt's error, else a local answer."""
        name = self.config.name
        if reason in BUDGET_REFUSALS:
            self._exhausted(self.service, label, name).inc()
        elif reason:
            self._fail_fast(self.service, label, name, reason).inc()
        if last is not None:
            return last
        code, details = _LOCAL_ANSWERS.get(reason, (grpc.StatusCode.UNAVAILABLE, f"{reason}: refused locally"))
        return rpc_error(code, details)

    def _refusal(self, strategies: Sequence[Strategy], call: CallState) -> str | None:
        """The first strategy that does not allow the next attempt (its refusal), else None."""
        for s in strategies:
            if not s.allow(call):
                return s.refusal or "refused"
        return None

    def _call_state(self, plan: _Plan, label: str, cur, timeout, md_in) -> tuple[CallState, list]:
        """The logical call's deadline (and, at the edge, the origin-deadline header it implies)."""
        incoming = cur.time_remaining() if cur is not None else None
        try:
            budget_s = plan.deadline.call_budget(incoming, timeout)
        except EarlyGiveUp as exc:
            self._fail_fast(self.service, label, self.config.name, "deadline").inc()
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, f"early give-up: {exc}") from None
        if budget_s is not None and (cur is None or cur.origin_deadline is None):
            if all(k != h.ORIGIN_DEADLINE for k, _ in md_in):
                # We are the edge: the origin deadline is the logical call's, not one attempt's.
                md_in = [*md_in, (h.ORIGIN_DEADLINE, f"{time.time() + budget_s:.3f}")]
        deadline = None if budget_s is None else self._clock() + budget_s
        return CallState(label, deadline), md_in

    async def _attempts(self, plan: _Plan, request, md_in, request_id, cur, timeout) -> Any:
        label, invoke, name = plan.label, self._invokers[plan.label], self.config.name
        call, md_in = self._call_state(plan, label, cur, timeout, md_in)
        last: aio.AioRpcError | None = None
        while True:
            reason = self._refusal(plan.before_pick, call)
            if self.adaptive is not None:
                self._adaptive_p(self.service, name).set(self.adaptive.reject_probability())
            if reason is not None:
                raise self._refuse(label, reason, last)
            backend, breaker, reason = self._choose(frozenset(call.tried))
            if backend is None:
                raise self._refuse(label, reason, last)
            reason = self._refusal(plan.after_pick, call)
            if reason is not None:
                if breaker is not None:
                    breaker.release()
                raise self._refuse(label, reason, last)
            attempt_timeout, per_try_binding = self._attempt_timeout(plan, call)
            if call.retry:
                self._retries(self.service, label, name).inc()
            md = [*md_in, (h.REQUEST_ID, request_id), (h.CONFIG, name)]
            if call.retry:
                n = str(call.attempts)
                md += [(h.PREVIOUS_RPC_ATTEMPTS, n), (PREVIOUS_ATTEMPTS_FALLBACK, n)]
            call.tried.add(backend.address)
            call.attempts += 1
            code, pushback, local_error = grpc.StatusCode.OK, NO_PUSHBACK, False
            self.balancer.started(backend)
            t0 = self._clock()
            try:
                reply = await invoke(backend.address, request, attempt_timeout, tuple(md))
            except grpc.RpcError as err:
                last = err if isinstance(err, aio.AioRpcError) else as_aio_error(err)
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
                rtt = self._clock() - t0
                if local_error:
                    self.balancer.abandoned(backend)
                    if breaker is not None:
                        breaker.release()
                else:
                    name_ = outcome_code(code)
                    outcome = Outcome(
                        name_,
                        self.classifier.classify(name_, pushback),
                        rtt,
                        pushback,
                        per_try_binding and code is grpc.StatusCode.DEADLINE_EXCEEDED,
                    )
                    self._observe(plan, call, backend, breaker, code, outcome)
            if outcome.ok:
                return reply
            assert last is not None
            sleep_s: float | None = 0.0
            for s in plan.retry:
                sleep_s = s.delay(call, outcome, sleep_s)
                if sleep_s is None:
                    raise self._refuse(label, s.refusal, last)
            if sleep_s > 0:
                await self._sleep(sleep_s)

    def _attempt_timeout(self, plan: _Plan, call: CallState) -> tuple[float | None, bool]:
        """(timeout of this attempt, whether it is the per-try timeout rather than the call's deadline)."""
        per_try = plan.timeout.timeout()
        if call.deadline is None:
            return per_try, per_try is not None
        left = call.deadline - self._clock()
        if per_try is not None and per_try < left:
            return per_try, True
        return left, False

    def _observe(
        self, plan: _Plan, call: CallState, backend: Backend, breaker: CircuitBreaker | None, code, outcome: Outcome
    ) -> None:
        """Tell every strategy one attempt's outcome (CANCELLED tells the latency windows nothing)."""
        self.balancer.finished(backend, outcome.rtt, code)
        if breaker is not None:
            breaker.record(outcome.verdict)
        if outcome.code != "CANCELLED":
            plan.timeout.observe(outcome.rtt)
        for s in plan.observers:
            s.on_outcome(call, backend.address, outcome)

    async def close(self) -> None:
        """Close the `ChannelPool` given at construction, if any."""
        if self.channels is not None:
            await self.channels.close()
