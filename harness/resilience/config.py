"""Named resilience configurations (contracts §9): YAML or gRPC service-config JSON in, `ResilienceConfig` out.

Keys follow gRPC's service config where it has the concept: `retryPolicy`
(`maxAttempts`, `initialBackoff`, `maxBackoff`, `backoffMultiplier`,
`retryableStatusCodes`), `retryThrottling` (`maxTokens`, `tokenRatio`) and
`methodConfig` (`name: [{service, method}]`, `timeout`, `retryPolicy`), so a real
service config loads as is. Our extensions sit beside them as top-level keys:
`backoff` (jitter kind), `pushback`, `retryBudget`, `breaker`,
`adaptiveThrottling`, `outcomes`, `deadline`, `attemptTimeouts`, `balancer`,
`nonIdempotentMethods`, `keepalive` (gRFC A8, as channel and server options: `keepalive.py`).
Validation is strict: an unknown key, a wrong type or an
out-of-range value anywhere is a `ConfigError` naming its key path, so a typo
never silently turns a mechanism off. What a configuration builds is
`composition.py`'s job.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

import yaml

from harness.core.status import STATUS_NAMES
from harness.resilience import keepalive as _keepalive
from harness.resilience import reconnect as _reconnect
from harness.resilience._schema import ConfigError, Reader
from harness.resilience.composition import GRPC_ROUND_ROBIN, NO_RETRY, MethodConfig, ResilienceConfig
from harness.resilience.deadline import DeadlinePolicy
from harness.resilience.outcome import RELAYED_GIVE_UPS
from harness.resilience.retry import MAX_ATTEMPTS_CAP, RetryPolicy

__all__ = ["CONFIG_DIR", "NAMES", "ConfigError", "MethodConfig", "ResilienceConfig", "from_dict", "load"]

CONFIG_DIR = pathlib.Path(__file__).resolve().parent.parent / "configs"
NAMES: tuple[str, ...] = ("naive", "jitter", "budget", "resilient", "resilient-p2c", "throttled")


# -- parsing ---------------------------------------------------------------------------------
_TOP = (
    "name", "description", "methodConfig", "retryPolicy", "retryThrottling", "nonIdempotentMethods",
    "backoff", "pushback", "retryBudget", "breaker", "adaptiveThrottling", "outcomes", "deadline",
    "attemptTimeouts", "balancer", "keepalive", "reconnect",
)  # fmt: skip
_RETRY_POLICY = ("maxAttempts", "initialBackoff", "maxBackoff", "backoffMultiplier", "retryableStatusCodes")
_JITTER = ("full", "none", "decorrelated")


@dataclasses.dataclass(frozen=True)
class _Common:
    """Settings every retry policy of one configuration shares (our extensions)."""

    jitter: str
    non_idempotent: frozenset[str]
    honour_pushback: bool
    pushback_on_give_up: bool
    max_pushback_s: float


def _retry_policy(r: Reader, common: _Common) -> tuple[RetryPolicy, dict[str, Any]]:
    """gRPC's retryPolicy (every field required, as in gRPC) -> (policy, backoff spec)."""
    attempts = r.number("maxAttempts", integer=True, lo=2, hi=MAX_ATTEMPTS_CAP)
    initial = r.duration("initialBackoff")  # gRPC wants > 0; 0s = immediate retries (the naive baseline)
    cap = r.duration("maxBackoff")
    if cap < initial:
        r.fail(r.key_path("maxBackoff"), f"{cap:g}s is below initialBackoff ({initial:g}s)")
    multiplier = r.number("backoffMultiplier", lo=0.0, lo_open=True)
    codes = [c.upper() for c in r.strings("retryableStatusCodes")]
    bad = sorted({c for c in codes if c not in STATUS_NAMES or c == "OK"})
    if not codes or bad:
        r.fail(r.key_path("retryableStatusCodes"), f"needs retryable gRPC status names (bad: {bad or 'empty'})")
    if initial == 0 or common.jitter == "none":
        spec: dict[str, Any] = (
            {"kind": "none"} if initial == 0 else {"kind": "exponential", "base_s": initial, "cap_s": cap}
        )
    elif common.jitter == "full":
        spec = {"kind": "full_jitter", "base_s": initial, "cap_s": cap}
    else:
        spec = {"kind": "decorrelated", "base_s": initial, "cap_s": cap}
    if spec["kind"] != "none":
        spec["multiplier"] = multiplier
    policy = RetryPolicy(
        max_attempts=attempts,
        codes=frozenset(codes),
        non_idempotent=common.non_idempotent,
        honour_pushback=common.honour_pushback,
        pushback_on_give_up=common.pushback_on_give_up,
        max_pushback_s=common.max_pushback_s,
    )
    return policy, spec


