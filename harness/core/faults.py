"""Fault grammar and the reproducible hit decision (contracts §3–§4).

Pure functions, no grpc: the interceptors call these, tests and `drill hits`
call them directly. A directive is `MODE:ARGUMENT` with optional `@KEY=VALUE`
options that move the fault into a stream (`@after=N`, `@read=N`), after the
response headers (`@headers=sent`) or after the service's answer (`@served`: the
handler runs and answers, then the caller gets the fault instead); which options
fit which kind of method is decided here too (`Directive.refusal_for`), so the
parser, the gate, `drill hits` and plan validation agree. The hash is
bit-compatible with the reference Java interceptor (`String.hashCode`, 64-bit
`long` arithmetic, `Math.floorMod`), so a mixed Java/Python fleet agrees on
which request ids a drill hits.
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
    #: An `@` option that is not `after=N`, `read=N`, `headers=sent` or `served`, or one given twice.
    BAD_OPTION = "bad_option"
    #: `after=`/`read=` not an integer 1..MAX_STREAM_MESSAGES.
    BAD_COUNT = "bad_count"
    #: Options that cannot go together (`after` with `read`; `headers=sent` with `after`; `served` with `after` or
    #: `read`: one fault acts at one point).
    CONFLICTING_OPTIONS = "conflicting_options"
    #: An option the called method's kind cannot have (`after` without a response stream, `read`
    #: without a request stream); decided by the server that would inject, which knows the method.
    WRONG_KIND = "wrong_kind"
    #: A `baggage` header with `drill.` entries that is not W3C baggage or is over its limits (contracts "Baggage").
    BAD_BAGGAGE = "bad_baggage"


class Kind(str, enum.Enum):
    """The four kinds of gRPC method (which side streams)."""

    UNARY = "unary"
    SERVER_STREAMING = "server_streaming"
    CLIENT_STREAMING = "client_streaming"
    BIDI_STREAMING = "bidi_streaming"

    @classmethod
    def of(cls, request_streaming: bool, response_streaming: bool) -> Kind:
        if request_streaming:
            return cls.BIDI_STREAMING if response_streaming else cls.CLIENT_STREAMING
        return cls.SERVER_STREAMING if response_streaming else cls.UNARY

    @property
    def request_streaming(self) -> bool:
        return self in (Kind.CLIENT_STREAMING, Kind.BIDI_STREAMING)

    @property
    def response_streaming(self) -> bool:
        return self in (Kind.SERVER_STREAMING, Kind.BIDI_STREAMING)


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
    #: `@after=N`: the fault acts right after the server has sent N response messages (0: not given).
    after: int = 0
    #: `@read=N`: the fault acts when the handler asks for request message N+1 (0: not given).
    read: int = 0
    #: `@headers=sent`: the response headers go out just before the fault acts.
    headers_sent: bool = False
    #: `@served`: the handler runs and answers; the fault acts after its answer (a single response) or after its
    #: last message (a response stream), before the status, and replaces that answer, error or not.
    served: bool = False

    @property
    def argument(self) -> str:
        if self.mode is Mode.ABORT:
            return self.code or ""
        return str(self.low_ms) if self.low_ms == self.high_ms else f"{self.low_ms}-{self.high_ms}"

    @property
    def options(self) -> str:
        """The options in a fixed order (`after=3`, `read=2,headers=sent`); empty when there are none."""
        parts = [f"after={self.after}"] if self.after else []
        if self.read:
            parts.append(f"read={self.read}")
        if self.headers_sent:
            parts.append("headers=sent")
        if self.served:
            parts.append("served")
        return ",".join(parts)

    def refusal_for(self, kind: Kind) -> RejectReason | None:
        """Why this directive cannot act on a method of `kind` (None: it can). `after` counts response
        messages, so it needs a response stream; `read` counts request messages, so it needs a request stream
        (a unary request is read before the handler runs, a unary response goes out with the status).
        `served` fits every kind: each has an answer to replace (the one response, or the end of the stream)."""
        if self.after and not kind.response_streaming:
            return RejectReason.WRONG_KIND
        if self.read and not kind.request_streaming:
            return RejectReason.WRONG_KIND
        return None

    def delay_ms(self, seed: int, request_id: str | None) -> int:
        """The delay or drop time for one request (fixed, or drawn from the range by request id)."""
        return range_value(seed, request_id, self.low_ms, self.high_ms)


_ALLOWED = re.compile(r"[A-Za-z0-9_:\-@=]+")
_INT = re.compile(r"[0-9]{1,9}")
#: Highest N in `@after=N` / `@read=N` (a drill needs a fault within a stream's first messages, not its millionth).
MAX_STREAM_MESSAGES = 1_000_000
_COUNT = re.compile(r"[1-9][0-9]{0,6}")


def _parse_ms(text: str, max_delay_ms: int) -> int:
    if text.startswith("-") and _INT.fullmatch(text[1:]):
        raise DirectiveError(RejectReason.NEGATIVE, text)
    if not _INT.fullmatch(text):
        raise DirectiveError(RejectReason.BAD_ARGUMENT, text)
    value = int(text)
    if value > max_delay_ms:
        raise DirectiveError(RejectReason.OVER_MAX, f"{value} > {max_delay_ms}")
    return value


def _parse_count(key: str, text: str) -> int:
    # Echoed whole: a directive is at most MAX_VALUE_LEN characters, and a cut number reads as another one.
    if not _COUNT.fullmatch(text) or int(text) > MAX_STREAM_MESSAGES:
        raise DirectiveError(RejectReason.BAD_COUNT, f"{key}={text}")
    return int(text)


def _option_problem(part: str, key: str, seen: dict) -> str | None:
    """What is wrong with one `@` option, in words (None: nothing); the text after `@` is echoed whole."""
    if not part:
        return "an empty option after '@'"
    if key in seen:
        return f"option {key!r} given twice"
    if key not in ("after", "read", "headers", "served"):
        return f"unknown option {part!r}"
    if key == "served":
        return f"option {part!r}: served takes no value" if "=" in part else None
    if "=" not in part:
        return f"option {part!r} without '=VALUE'"
    return None


def _parse_options(parts: list[str]) -> dict:
    """`@KEY=VALUE` options and the bare `@served` (keys and `sent` in any case, any order, each at most once) as
    Directive fields."""
    out: dict = {}
    for part in parts:
        key, _, value = part.partition("=")
        key = key.lower()
        problem = _option_problem(part, key, out)
        if problem:
            raise DirectiveError(RejectReason.BAD_OPTION, problem)
        if key == "served":
            out[key] = True
        elif key == "headers":
            if value.lower() != "sent":
                raise DirectiveError(RejectReason.BAD_OPTION, f"headers={value}: headers takes only 'sent'")
            out[key] = True
        else:
            out[key] = _parse_count(key, value)
    if "after" in out and "read" in out:
        raise DirectiveError(RejectReason.CONFLICTING_OPTIONS, "after and read")
    if "after" in out and "headers" in out:
        raise DirectiveError(RejectReason.CONFLICTING_OPTIONS, "after implies headers=sent")
    for point in ("after", "read"):
        if "served" in out and point in out:
            raise DirectiveError(RejectReason.CONFLICTING_OPTIONS, f"served and {point}: one fault acts at one point")
    return {
        "after": out.get("after", 0),
        "read": out.get("read", 0),
        "headers_sent": out.get("headers", False),
        "served": out.get("served", False),
    }


def _bad_chars(text: str) -> str:
    """Where `text` leaves the directive alphabet, in words (for `RejectReason.BAD_CHARS`)."""
    if text != text.strip():
        return "a blank before or after the directive (servers hash the value as sent, so it is refused, not stripped)"
    bad = next(ch for ch in text if not _ALLOWED.fullmatch(ch))
    return f"{bad!r} at character {text.index(bad) + 1}"


def parse_directive(raw: str | None, max_delay_ms: int = 60_000) -> Directive:
    """Parse an `x-fault` value; raise DirectiveError with a reason for anything unsafe or malformed.

    The value is taken exactly as sent: §4 hashes it as it is, so a blank before or after it would
    move the hit set while naming the same fault. Such a value is refused (`bad_chars`), never
    stripped, and the servers, `drill hits` and plan validation all refuse it alike.
    """
    if raw is None or not raw.strip():
        raise DirectiveError(RejectReason.EMPTY)
    if len(raw) > MAX_VALUE_LEN:
        raise DirectiveError(RejectReason.OVERSIZE, f"{len(raw)} chars")
    text = raw
    if not _ALLOWED.fullmatch(text):
        raise DirectiveError(RejectReason.BAD_CHARS, _bad_chars(text))
    max_delay_ms = min(max_delay_ms, ABSOLUTE_MAX_DELAY_MS)
    head, *option_parts = text.split("@")
    directive = _parse_head(text, head, max_delay_ms)
    if not option_parts:
        return directive
    return dataclasses.replace(directive, **_parse_options(option_parts))


def _parse_head(text: str, head: str, max_delay_ms: int) -> Directive:
    """`MODE:ARGUMENT` (the part before any `@`); `text` is the whole directive, kept as `raw`."""
    mode_text, sep, arg = head.partition(":")
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
