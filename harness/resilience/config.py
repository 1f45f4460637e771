"""Named resilience configurations (DESIGN §9): YAML in, composed strategy objects out.

A configuration is a composition, not a flag soup: each YAML section names one
strategy (retry + backoff, budget, breaker, deadline, timeouts, balancer) and
`ResilienceConfig` builds fresh instances of them for each caller. Load by name
(`harness/configs/NAME.yaml`) or by path. Unknown keys are refused so a typo
never silently turns a mechanism off.
"""

from __future__ import annotations

import dataclasses
import pathlib
import random as _random
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from harness.core.status import STATUS_NAMES
from harness.resilience import backoff as _backoff
from harness.resilience.balancer import Balancer, Ejection, PowerOfTwoChoices, RoundRobin
from harness.resilience.breaker import BreakerSet, CircuitBreaker, CountWindow, TimeWindow, Transition
from harness.resilience.budget import RetryBudget, Unlimited
from harness.resilience.deadline import DeadlinePolicy
from harness.resilience.retry import RetryPolicy
from harness.resilience.timeouts import MethodTimeouts

CONFIG_DIR = pathlib.Path(__file__).resolve().parent.parent / "configs"
NAMES: tuple[str, ...] = ("naive", "jitter", "budget", "resilient", "resilient-p2c")

_SECTIONS = {
    "name": None,
    "description": None,
    "retry": {"max_attempts", "codes", "non_idempotent", "backoff", "honour_pushback", "pushback_on_give_up"},
    "budget": {"ratio", "min_retries_per_s", "window_s"},
    "breaker": {"failure_rate", "min_calls", "window", "open_s", "half_open_probes", "per"},
    "deadline": {"propagate", "hop_margin_s", "min_remaining_s", "total_s"},
    "timeouts": {"default", "methods"},
    "balancer": {"kind", "decay_s", "ejection"},
}


class ConfigError(ValueError):
    """A configuration that cannot be loaded as written."""


def _check_keys(raw: dict[str, Any], source: str) -> None:
    for key, value in raw.items():
        if key not in _SECTIONS:
            raise ConfigError(f"{source}: unknown section {key!r}")
        allowed = _SECTIONS[key]
        if allowed is None or value is None:
            continue
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: section {key!r} must be a mapping or null")
        unknown = set(value) - allowed
        if unknown:
            raise ConfigError(f"{source}: unknown keys in {key!r}: {sorted(unknown)}")


@dataclasses.dataclass(frozen=True)
class ResilienceConfig:
    """One named configuration. Sections that are None are off (no budget, no breaker...)."""

    name: str
    retry: RetryPolicy
    backoff: dict[str, Any]
    budget: dict[str, Any] | None
    breaker: dict[str, Any] | None
    deadline: DeadlinePolicy
    timeouts: dict[str, Any]
    balancer: dict[str, Any]
    description: str = ""

    # -- builders: fresh, independent strategy objects per caller --------------------------
    def build_backoff(self, rng: _random.Random | None = None) -> _backoff.Backoff:
        return _backoff.build(self.backoff, rng)

    def build_budget(self, clock: Callable[[], float] | None = None) -> RetryBudget | Unlimited:
        if self.budget is None:
            return Unlimited()
        kw = {"clock": clock} if clock else {}
        return RetryBudget(
            float(self.budget.get("ratio", 0.1)),
            float(self.budget.get("min_retries_per_s", 1.0)),
            float(self.budget.get("window_s", 10.0)),
            **kw,
        )

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
        if kind == "round_robin":
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


def from_dict(raw: dict[str, Any], source: str = "<dict>") -> ResilienceConfig:
    """Validate and build a configuration from a parsed YAML mapping."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a configuration is a mapping")
    _check_keys(raw, source)
    name = str(raw.get("name") or "").strip()
    if not name:
        raise ConfigError(f"{source}: `name` is required (it is the `config` label)")
    r = dict(raw.get("retry") or {})
    codes = frozenset(str(c).upper() for c in r.get("codes", ["UNAVAILABLE"]))
    bad = codes - STATUS_NAMES
    if bad or "OK" in codes:
        raise ConfigError(f"{source}: retry codes not retryable gRPC status names: {sorted(bad | (codes & {'OK'}))}")
    max_attempts = int(r.get("max_attempts", 1))
    if max_attempts < 1:
        raise ConfigError(f"{source}: retry.max_attempts must be ≥ 1")
    retry = RetryPolicy(
        max_attempts=max_attempts,
        codes=codes,
        non_idempotent=frozenset(r.get("non_idempotent", ["Write"])),
        honour_pushback=bool(r.get("honour_pushback", True)),
        pushback_on_give_up=bool(r.get("pushback_on_give_up", False)),
    )
    d = dict(raw.get("deadline") or {})
    deadline = DeadlinePolicy(
        propagate=bool(d.get("propagate", False)),
        hop_margin_s=float(d.get("hop_margin_s", 0.01)),
        min_remaining_s=float(d.get("min_remaining_s", 0.005)),
        total_s=None if d.get("total_s") is None else float(d["total_s"]),
    )
    cfg = ResilienceConfig(
        name=name,
        description=str(raw.get("description") or ""),
        retry=retry,
        backoff=dict(r.get("backoff") or {"kind": "none"}),
        budget=None if raw.get("budget") is None else dict(raw["budget"]),
        breaker=None if raw.get("breaker") is None else dict(raw["breaker"]),
        deadline=deadline,
        timeouts=dict(raw.get("timeouts") or {}),
        balancer=dict(raw.get("balancer") or {"kind": "round_robin"}),
    )
    # Build once to surface bad values now rather than on the first call.
    try:
        cfg.build_backoff()
        cfg.build_budget()
        breakers = cfg.build_breakers()
        if breakers is not None:
            breakers.for_backend("check")
        cfg.build_balancer(["check"])
        cfg.build_timeouts().for_method("check")
    except (TypeError, ValueError, KeyError) as exc:
        raise ConfigError(f"{source}: {exc}") from exc
    return cfg


def load(name_or_path: str) -> ResilienceConfig:
    """Load a configuration by name (`resilient`) or by YAML path (`./my.yaml`)."""
    path = pathlib.Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") or path.exists()):
        path = CONFIG_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise ConfigError(f"unknown configuration {name_or_path!r}; named ones: {', '.join(NAMES)}")
    with open(path, encoding="utf-8") as fh:
        raw = yaml.safe_load(fh)
    return from_dict(raw, str(path))