def _method_names(r: Reader, index: int) -> tuple[tuple[str, str], ...]:
    raw = r.raw.get("name")
    path = r.key_path("name")
    if not isinstance(raw, list) or not raw:
        r.fail(path, "must be a non-empty list of {service, method}")
    names = []
    for i, item in enumerate(raw):
        n = Reader(item, f"{path}[{i}]", r.source, ("service", "method"))
        service, method = n.string("service", ""), n.string("method", "")
        if method and not service:
            n.fail(n.key_path("method"), "a method needs its service")
        names.append((service, method))
    return tuple(names)


def _method_configs(top: Reader, common: _Common) -> list[MethodConfig]:
    raw = top.raw.get("methodConfig") or []
    if not isinstance(raw, list):
        top.fail("methodConfig", "must be a list")
    out: list[MethodConfig] = []
    seen: dict[tuple[str, str], int] = {}
    for i, item in enumerate(raw):
        r = Reader(item, f"methodConfig[{i}]", top.source, ("name", "timeout", "retryPolicy", "waitForReady"))
        names = _method_names(r, i)
        for name in names:
            if name in seen:
                r.fail(r.key_path("name"), f"{name} already named in methodConfig[{seen[name]}]")
            seen[name] = i
        if r.has("waitForReady"):
            r.boolean("waitForReady")  # accepted (gRPC key), no effect here
        timeout = r.duration("timeout", None, lo=0.0, lo_open=True)
        policy = spec = None
        rp = r.child("retryPolicy", _RETRY_POLICY)
        if rp is not None:
            policy, spec = _retry_policy(rp, common)
        out.append(MethodConfig(names, timeout, policy, spec))
    return out


def _budget(r: Reader | None) -> dict[str, Any] | None:
    if r is None:
        return None
    out = {
        "ratio": r.number("ratio", lo=0.0, hi=1.0),
        "min_retries_per_s": r.number("minRetriesPerSecond", 1.0, lo=0.0),
        "window_s": r.duration("window", 10.0, lo_open=True),
    }
    out["burst_s"] = r.duration("burstWindow", min(1.0, out["window_s"]), lo_open=True)
    if out["ratio"] == 0 and out["min_retries_per_s"] == 0:
        r.fail(r.path, "ratio 0 and minRetriesPerSecond 0 allow no retry at all (to retry never, drop retryPolicy)")
    if out["burst_s"] > out["window_s"]:
        r.fail(r.key_path("burstWindow"), f"{out['burst_s']:g}s is longer than window ({out['window_s']:g}s)")
    return out


def _adaptive(r: Reader | None) -> dict[str, float] | None:
    if r is None:
        return None
    return {
        # K < 1 would reject requests the backend accepts; the SRE book uses 2
        "k": r.number("k", 2.0, lo=1.0),
        "window_s": r.duration("window", 10.0, lo_open=True),
    }


def _outcomes(r: Reader | None) -> dict[str, str]:
    if r is None:
        return {"relayed_give_ups": "ignore"}
    return {"relayed_give_ups": r.string("relayedGiveUps", "ignore", choices=RELAYED_GIVE_UPS)}


def _breaker(r: Reader | None) -> dict[str, Any] | None:
    if r is None:
        return None
    out: dict[str, Any] = {
        "failure_rate": r.number("failureRate", 0.5, lo=0.0, lo_open=True, hi=1.0),
        "min_calls": r.number("minCalls", 20, lo=1, integer=True),
        "open_s": r.duration("openDuration", 5.0, lo_open=True),
        "half_open_probes": r.number("halfOpenProbes", 3, lo=1, integer=True),
        "per": r.string("per", "backend", choices=("backend", "service")),
        "window": {"kind": "count", "size": 100},
    }
    raw_window = r.raw.get("window")
    if raw_window is not None:
        kind = raw_window.get("kind", "count") if isinstance(raw_window, dict) else None
        kind = kind if isinstance(kind, str) else None
        allowed = {"count": ("kind", "size"), "time": ("kind", "duration")}.get(kind, ("kind",))
        w = Reader(raw_window, r.key_path("window"), r.source, allowed)
        w.string("kind", "count", choices=("count", "time"))
        if kind == "count":
            out["window"] = {"kind": "count", "size": w.number("size", lo=1, integer=True)}
        else:
            out["window"] = {"kind": "time", "seconds": w.duration("duration", lo=1.0)}
    window = out["window"]
    if window["kind"] == "count" and out["min_calls"] > window["size"]:
        r.fail(r.key_path("minCalls"), f"{out['min_calls']} is larger than breaker.window.size ({window['size']})")
    return out


