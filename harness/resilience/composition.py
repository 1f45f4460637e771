"""What a named resilience configuration is, and the fresh strategy objects it builds for each caller.

`ResilienceConfig` is the parsed, validated form of one configuration (contracts §9):
gRPC's own concepts (`retryPolicy`, `retryThrottling`, `methodConfig`) and our
extensions (budget, breaker, adaptive throttling, deadlines, per-attempt timeouts,
balancer, the outcome classifier). A configuration is a composition, not a flag
soup: each `build_*` returns a new, independent strategy, so two callers never
share a breaker or a budget. Reading YAML/JSON into this form is `config.py`'s job.
"""

from __future__ import annotations

import dataclasses
import json
import random as _random
import re
from collections.abc import Callable, Sequence
from typing import Any

from harness.resilience import backoff as _backoff
from harness.resilience import keepalive as _keepalive
from harness.resilience import reconnect as _reconnect
from harness.resilience._schema import ConfigError
from harness.resilience.balancer import Balancer, Ejection, PowerOfTwoChoices, RoundRobin
from harness.resilience.breaker import BreakerSet, CircuitBreaker, CountWindow, TimeWindow, Transition
from harness.resilience.budget import RetryBudget, RetryThrottle, Unlimited
from harness.resilience.deadline import DeadlinePolicy
from harness.resilience.outcome import OutcomeClassifier
from harness.resilience.retry import RetryPolicy
from harness.resilience.throttle import AdaptiveThrottle
from harness.resilience.timeouts import MethodTimeouts

__all__ = ["NO_RETRY", "MethodConfig", "MethodPlan", "ResilienceConfig"]

#: `balancer.kind` for gRPC's own round_robin over every target in one channel (`ResilienceConfig.targets`)
GRPC_ROUND_ROBIN = "grpc_round_robin"
_IPV4_PORT = re.compile(r"^\d{1,3}(\.\d{1,3}){3}:\d{1,5}$")

#: Backoff without retries: a method whose config has no retryPolicy makes one attempt.
NO_RETRY = RetryPolicy(max_attempts=1)


@dataclasses.dataclass(frozen=True)
class MethodConfig:
    """One gRPC `methodConfig` entry: which methods, their call timeout, their retry policy."""

    #: (service, method) pairs; "" = any. `(("", ""),)` is the default entry (`name: [{}]`).
    names: tuple[tuple[str, str], ...]
    timeout_s: float | None = None
    retry: RetryPolicy | None = None
    backoff: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class MethodPlan:
    """What applies to one method: its retry policy, backoff spec and call timeout (None = none)."""

    retry: RetryPolicy
    backoff: dict[str, Any]
    timeout_s: float | None


