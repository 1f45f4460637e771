"""Status classes (contracts §6): the one function that decides what counts as an error.

The Prometheus recording rules in compose/prometheus mirror these sets; a test
compares the two so they cannot drift.
"""

from __future__ import annotations

import enum

SERVER_FAULT_CODES: frozenset[str] = frozenset(
    {
        "UNKNOWN",
        "DEADLINE_EXCEEDED",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "RESOURCE_EXHAUSTED",
    }
)
CLIENT_FAULT_CODES: frozenset[str] = frozenset(
    {
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "UNAUTHENTICATED",
        "FAILED_PRECONDITION",
        "OUT_OF_RANGE",
        "ABORTED",
    }
)

#: Every gRPC status name (spelled here so that importing the contracts loads no grpc;
#: a test checks the set against `grpc.StatusCode`).
STATUS_NAMES: frozenset[str] = frozenset({"OK", "CANCELLED", *SERVER_FAULT_CODES, *CLIENT_FAULT_CODES})

#: id of a grpc.StatusCode member -> name, filled on first sight (17 members at most). Keyed by id: an
#: enum's own hash is a Python-level call, and members live as long as the process (ids never reused).
_NAMES: dict[int, str] = {}


class StatusClass(str, enum.Enum):
    OK = "ok"
    SERVER_FAULT = "server-fault"
    CLIENT_FAULT = "client-fault"
    CANCELLED = "cancelled"


def status_name(code) -> str:
    """Upper-case status name as metrics carry it (`OK`, `CANCELLED`, ...), from a
    `grpc.StatusCode`, a name or None (= OK)."""
    name = _NAMES.get(id(code))  # hot path: a dict hit instead of enum attribute machinery
    if name is not None:
        return name
    if code is None:
        return "OK"
    if isinstance(code, str):
        return code.upper()
    name = getattr(code, "name", None)
    if isinstance(name, str) and name in STATUS_NAMES:
        if isinstance(code, enum.Enum):  # a member: lives as long as the process, so may be keyed by id
            _NAMES[id(code)] = name
        return name
    return str(code).upper()


def classify(code) -> StatusClass:
    """Classify a final status. CANCELLED is its own class: never an error, never in the denominator."""
    name = status_name(code)
    if name == "OK":
        return StatusClass.OK
    if name == "CANCELLED":
        return StatusClass.CANCELLED
    if name in SERVER_FAULT_CODES:
        return StatusClass.SERVER_FAULT
    return StatusClass.CLIENT_FAULT


def error_rate(counts: dict[str, float]) -> float | None:
    """Error rate = server-fault / (all − CANCELLED), from counts keyed by status name.

    Returns None when no non-cancelled call happened (an undefined rate is not 0).
    """
    total = 0.0
    errors = 0.0
    for name, n in counts.items():
        cls = classify(name)
        if cls is StatusClass.CANCELLED:
            continue
        total += n
        if cls is StatusClass.SERVER_FAULT:
            errors += n
    if total <= 0:
        return None
    return errors / total