def _attempt_timeout(raw: Any, path: str, source: str) -> dict[str, Any]:
    kind = raw.get("kind", "none") if isinstance(raw, dict) else None
    kind = kind if isinstance(kind, str) else None
    allowed = {
        "none": ("kind",),
        "fixed": ("kind", "timeout"),
        "p99": ("kind", "factor", "floor", "cap", "window", "minSamples"),
    }.get(kind, ("kind",))
    r = Reader(raw, path, source, allowed)
    r.string("kind", "none", choices=("none", "fixed", "p99"))
    if kind == "fixed":
        return {"kind": "fixed", "seconds": r.duration("timeout", lo_open=True)}
    if kind == "p99":
        spec = {
            "kind": "p99",
            "factor": r.number("factor", 1.5, lo=0.0, lo_open=True),
            "floor_s": r.duration("floor", 0.05, lo_open=True),
            "cap_s": r.duration("cap", 2.0, lo_open=True),
            "window": r.number("window", 200, lo=1, integer=True),
            "min_samples": r.number("minSamples", 20, lo=1, integer=True),
        }
        if spec["floor_s"] > spec["cap_s"]:
            r.fail(r.key_path("floor"), f"{spec['floor_s']:g}s is above cap ({spec['cap_s']:g}s)")
        if spec["min_samples"] > spec["window"]:
            r.fail(
                r.key_path("minSamples"),
                f"{spec['min_samples']} is larger than window ({spec['window']}): the p99 would never be used",
            )
        return spec
    return {"kind": "none"}


def _attempt_timeouts(r: Reader | None) -> dict[str, Any]:
    if r is None:
        return {}
    out: dict[str, Any] = {}
    if r.has("default"):
        out["default"] = _attempt_timeout(r.raw["default"], r.key_path("default"), r.source)
    methods = r.raw.get("methods")
    if methods is not None:
        if not isinstance(methods, dict):
            r.fail(r.key_path("methods"), "must be a mapping of method name to timeout")
        path = r.key_path("methods")
        out["methods"] = {str(k): _attempt_timeout(v, f"{path}.{k}", r.source) for k, v in methods.items()}
    return out


def _balancer(r: Reader | None) -> dict[str, Any]:
    if r is None:
        return {"kind": "round_robin"}
    out: dict[str, Any] = {
        "kind": r.string("kind", "round_robin", choices=("round_robin", "p2c", GRPC_ROUND_ROBIN)),
        "decay_s": r.duration("decay", 10.0, lo_open=True),
    }
    allowed = (
        "consecutiveFailures", "baseEjectionTime", "maxEjectionTime", "maxEjectionPercent", "latencyFactor",
        "minLatency",
    )  # fmt: skip
    e = r.child("ejection", allowed)
    if e is not None:
        ej = out["ejection"] = {
            "consecutive_failures": e.number("consecutiveFailures", 5, lo=0, integer=True),
            "base_s": e.duration("baseEjectionTime", 10.0, lo_open=True),
            "max_s": e.duration("maxEjectionTime", 300.0, lo_open=True),
            # 0% could never eject anyone: refused (to turn ejection off, drop the section).
            "max_percent": e.number("maxEjectionPercent", 50, lo=1, hi=100, integer=True),
            "latency_factor": e.number("latencyFactor", None, lo=1.0, lo_open=True) if e.has("latencyFactor") else None,
            "min_latency_s": e.duration("minLatency", 0.05),
        }
        if ej["max_s"] < ej["base_s"]:
            e.fail(
                e.key_path("maxEjectionTime"),
                f"{ej['max_s']:g}s is below baseEjectionTime ({ej['base_s']:g}s)",
            )
        if ej["consecutive_failures"] == 0 and ej["latency_factor"] is None:
            e.fail(e.path, "never ejects (consecutiveFailures 0 and no latencyFactor); drop the section to turn it off")
    return out