@dataclasses.dataclass(frozen=True)
class ResilienceConfig:
    """One named configuration. Sections that are None are off (no budget, no breaker...).

    `retry`, `backoff` and `deadline.total_s` are the defaults (gRPC's `name: [{}]` entry);
    `methods` holds the more specific `methodConfig` entries.
    """

    name: str
    retry: RetryPolicy
    backoff: dict[str, Any]
    budget: dict[str, Any] | None
    breaker: dict[str, Any] | None
    deadline: DeadlinePolicy
    timeouts: dict[str, Any]
    balancer: dict[str, Any]
    description: str = ""
    methods: tuple[MethodConfig, ...] = ()
    throttling: dict[str, float] | None = None
    #: client-side adaptive throttling (SRE book): {k, window_s}; None = off
    adaptive: dict[str, float] | None = None
    #: the outcome classifier: {relayed_give_ups: ignore | count}
    outcomes: dict[str, str] = dataclasses.field(default_factory=lambda: {"relayed_give_ups": "ignore"})
    #: keepalive (gRFC A8, `keepalive.py`): {time_s, timeout_s, ping_timeout_s, permit_without_calls, server}
    keepalive: dict[str, Any] | None = None
    #: reconnecting (gRPC's connection backoff, `reconnect.py`): {connect_timeout_s, initial_backoff_s,
    #: max_backoff_s}; None = gRPC's
    reconnect: dict[str, Any] | None = None

    # -- channels and servers --------------------------------------------------------------
    def channel_options(self) -> tuple[tuple[str, Any], ...]:
        """The gRPC channel options this configuration's callers add (keepalive; reconnecting; gRPC's round
        robin)."""
        lb = (("grpc.service_config", json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})),)
        return _keepalive.channel_options(self.keepalive) + _reconnect.channel_options(self.reconnect) + \
            (lb if self.balancer.get("kind") == GRPC_ROUND_ROBIN else ())  # fmt: skip

    def targets(self, addresses: Sequence[str]) -> list[str]:
        """The targets a caller's balancer picks among: `addresses`, or with `balancer.kind: grpc_round_robin`
        one target naming them all (`ipv4:A,B`), whose channel's own round robin picks only connections that
        are READY, so a connection keepalive found dead is left out until it reconnects."""
        if self.balancer.get("kind") != GRPC_ROUND_ROBIN or len(addresses) < 2:
            return list(addresses)
        bad = [a for a in addresses if not _IPV4_PORT.match(a)]
        if bad:
            raise ConfigError(f"balancer.kind {GRPC_ROUND_ROBIN}: every target must be an IPv4 HOST:PORT, not {bad}")
        return ["ipv4:" + ",".join(addresses)]

    def server_options(self) -> tuple[tuple[str, Any], ...]:
        """The gRPC server options a server running this configuration sets (its keepalive permit policy)."""
        return _keepalive.server_options(self.keepalive)

    # -- per method ------------------------------------------------------------------------
    def for_method(self, method: str) -> MethodPlan:
        """The most specific entry for `pkg.Service/Method` (gRPC: exact, then service, then default)."""
        service, _, short = method.lstrip("/").rpartition("/")
        for wanted in ((service, short), (service, "")):
            for entry in self.methods:
                if wanted in entry.names:
                    return MethodPlan(
                        entry.retry or NO_RETRY,
                        entry.backoff or {"kind": "none"},
                        entry.timeout_s,
                    )
        return MethodPlan(self.retry, self.backoff, self.deadline.total_s)

    # -- builders: fresh, independent strategy objects per caller --------------------------
    def build_backoff(self, rng: _random.Random | None = None, spec: dict[str, Any] | None = None) -> _backoff.Backoff:
        return _backoff.build(self.backoff if spec is None else spec, rng)

    def build_budget(self, clock: Callable[[], float] | None = None) -> RetryBudget | Unlimited:
        if self.budget is None:
            return Unlimited()
        kw = {"clock": clock} if clock else {}
        return RetryBudget(
            float(self.budget.get("ratio", 0.1)),
            float(self.budget.get("min_retries_per_s", 1.0)),
            float(self.budget.get("window_s", 10.0)),
            burst_s=self.budget.get("burst_s", 1.0),
            **kw,
        )

    def build_throttle(self) -> RetryThrottle | None:
        """gRPC's `retryThrottling` token bucket (gRFC A6), or None."""
        if self.throttling is None:
            return None
        return RetryThrottle(self.throttling["max_tokens"], self.throttling["token_ratio"])

    def build_adaptive_throttle(
        self, clock: Callable[[], float] | None = None, rng: _random.Random | None = None
    ) -> AdaptiveThrottle | None:
        """Client-side adaptive throttling (SRE book, "Handling Overload"), or None."""
        if self.adaptive is None:
            return None
        kw: dict[str, Any] = {"clock": clock} if clock else {}
        return AdaptiveThrottle(self.adaptive["k"], self.adaptive["window_s"], rng=rng, **kw)

    def build_classifier(self) -> OutcomeClassifier:
        """What an attempt's answer counts as for breakers and throttles (see `outcome.py`)."""
        return OutcomeClassifier(self.outcomes.get("relayed_give_ups", "ignore"))

    def build_breakers(
        self,
        on_transition: Callable[[str], Transition] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> BreakerSet | None:
        spec = self.breaker
        if spec is None:
            return None
        kw: dict[str, Any] = {"clock": clock} if clock else {}
        window_spec = dict(spec.get("window") or {"kind": "count", "size": 100})

        def factory(key: str) -> CircuitBreaker:
            kind = window_spec.get("kind", "count")
            if kind == "count":
                window: CountWindow | TimeWindow = CountWindow(int(window_spec.get("size", 100)))
            elif kind == "time":
                window = TimeWindow(float(window_spec.get("seconds", 10.0)), **kw)
            else:
                raise ConfigError(f"unknown breaker window kind {kind!r}")
            return CircuitBreaker(
                failure_rate=float(spec.get("failure_rate", 0.5)),
                min_calls=int(spec.get("min_calls", 20)),
                window=window,
                open_s=float(spec.get("open_s", 5.0)),
                half_open_probes=int(spec.get("half_open_probes", 3)),
                on_transition=on_transition(key) if on_transition else None,
                **kw,
            )

        return BreakerSet(factory, str(spec.get("per", "backend")))

    def build_timeouts(self) -> MethodTimeouts:
        """Per-attempt timeouts (our extension; gRPC's `timeout` covers the whole call)."""
        return MethodTimeouts(self.timeouts.get("default"), self.timeouts.get("methods"))

    def build_balancer(
        self,
        addresses: Sequence[str],
        rng: _random.Random | None = None,
        on_pick: Callable[[str], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> Balancer:
        spec = self.balancer
        kind = str(spec.get("kind", "round_robin")).lower().replace("-", "_")
        if kind in ("round_robin", GRPC_ROUND_ROBIN):
            picker: Any = RoundRobin()
        elif kind in ("p2c", "power_of_two"):
            picker = PowerOfTwoChoices(rng)
        else:
            raise ConfigError(f"unknown balancer kind {kind!r}")
        ej = spec.get("ejection")
        ejection = Ejection(**ej) if ej else None
        kw = {"clock": clock} if clock else {}
        return Balancer(
            addresses,
            picker,
            decay_s=float(spec.get("decay_s", 10.0)),
            ejection=ejection,
            on_pick=on_pick,
            **kw,
        )
