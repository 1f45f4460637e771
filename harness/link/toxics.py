"""What a toxic is: its type, attributes, direction and toxicity, validated once (Toxiproxy's JSON shape).

A toxic is the JSON Toxiproxy takes (`{"name", "type", "stream", "toxicity", "attributes"}`;
`stream` is `upstream`, client to server, or `downstream`, server to client, the default; `name`
defaults to `TYPE_STREAM`; `toxicity` 1.0; the extension `drill_only`, false), parsed here into a
frozen `Toxic`. Toxiproxy's seven types keep their names, attributes and units; the HTTP/2 types
(`goaway`, `rst_stream`, `ping_blackhole`, `max_streams`, `window_stall`) and the connect faults
(`connect`) are extensions of the same shape. Bad input raises `ToxicError` with Toxiproxy's status
code (400 unknown type, bad attribute, bad stream; 409 a name taken is the caller's check) and changes nothing. Unlike
Toxiproxy, an attribute it does not know is refused (a typo would otherwise be a fault that never
acts), and every time is bounded (`MAX_MS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from harness.core.faults import ABSOLUTE_MAX_DELAY_MS

UPSTREAM = "upstream"
DOWNSTREAM = "downstream"
#: Any time a toxic holds data or a connection, at most (the harness's ceiling on any delay)
MAX_MS = ABSOLUTE_MAX_DELAY_MS
_BIG = 1 << 40

#: HTTP/2 error codes (RFC 9113 §7) by name, for `goaway` and `rst_stream` `code`
H2_CODES = {
    "NO_ERROR": 0x0, "PROTOCOL_ERROR": 0x1, "INTERNAL_ERROR": 0x2, "FLOW_CONTROL_ERROR": 0x3,
    "SETTINGS_TIMEOUT": 0x4, "STREAM_CLOSED": 0x5, "FRAME_SIZE_ERROR": 0x6, "REFUSED_STREAM": 0x7,
    "CANCEL": 0x8, "COMPRESSION_ERROR": 0x9, "CONNECT_ERROR": 0xA, "ENHANCE_YOUR_CALM": 0xB,
    "INADEQUATE_SECURITY": 0xC, "HTTP_1_1_REQUIRED": 0xD,
}  # fmt: skip


class ToxicError(ValueError):
    """Bad input for a toxic or a link: `status` is the HTTP code Toxiproxy answers it with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class _Attr:
    default: Any
    low: int = 0
    high: int = _BIG
    choices: tuple[str, ...] = ()
    #: an extension on a Toxiproxy type: absent from the toxic's attributes unless given, so what Toxiproxy's
    #: clients read back is Toxiproxy's shape (its default applies where it is absent)
    optional: bool = False

    def parse(self, key: str, value: Any) -> Any:
        if self.choices:
            if value not in self.choices:
                raise ToxicError(f"bad attribute {key}: {value!r} (one of {', '.join(self.choices)})")
            return value
        if isinstance(self.default, str):
            if not isinstance(value, str) or len(value) > 256:
                raise ToxicError(f"bad attribute {key}: a string of at most 256 characters")
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ToxicError(f"bad attribute {key}: {value!r} is not an integer")
        if not self.low <= value <= self.high:
            raise ToxicError(f"bad attribute {key}: {value} (from {self.low} to {self.high})")
        return value


def _code(default: str) -> _Attr:
    return _Attr(default, choices=tuple(H2_CODES))


_MS = _Attr(0, 0, MAX_MS)
#: `after_streams` on a toxic that acts on the whole connection: it acts from the connection's N+1-th stream on
_AFTER = _Attr(0, 0, _BIG, optional=True)
#: type -> attribute -> its default and bounds. Units are Toxiproxy's: ms, KB/s (1,000 bytes), bytes, µs.
TYPES: dict[str, dict[str, _Attr]] = {
    # after_streams (every type but goaway, rst_stream, connect): the toxic acts on a connection from its
    # N+1-th stream on (all streams, drill and organic; at that stream's HEADERS); 0, the default: at once
    "latency": {"latency": _MS, "jitter": _MS, "after_streams": _AFTER},
    "bandwidth": {"rate": _Attr(0, 0, _BIG), "after_streams": _AFTER},
    "slow_close": {"delay": _MS, "after_streams": _AFTER},
    # mode kernel: the connection's packets dropped by nftables as well, so TCP acknowledges nothing (kernel.py)
    "timeout": {"timeout": _MS, "mode": _Attr("user", choices=("user", "kernel")), "after_streams": _AFTER},
    "reset_peer": {"timeout": _MS, "after_streams": _AFTER},
    "slicer": {"average_size": _Attr(0, 0, 1 << 24), "size_variation": _Attr(0, 0, 1 << 24),
               "delay": _Attr(0, 0, MAX_MS * 1000), "after_streams": _AFTER},  # fmt: skip
    "limit_data": {"bytes": _Attr(0, 0, _BIG), "after_streams": _AFTER},
    # HTTP/2 (a relay that reads the frames): last_stream all = 2^31-1, current = the highest stream the client
    # opened, before_in_flight = below the lowest stream in flight (those are then not processed: retryable)
    # after_streams: sent once the connection opened that many streams (0: at once, so new connections serve none)
    "goaway": {"code": _code("NO_ERROR"), "last_stream": _Attr("current", choices=("all", "current",
               "before_in_flight")), "debug": _Attr(""), "after_streams": _Attr(1, 0, _BIG)},  # fmt: skip
    # on drill-tagged streams only: at their headers, at their first DATA (mid-message), or after their end;
    # after_streams: the first N drill streams of each connection pass; limit: at most N reset per connection
    # (0: no limit), so a client that retries a REFUSED_STREAM transparently is seen to;
    # after_messages k (instead of `at`): reset once the k-th gRPC message of the toxic's direction passed
    "rst_stream": {"code": _code("CANCEL"), "at": _Attr("headers", choices=("headers", "data", "end")),
                   "after_streams": _Attr(0, 0, _BIG), "limit": _Attr(0, 0, _BIG),
                   "after_messages": _Attr(0, 0, _BIG)},  # fmt: skip
    "ping_blackhole": {"after_streams": _AFTER},
    "max_streams": {"streams": _Attr(0, 0, (1 << 31) - 1), "after_streams": _AFTER},
    "window_stall": {"after_streams": _AFTER},
    # new connections only: refuse = accepted then reset at once; hang = accepted, never answered
    "connect": {"mode": _Attr("refuse", choices=("refuse", "hang"))},
}
#: Types that act on HTTP/2 frames, and those that act when a connection is accepted
H2_TYPES = frozenset({"goaway", "rst_stream", "ping_blackhole", "max_streams", "window_stall"})
CONNECT_TYPES = frozenset({"connect"})