def _parse(raw: Any, source: str, default_name: str | None) -> ResilienceConfig:
    top = Reader(raw, "", source, _TOP)
    name = top.string("name", default_name or "").strip()
    if not name:
        top.fail("name", "required (it is the `config` label)")
    methods = top.strings("nonIdempotentMethods", [])
    b = top.child("backoff", ("jitter",))
    p = top.child("pushback", ("honour", "onGiveUp", "maxDelay"))
    common = _Common(
        jitter=b.string("jitter", "full", choices=_JITTER) if b else "full",
        non_idempotent=frozenset(m.lstrip("/") for m in methods),
        honour_pushback=p.boolean("honour", True) if p else True,
        pushback_on_give_up=p.boolean("onGiveUp", False) if p else False,
        max_pushback_s=p.duration("maxDelay", 30.0, lo_open=True) if p else 30.0,
    )
    entries = _method_configs(top, common)
    default = next((e for e in entries if ("", "") in e.names), None)
    rp = top.child("retryPolicy", _RETRY_POLICY)
    retry, backoff_spec = NO_RETRY, {"kind": "none"}
    if rp is not None:
        if default is not None and default.retry is not None:
            top.fail("retryPolicy", "also given by the default methodConfig entry (name: [{}]); keep one")
        retry, backoff_spec = _retry_policy(rp, common)
    elif default is not None and default.retry is not None:
        retry, backoff_spec = default.retry, default.backoff or backoff_spec
    throttling = None
    t = top.child("retryThrottling", ("maxTokens", "tokenRatio"))
    if t is not None:
        throttling = {
            "max_tokens": t.number("maxTokens", lo=0.0, lo_open=True, hi=1000.0),
            "token_ratio": t.number("tokenRatio", lo=0.0, lo_open=True),
        }
    d = top.child("deadline", ("propagate", "hopMargin", "minRemaining"))
    deadline = DeadlinePolicy(
        propagate=d.boolean("propagate", False) if d else False,
        hop_margin_s=d.duration("hopMargin", 0.01) if d else 0.01,
        min_remaining_s=d.duration("minRemaining", 0.005) if d else 0.005,
        total_s=default.timeout_s if default is not None else None,
    )
    if d is not None:
        for timeout_s in {e.timeout_s for e in entries if e.timeout_s is not None}:
            if deadline.min_remaining_s >= timeout_s:
                d.fail(
                    d.key_path("minRemaining"),
                    f"{deadline.min_remaining_s:g}s leaves no time in a {timeout_s:g}s methodConfig timeout",
                )
    breaker_keys = ("failureRate", "minCalls", "window", "openDuration", "halfOpenProbes", "per")
    return ResilienceConfig(
        name=name,
        description=top.string("description", ""),
        retry=retry,
        backoff=backoff_spec,
        budget=_budget(top.child("retryBudget", ("ratio", "minRetriesPerSecond", "window", "burstWindow"))),
        breaker=_breaker(top.child("breaker", breaker_keys)),
        deadline=deadline,
        timeouts=_attempt_timeouts(top.child("attemptTimeouts", ("default", "methods"))),
        balancer=_balancer(top.child("balancer", ("kind", "decay", "ejection"))),
        methods=tuple(e for e in entries if e is not default),
        throttling=throttling,
        adaptive=_adaptive(top.child("adaptiveThrottling", ("k", "window"))),
        outcomes=_outcomes(top.child("outcomes", ("relayedGiveUps",))),
        keepalive=_keepalive.parse(top.child("keepalive", _keepalive.KEYS)),
        reconnect=_reconnect.parse(top.child("reconnect", _reconnect.KEYS)),
    )


def from_dict(raw: dict[str, Any], source: str = "<dict>", *, name: str | None = None) -> ResilienceConfig:
    """Validate and build a configuration from a parsed mapping (ours, or a gRPC service config).

    `name` is used when the mapping has none (a plain gRPC service config has no name).
    """
    cfg = _parse(raw, source, name)
    # Build once to surface what the readers cannot see now rather than on the first call.
    try:
        cfg.build_backoff()
        cfg.build_budget()
        cfg.build_adaptive_throttle()
        cfg.build_classifier()
        breakers = cfg.build_breakers()
        if breakers is not None:
            breakers.for_backend("check")
        cfg.build_balancer(["check"])
        cfg.build_timeouts().for_method("check")
    except (TypeError, ValueError, KeyError) as exc:
        raise ConfigError(f"{source}: {exc}") from exc
    return cfg


def load(name_or_path: str) -> ResilienceConfig:
    """Load by name (`resilient`), by YAML path (`./my.yaml`) or a gRPC service-config JSON (`./svc.json`).

    A JSON file without a `name` is named after the file (`svc.json` -> `svc`).
    """
    path = pathlib.Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml", ".json") or path.exists()):
        path = CONFIG_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise ConfigError(f"unknown configuration {name_or_path!r}; named ones: {', '.join(NAMES)}")
    source = path.name
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh) if path.suffix == ".json" else yaml.safe_load(fh)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{source}: {exc}") from exc
    return from_dict(raw, source, name=path.stem)
