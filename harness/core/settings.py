"""Process switches (contracts §5), read once at start.

Deliberately independent of any config service: the config service may be the
very dependency under drill. Constructor arguments override the environment.
The service's name (`DRILL_SERVICE`) is what a drill's `x-fault-target` must
say to reach it: a service left on the default name is told so once, at start.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket

from harness.core.errors import BadInput
from harness.core.faults import ABSOLUTE_MAX_DELAY_MS, seed_from_drill_id
from harness.core.headers import DEFAULT_DRILL_TENANT, MAX_VALUE_LEN
from harness.core.token import DEFAULT_MAX_TTL_S

_TRUE = {"1", "true", "yes", "on"}
#: The name a service has until it says its own (`DRILL_SERVICE`, or `service=`).
DEFAULT_SERVICE = "drill"
_log = logging.getLogger("harness.settings")
_warned_default_name = False


class SettingsError(BadInput):
    """A switch value that cannot be honoured (refuse to start rather than guess)."""


def _number(env, name: str, kind: type) -> int | float:
    """`env[name]` as an int or float, or a one-line SettingsError naming the variable and its value."""
    try:
        return kind(env[name].strip())
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise SettingsError(f"{name} is not {what}: {env[name]!r}") from None


@dataclasses.dataclass(frozen=True)
class FaultSettings:
    enabled: bool = False
    seed: int = 0
    tenants: frozenset[str] = frozenset({DEFAULT_DRILL_TENANT})
    max_delay_ms: int = 60_000
    secret: str | None = None
    instance_id: str = ""
    #: The hop's name: metric `service` label, and what `x-fault-target` must say to reach it (`DRILL_SERVICE`).
    service: str = DEFAULT_SERVICE
    #: Longest remaining lifetime of a drill token; tokens expiring later are refused.
    token_max_ttl_s: float = DEFAULT_MAX_TTL_S
    #: Distinct `grpc_method` label values per server; later methods are labelled `other` (gRFC A66).
    max_methods: int = 100
    #: Methods registered on the server (`pkg.Service/Method`); when given, all others are `other`.
    methods: frozenset[str] | None = None
    #: Concurrently injected faults per server interceptor (one per `drill serve` process); beyond it a
    #: call that would be faulted passes untouched (`skipped{reason="max_active"}`). 0 = no injection.
    max_active: int = 100
    #: A file whose appearance stops injection for the life of the process (checked at most once a second).
    stop_file: str | None = None
    #: Calls whose handler runs at once on an aio server interceptor (`DRILL_MAX_IN_FLIGHT`); past it a call is
    #: refused at once with RESOURCE_EXHAUSTED, never faulted or queued (harness.interceptors._overload).
    #: 0 = no limit: a library user's server bounds its own calls; `drill serve` and `drill proxy` always set one.
    max_in_flight: int = 0

    def __post_init__(self) -> None:
        bad = sorted(t for t in self.tenants if not t or "*" in t or "?" in t)
        if bad:
            raise SettingsError(
                f"DRILL_FAULT_TENANTS may not contain wildcards or empty names (list each drill tenant): {bad!r}"
            )
        if (
            not isinstance(self.service, str)
            or not 0 < len(self.service) <= MAX_VALUE_LEN
            or any(not "!" <= c <= "~" for c in self.service)
        ):
            raise SettingsError(
                f"DRILL_SERVICE must be 1..{MAX_VALUE_LEN} printable ASCII characters without spaces (what "
                f"x-fault-target says to reach this service), got {self.service!r}"
            )
        if not 0 < self.token_max_ttl_s <= 7 * 86400:
            raise SettingsError(f"token lifetime cap must be within (0, 604800] s, got {self.token_max_ttl_s}")
        if not 0 <= self.max_active <= 1_000_000:
            raise SettingsError(f"DRILL_FAULT_MAX_ACTIVE must be within 0..1000000, got {self.max_active}")
        if self.max_in_flight:
            from harness.core.limits import MAX_INFLIGHT  # here: limits loads the metrics, a default need not

            if not 0 < self.max_in_flight <= MAX_INFLIGHT:
                raise SettingsError(
                    f"DRILL_MAX_IN_FLIGHT must be within 0..{MAX_INFLIGHT} (0: no limit), got {self.max_in_flight}"
                )
        if not 0 <= self.max_delay_ms <= ABSOLUTE_MAX_DELAY_MS:
            raise SettingsError(f"max delay must be within 0..{ABSOLUTE_MAX_DELAY_MS} ms, got {self.max_delay_ms}")

    @classmethod
    def from_env(
        cls,
        env: dict[str, str] | None = None,
        *,
        who: str = "this service",
        fix: str = "set DRILL_SERVICE=NAME",
        **overrides,
    ) -> FaultSettings:
        """Read `DRILL_FAULT_*`, `DRILL_SERVICE`, `DRILL_INSTANCE_ID`, `DRILL_MAX_IN_FLIGHT`; keyword arguments win.

        With injection on and the service still on the default name, logs one warning per process: a drill
        that targets this hop by name (`x-fault-target`) would otherwise miss it without a word. `who` and `fix`
        word it for the caller (a command says its own option: `drill proxy`, "pass --service NAME").
        """
        env = os.environ if env is None else env
        values: dict = {}
        values["enabled"] = env.get("DRILL_FAULT_ENABLED", "").strip().lower() in _TRUE
        if env.get("DRILL_FAULT_SEED", "").strip():
            values["seed"] = _number(env, "DRILL_FAULT_SEED", int)
        elif env.get("DRILL_FAULT_DRILL_ID", "").strip():
            values["seed"] = seed_from_drill_id(env["DRILL_FAULT_DRILL_ID"].strip())
        if "DRILL_FAULT_TENANTS" in env:
            values["tenants"] = frozenset(t.strip() for t in env["DRILL_FAULT_TENANTS"].split(",") if t.strip())
        for field, name, kind in (
            ("max_delay_ms", "DRILL_FAULT_MAX_DELAY_MS", int),
            ("token_max_ttl_s", "DRILL_FAULT_TOKEN_MAX_TTL_S", float),
            ("max_active", "DRILL_FAULT_MAX_ACTIVE", int),
            ("max_in_flight", "DRILL_MAX_IN_FLIGHT", int),
        ):
            if env.get(name, "").strip():
                values[field] = _number(env, name, kind)
        if env.get("DRILL_FAULT_STOP_FILE", "").strip():
            values["stop_file"] = env["DRILL_FAULT_STOP_FILE"].strip()
        if env.get("DRILL_FAULT_SECRET"):
            values["secret"] = env["DRILL_FAULT_SECRET"]
        if "DRILL_SERVICE" in env:  # set but empty is a mistake to refuse, not the default to fall back on
            values["service"] = env["DRILL_SERVICE"].strip()
        values["instance_id"] = env.get("DRILL_INSTANCE_ID") or f"{socket.gethostname()}:{os.getpid()}"
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "tenants" in values and not isinstance(values["tenants"], frozenset):
            values["tenants"] = frozenset(values["tenants"])
        settings = cls(**values)
        if settings.enabled and settings.service == DEFAULT_SERVICE:
            _warn_default_name(who, fix)
        return settings


def _warn_default_name(who: str, fix: str) -> None:
    """Once per process: injection is on and the service did not name itself."""
    global _warned_default_name
    if _warned_default_name:
        return
    _warned_default_name = True
    _log.warning(
        "drill faults are ON but %s calls itself %r (the default): a drill that targets it by name "
        "(x-fault-target) will not hit it; %s (the hop's name in the drill plan)",
        who, DEFAULT_SERVICE, fix,
    )  # fmt: skip
