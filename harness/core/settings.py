"""Process switches (DESIGN §5), read once at start.

Deliberately independent of any config service: the config service may be the
very dependency under drill. Constructor arguments override the environment.
"""

from __future__ import annotations

import dataclasses
import os
import socket

from harness.core.errors import BadInput
from harness.core.faults import ABSOLUTE_MAX_DELAY_MS, seed_from_drill_id
from harness.core.headers import DEFAULT_DRILL_TENANT

_TRUE = {"1", "true", "yes", "on"}


class SettingsError(BadInput):
    """A switch value that cannot be honoured (refuse to start rather than guess)."""


@dataclasses.dataclass(frozen=True)
class FaultSettings:
    enabled: bool = False
    seed: int = 0
    tenants: frozenset[str] = frozenset({DEFAULT_DRILL_TENANT})
    max_delay_ms: int = 60_000
    secret: str | None = None
    instance_id: str = ""
    service: str = "drill"

    def __post_init__(self) -> None:
        bad = [t for t in self.tenants if not t or "*" in t or "?" in t]
        if bad:
            raise SettingsError(f"tenant allowlist may not contain wildcards or empty names: {bad!r}")
        if not 0 <= self.max_delay_ms <= ABSOLUTE_MAX_DELAY_MS:
            raise SettingsError(
                f"max delay must be within 0..{ABSOLUTE_MAX_DELAY_MS} ms, got {self.max_delay_ms}"
            )

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides) -> FaultSettings:
        """Read `DRILL_FAULT_*` and `DRILL_INSTANCE_ID`; keyword arguments win over the environment."""
        env = os.environ if env is None else env
        values: dict = {}
        values["enabled"] = env.get("DRILL_FAULT_ENABLED", "").strip().lower() in _TRUE
        if env.get("DRILL_FAULT_SEED", "").strip():
            try:
                values["seed"] = int(env["DRILL_FAULT_SEED"])
            except ValueError as exc:
                raise SettingsError(
                    f"DRILL_FAULT_SEED is not an integer: {env['DRILL_FAULT_SEED']!r}"
                ) from exc
        elif env.get("DRILL_FAULT_DRILL_ID", "").strip():
            values["seed"] = seed_from_drill_id(env["DRILL_FAULT_DRILL_ID"].strip())
        if "DRILL_FAULT_TENANTS" in env:
            values["tenants"] = frozenset(
                t.strip() for t in env["DRILL_FAULT_TENANTS"].split(",") if t.strip()
            )
        if env.get("DRILL_FAULT_MAX_DELAY_MS", "").strip():
            try:
                values["max_delay_ms"] = int(env["DRILL_FAULT_MAX_DELAY_MS"])
            except ValueError as exc:
                raise SettingsError("DRILL_FAULT_MAX_DELAY_MS is not an integer") from exc
        if env.get("DRILL_FAULT_SECRET"):
            values["secret"] = env["DRILL_FAULT_SECRET"]
        values["instance_id"] = env.get("DRILL_INSTANCE_ID") or f"{socket.gethostname()}:{os.getpid()}"
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "tenants" in values and not isinstance(values["tenants"], frozenset):
            values["tenants"] = frozenset(values["tenants"])
        return cls(**values)
