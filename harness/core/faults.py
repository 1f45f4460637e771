"""Fault grammar and the reproducible hit decision (contracts §3–§4).

Pure functions, no grpc: the interceptors call these, tests and `drill hits`
call them directly. The hash is bit-compatible with the reference Java
interceptor (`String.hashCode`, 64-bit `long` arithmetic, `Math.floorMod`), so a
mixed Java/Python fleet agrees on which request ids a drill hits.
"""

from __future__ import annotations

import dataclasses
import enum
import re

from harness.core.headers import MAX_VALUE_LEN
from harness.core.status import STATUS_NAMES

_MASK64 = (1 << 64) - 1
_MASK32 = (1 << 32) - 1

#: Hard ceiling for any delay or drop, whatever the process configures.
ABSOLUTE_MAX_DELAY_MS = 600_000


def _wrap64(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def jhash(text: str | None) -> int:
    """Java's `String.hashCode`: 32-bit, over UTF-16 code units, sign-extended. None hashes to 0."""
    if not text:
        return 0
    h = 0
    if text.isascii():
        for ch in text.encode("ascii"):
            h = (31 * h + ch) & _MASK32
    else:
        data = text.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return h - (1 << 32) if h >= 1 << 31 else h


def seed_from_drill_id(drill_id: str) -> int:
    """A drill id names a seed: `seed = jhash(drill_id)`."""
    return jhash(drill_id)


def hit_bucket(seed: int, request_id: str | None, directive: str) -> int:
    """`floorMod(31*seed + jhash(request_id) + jhash(directive), 100)` in 64-bit arithmetic."""
    value = _wrap64(31 * seed + jhash(request_id) + jhash(directive))
    return value % 100  # Python's % is floorMod for a positive divisor


def is_hit(seed: int, request_id: str | None, directive: str, ratio: int) -> bool:
    """Whether a directive at `ratio` percent hits this request id (same id, same answer)."""
    if ratio >= 100:
        return True
    if ratio <= 0:
        return False
    return hit_bucket(seed, request_id, directive) < ratio


def splitmix64(z: int) -> int:
    """SplitMix64's finalizer with its standard constants, 64-bit wraparound, signed result (a Java `long`)."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return _wrap64(z ^ (z >> 31))


class Scope(str, enum.Enum):
    """`x-fault-scope` (contracts §2): one decision per request, or one per attempt."""

    REQUEST = "request"
    ATTEMPT = "attempt"


def attempt_bucket(seed: int, request_id: str | None, directive: str, attempt: int) -> int:
    """The bucket of attempt `n` under `x-fault-scope: attempt`: attempt 0 is `hit_bucket`,
    attempt n >= 1 is `floorMod(splitmix64(value + n), 100)` (contracts §4)."""
    value = _wrap64(31 * seed + jhash(request_id) + jhash(directive))
    if attempt <= 0:
        return value % 100
    return splitmix64(_wrap64(value + attempt)) % 100


def is_hit_attempt(
    seed: int,
    request_id: str | None,
    directive: str,
    ratio: int,
    attempt: int = 0,
    scope: Scope | str = Scope.REQUEST,
    attempts: int | None = None,
) -> bool:
    """Whether attempt `attempt` (0-based) of this request is faulted (contracts §4).

    `scope` request: every attempt shares the request's decision (`is_hit`); attempt: each
    attempt is its own reproducible draw. `attempts` N: a hit is faulted only on attempts < N.
    """
    if attempts is not None and attempt >= attempts:
        return False
    if ratio >= 100:
        return True
    if ratio <= 0:
        return False
    if scope == Scope.ATTEMPT:
        return attempt_bucket(seed, request_id, directive, attempt) < ratio
    return hit_bucket(seed, request_id, directive) < ratio


def instance_selected(seed: int, instance_id: str, share: int) -> bool:
    """Whether this replica is among the `share` percent of the target's replicas that inject."""
    if share >= 100:
        return True
    if share <= 0:
        return False
    return _wrap64(31 * seed + jhash(instance_id)) % 100 < share


def range_value(seed: int, request_id: str | None, low: int, high: int) -> int:
    """Deterministic per-request value in [low, high] for `delay:MIN-MAX`.

    Salted differently from the hit bucket so the delay length is not correlated
    with whether the request was hit.
    """
    if high <= low:
        return low
    value = _wrap64(31 * _wrap64(31 * seed + jhash(request_id)) + jhash("delay-range"))
    return low + value % (high - low + 1)


class Mode(str, enum.Enum):
    NONE = "none"
    DELAY = "delay"
    ABORT = "abort"
    DROP = "drop"


class RejectReason(str, enum.Enum):
    """Why a directive was refused; the `reason` label of `drill_fault_rejected_total`."""

    EMPTY = "empty"
    OVERSIZE = "oversize"
    BAD_CHARS = "bad_chars"
    UNKNOWN_MODE = "unknown_mode"
    BAD_ARGUMENT = "bad_argument"
    NEGATIVE = "negative"
    OVER_MAX = "over_max"
    UNKNOWN_CODE = "unknown_code"
    OK_CODE = "ok_code"
    BAD_RATIO = "bad_ratio"
    BAD_INSTANCES = "bad_instances"
    BAD_SCOPE = "bad_scope"
    BAD_ATTEMPTS = "bad_attempts"
    BAD_ATTEMPT_NUMBER = "bad_attempt_number"


class DirectiveError(ValueError):
    """A directive that must not be applied. Carries the reason label."""

    def __init__(self, reason: RejectReason, detail: str = "") -> None:
        super().__init__(f"{reason.value}: {detail}" if detail else reason.value)
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class Directive:
    """A parsed `x-fault` value. `low == high` for a fixed delay or drop."""

    raw: str
    mode: Mode
    low_ms: int = 0
    high_ms: int = 0
    code: str | None = None

    @property
    def argument(self) -> str:
        if self.mode is Mode.ABORT:
            return self.code or ""
        return str(self.low_ms) if self.low_ms == self.high_ms else f"{self.low_ms}-{self.high_ms}"

    def delay_ms(self, seed: int, request_id: str | None) -> int:
        """The delay or drop time for one request (fixed, or drawn from the range by request id)."""
        return range_value(seed, request_id, self.low_ms, self.high_ms)


_ALLOWED = re.compile(r"[A-Za-z0-9_:\-]+")
_INT = re.compile(r"[0-9]{1,9}")


def _parse_ms(text: str, max_delay_ms: int) -> int:
    if text.startswith("-") and _INT.fullmatch(text[1:]):
        raise DirectiveError(RejectReason.NEGATIVE, text)
    if not _INT.fullmatch(text):
        raise DirectiveError(RejectReason.BAD_ARGUMENT, text)
    value = int(text)
    if value > max_delay_ms:
        raise DirectiveError(RejectReason.OVER_MAX, f"{value} > {max_delay_ms}")
    return value


def parse_directive(raw: str | None, max_delay_ms: int = 60_000) -> Directive:
    """Parse an `x-fault` value; raise DirectiveError with a reason for anything unsafe or malformed."""
    if raw is None or not raw.strip():
        raise DirectiveError(RejectReason.EMPTY)
    if len(raw) > MAX_VALUE_LEN:
        raise DirectiveError(RejectReason.OVERSIZE, f"{len(raw)} chars")
    text = raw.strip(" ")
    if not _ALLOWED.fullmatch(text):
        raise DirectiveError(RejectReason.BAD_CHARS)
    max_delay_ms = min(max_delay_ms, ABSOLUTE_MAX_DELAY_MS)
    mode_text, sep, arg = text.partition(":")
    mode_text = mode_text.lower()
    if mode_text not in ("delay", "abort", "drop"):
        raise DirectiveError(RejectReason.UNKNOWN_MODE, mode_text)
    if not sep or not arg:
        raise DirectiveError(RejectReason.BAD_ARGUMENT, "missing argument")
    if mode_text == "abort":
        code = arg.upper()
        if code == "OK":
            raise DirectiveError(RejectReason.OK_CODE)
        if code not in STATUS_NAMES:
            raise DirectiveError(RejectReason.UNKNOWN_CODE, code)
        return Directive(text, Mode.ABORT, code=code)
    if mode_text == "delay" and "-" in arg.lstrip("-"):
        low_text, _, high_text = arg.partition("-") if not arg.startswith("-") else ("-" + arg[1:], "", "")
        low = _parse_ms(low_text, max_delay_ms)
        high = _parse_ms(high_text, max_delay_ms)
        if high < low:
            raise DirectiveError(RejectReason.BAD_ARGUMENT, f"range {low}-{high} is reversed")
        return Directive(text, Mode.DELAY, low, high)
    value = _parse_ms(arg, max_delay_ms)
    return Directive(text, Mode(mode_text), value, value)


def parse_percent(raw: str | None, reason: RejectReason, default: int = 100) -> int:
    """Parse an integer 0–100 metadata value (`x-fault-ratio`, `x-fault-instances`)."""
    if raw is None:
        return default
    text = raw.strip(" ")
    if len(text) > 3 or not (text.isascii() and text.isdigit()) or int(text) > 100:
        raise DirectiveError(reason, repr(raw[:16]))
    return int(text)


#: Highest attempt number or `x-fault-attempts` accepted (gRPC caps attempts at 5; this is generous).
MAX_ATTEMPTS = 1000


def parse_scope(raw: str | None) -> Scope:
    """Parse `x-fault-scope`: `request` (default when absent) or `attempt`."""
    if raw is None:
        return Scope.REQUEST
    text = raw.strip(" ").lower()
    if text == "request":
        return Scope.REQUEST
    if text == "attempt":
        return Scope.ATTEMPT
    raise DirectiveError(RejectReason.BAD_SCOPE, repr(raw[:16]))


def _small_int(raw: str, reason: RejectReason, minimum: int) -> int:
    text = raw.strip(" ")
    if len(text) > 4 or not (text.isascii() and text.isdigit()) or not minimum <= int(text) <= MAX_ATTEMPTS:
        raise DirectiveError(reason, repr(raw[:16]))
    return int(text)


def parse_attempts(raw: str | None) -> int | None:
    """Parse `x-fault-attempts` (an integer >= 1; absent = unlimited)."""
    if raw is None:
        return None
    return _small_int(raw, RejectReason.BAD_ATTEMPTS, 1)


def parse_attempt_number(grpc_value: str | None, drill_value: str | None) -> int:
    """The 0-based attempt number from `grpc-previous-rpc-attempts`, else `x-drill-previous-rpc-attempts`."""
    raw = grpc_value if grpc_value is not None else drill_value
    if raw is None:
        return 0
    return _small_int(raw, RejectReason.BAD_ATTEMPT_NUMBER, 0)