@dataclasses.dataclass(frozen=True)
class Toxic:
    """One toxic as set on a link: Toxiproxy's fields, its attributes complete (defaults filled)."""

    name: str
    type: str
    stream: str = DOWNSTREAM
    toxicity: float = 1.0
    attributes: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: act only on connections whose every stream so far carried the drill tenant (from the first such stream)
    drill_only: bool = False

    @property
    def upstream(self) -> bool:
        """Acts on the bytes from the client to the server."""
        return self.stream == UPSTREAM

    def attr(self, key: str) -> Any:
        return self.attributes[key]

    @property
    def mode(self) -> str:
        """Where it acts: `kernel` (a `timeout` whose packets nftables drops) or `user space` (the relay)."""
        return "kernel" if self.type == "timeout" and self.attributes.get("mode") == "kernel" else "user space"

    def to_json(self) -> dict:
        return {"name": self.name, "type": self.type, "stream": self.stream, "toxicity": self.toxicity,
                "attributes": dict(self.attributes), "drill_only": self.drill_only}  # fmt: skip


def _toxicity(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ToxicError(f"bad toxicity {value!r}: a number from 0 to 1")
    return float(value)


def _attributes(kind: str, given: Any, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ToxicError("bad request body: attributes must be an object")
    spec = TYPES[kind]
    unknown = sorted(set(given) - set(spec))
    if unknown:
        raise ToxicError(f"bad attribute {unknown[0]}: {kind} takes {', '.join(spec) or 'none'}")
    out = {key: attr.default for key, attr in spec.items() if not attr.optional} if base is None else dict(base)
    for key, value in given.items():
        out[key] = spec[key].parse(key, value)
    if kind == "rst_stream" and out["after_messages"] and out["at"] != "headers":
        raise ToxicError("bad attribute after_messages: a stream is reset after its k-th message or at `at`, "
                         "not both (leave `at` out)")  # fmt: skip
    return out


def parse_toxic(body: Any) -> Toxic:
    """A new toxic from Toxiproxy's JSON (a dict); `ToxicError` (400) if anything in it is wrong."""
    if not isinstance(body, dict):
        raise ToxicError("bad request body: a JSON object")
    kind = body.get("type")
    stream = body.get("stream", DOWNSTREAM) or DOWNSTREAM
    if stream not in (UPSTREAM, DOWNSTREAM):
        raise ToxicError("stream was invalid, can be either upstream or downstream")
    if kind not in TYPES:
        raise ToxicError(f"invalid toxic type: {kind!r} (one of {', '.join(TYPES)})")
    name = body.get("name") or f"{kind}_{stream}"
    if not isinstance(name, str) or len(name) > 128:
        raise ToxicError("bad request body: name must be a string of at most 128 characters")
    toxicity = _toxicity(body.get("toxicity", 1.0))
    drill_only = _drill_only(body.get("drill_only", False), kind)
    return Toxic(name, kind, stream, toxicity, _attributes(kind, body.get("attributes")), drill_only)


def _drill_only(value: Any, kind: str) -> bool:
    if not isinstance(value, bool):
        raise ToxicError(f"bad drill_only {value!r}: true or false")
    if value and kind in CONNECT_TYPES:
        raise ToxicError("bad drill_only: a connect fault acts before any stream says whose it is")
    return value


def update_toxic(toxic: Toxic, body: Any) -> Toxic:
    """Toxiproxy's update: new attributes (merged over the old) and toxicity; the rest stays."""
    if not isinstance(body, dict):
        raise ToxicError("bad request body: a JSON object")
    toxicity = _toxicity(body.get("toxicity", toxic.toxicity))
    attributes = _attributes(toxic.type, body.get("attributes"), toxic.attributes)
    drill_only = _drill_only(body.get("drill_only", toxic.drill_only), toxic.type)
    return dataclasses.replace(toxic, toxicity=toxicity, attributes=attributes, drill_only=drill_only)
