"""The wire contract: gRPC metadata keys the harness reads and writes (contracts §2), and their W3C baggage names.

This module is the only place these strings are spelled. Everything else imports
the constants so a renamed key is one change, not a grep.
"""

from __future__ import annotations

from harness.core import baggage

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

#: W3C baggage (contracts "Baggage"): the header every OpenTelemetry-instrumented service forwards. The drill keys
#: travel in it too, one entry per key, named under `drill.`; our servers read them only where no x-* drill key is.
BAGGAGE = "baggage"
BAGGAGE_PREFIX = "drill."
#: Each drill key's baggage name.
BAGGAGE_NAMES: dict[str, str] = {
    TENANT: "drill.tenant",
    FAULT: "drill.fault",
    FAULT_RATIO: "drill.fault-ratio",
    FAULT_TARGET: "drill.fault-target",
    FAULT_INSTANCES: "drill.fault-instances",
    FAULT_METHOD: "drill.fault-method",
    FAULT_SCOPE: "drill.fault-scope",
    FAULT_ATTEMPTS: "drill.fault-attempts",
    REQUEST_ID: "drill.request-id",
    DRILL_TOKEN: "drill.token",
}
#: Drill keys whose presence (any one) means the call carries the drill in x-* keys, and the baggage is not read.
#: The request id is not one: every call of our clients has it, drill or organic.
X_DRILL_KEYS = frozenset(DRILL_KEYS) - {REQUEST_ID}
#: Keys whose presence sends a call through the gate (without any, the gate would pass it as organic).
GATE_KEYS = frozenset({TENANT, FAULT, BAGGAGE})
#: Set by `metadata_dict` (never a real metadata key: `:` cannot start one) when the baggage carried `drill.`
#: entries but was malformed or over its limits: why. The gate refuses the call's directive (`bad_baggage`).
BAGGAGE_ERROR = ":drill-baggage-error"

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

    Baggage (contracts "Baggage"): where no x-* drill key is present and the `baggage` header has `drill.`
    entries, the drill keys are those entries alone (x-request-id too, replaced or removed: never a mix). A
    `baggage` with `drill.` in it that is malformed or over the W3C limits gives no drill key and sets
    BAGGAGE_ERROR (why) instead.
    """
    out: dict[str, str] = {}
    if not metadata:
        return out
    for item in metadata:
        key, value = item[0], item[1]
        if key in out or not isinstance(value, str):
            continue
        out[key] = value
    header = out.get(BAGGAGE)
    if header is not None and BAGGAGE_PREFIX in header and X_DRILL_KEYS.isdisjoint(out):
        _read_baggage(out, header)
    return out


def _read_baggage(out: dict[str, str], header: str) -> None:
    try:
        found = baggage.entries(header, BAGGAGE_PREFIX)
    except baggage.BaggageError as err:
        out[BAGGAGE_ERROR] = str(err)
        return
    except Exception as err:  # noqa: BLE001 - whatever a caller sends, reading it never fails the call
        out[BAGGAGE_ERROR] = f"unreadable ({type(err).__name__})"
        return
    if not any(name in found for key, name in BAGGAGE_NAMES.items() if key != REQUEST_ID):
        return  # only a request id (or no drill key): the call is what its x-* keys say
    for key, name in BAGGAGE_NAMES.items():
        if name in found:
            out[key] = found[name]
        else:
            out.pop(key, None)


def has_fault_marker(trailing_metadata) -> bool:
    """Whether a call's trailing metadata carries the injected-fault marker (`x-drill-fault`)."""
    if not trailing_metadata:
        return False
    try:
        return any(item[0] == FAULT_MARKER for item in trailing_metadata)
    except Exception:  # noqa: BLE001 - odd metadata objects are simply "no marker"
        return False
