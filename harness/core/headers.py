"""The wire contract: gRPC metadata keys the harness reads and writes (contracts §2).

This module is the only place these strings are spelled. Everything else imports
the constants so a renamed key is one change, not a grep.
"""

from __future__ import annotations

TENANT = "x-tenant-id"
FAULT = "x-fault"
FAULT_RATIO = "x-fault-ratio"
FAULT_TARGET = "x-fault-target"
FAULT_INSTANCES = "x-fault-instances"
#: Method (`pkg.Service/Method`) at the target that injects; absent = any method. Signed by the token.
FAULT_METHOD = "x-fault-method"
#: `request` (default: every retry of a hit request is hit again) or `attempt` (one draw per attempt).
FAULT_SCOPE = "x-fault-scope"
#: Integer N >= 1: a hit request is faulted only on its first N attempts, then succeeds.
FAULT_ATTEMPTS = "x-fault-attempts"
#: Trailing metadata of every injected call, value the mode (`delay`, `abort`, `drop`); no other call has it.
FAULT_MARKER = "x-drill-fault"
REQUEST_ID = "x-request-id"
DRILL_TOKEN = "x-drill-token"
#: Absolute wall-clock deadline (unix seconds, decimal) of the edge caller, so every
#: hop can measure work done after the original caller gave up (the deadline gap).
#: Honoured (clamped) only for drill traffic, and only drill traffic forwards it.
ORIGIN_DEADLINE = "x-drill-origin-deadline"
#: Resilience configuration name of the caller, for the `config` label downstream.
CONFIG = "x-drill-config"

# gRFC A6 retry metadata.
PREVIOUS_RPC_ATTEMPTS = "grpc-previous-rpc-attempts"
RETRY_PUSHBACK_MS = "grpc-retry-pushback-ms"
#: grpc strips an application-set `grpc-previous-rpc-attempts` before the server
#: sees it, so the attempt number also travels under this key.
DRILL_PREVIOUS_RPC_ATTEMPTS = "x-drill-previous-rpc-attempts"

#: Keys a hop propagates downstream (like baggage) when a fault target is named. The origin
#: deadline travels separately, from the (clamped) value in the call scope.
DRILL_KEYS: tuple[str, ...] = (
    TENANT,
    FAULT,
    FAULT_RATIO,
    FAULT_TARGET,
    FAULT_INSTANCES,
    FAULT_METHOD,
    FAULT_SCOPE,
    FAULT_ATTEMPTS,
    REQUEST_ID,
    DRILL_TOKEN,
)

#: Upper bound on any single drill metadata value; longer values are rejected as oversize.
MAX_VALUE_LEN = 256

#: The default drill tenant (contracts §5).
DEFAULT_DRILL_TENANT = "tenant-drill"


def traffic_of(tenant: str | None, drill_tenants: frozenset[str]) -> str:
    """The `traffic` label (contracts §7): `drill` for an allowlisted drill tenant, else `organic`."""
    return "drill" if tenant and tenant in drill_tenants else "organic"


def metadata_dict(metadata) -> dict[str, str]:
    """Return the drill keys of a gRPC metadata sequence as a dict (first value wins).

    Accepts what grpc hands us: a tuple of `(key, value)` pairs or `_Metadatum`
    objects, or None. Binary (`-bin`) values are ignored; we never need them.
    """
    out: dict[str, str] = {}
    if not metadata:
        return out
    for item in metadata:
        key, value = item[0], item[1]
        if key in out or not isinstance(value, str):
            continue
        out[key] = value
    return out


def has_fault_marker(trailing_metadata) -> bool:
    """Whether a call's trailing metadata carries the injected-fault marker (`x-drill-fault`)."""
    if not trailing_metadata:
        return False
    try:
        return any(item[0] == FAULT_MARKER for item in trailing_metadata)
    except Exception:  # noqa: BLE001 - odd metadata objects are simply "no marker"
        return False
