"""W3C baggage (the `baggage` header) as the drill reads and writes it (contracts "Baggage").

Every OpenTelemetry-instrumented service, in any language, forwards the `baggage` header of a call to the calls it
makes; so the drill's clients send the drill keys also as baggage entries (`drill.` names, headers.BAGGAGE_NAMES),
and our servers read them where the `x-*` keys are absent. This module is the header's grammar and nothing else:
pure, no grpc.

    baggage-string = list-member 0*179( OWS "," OWS list-member )
    list-member    = key OWS "=" OWS value *( OWS ";" OWS property )
    key = token (RFC 7230); value = *baggage-octet, percent-encoded UTF-8 (%x21 / %x23-2B / %x2D-3A / %x3C-5B /
    %x5D-7E; '%' only as an escape)

A header longer than MAX_BYTES, with more than MAX_MEMBERS members, or with a member that is not of that form, is
malformed as a whole (BaggageError): a reader takes nothing from it. Members we do not own are kept as they came
(key, value and properties byte for byte), so a hop forwards the header it got with only the drill entries set.
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse

#: The W3C limits a platform must propagate (and OpenTelemetry's): bytes of the whole header, members.
MAX_BYTES = 8192
MAX_MEMBERS = 180

_TCHAR = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]"
_VALUE_CHAR = r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]"
_OWS = r"[ \t]*"
_PROPERTY = rf"{_TCHAR}+(?:{_OWS}={_OWS}{_VALUE_CHAR}*)?"
_MEMBER = re.compile(
    rf"{_OWS}(?P<key>{_TCHAR}+){_OWS}={_OWS}(?P<value>{_VALUE_CHAR}*){_OWS}"
    rf"(?P<props>(?:;{_OWS}{_PROPERTY}{_OWS})*)"
)
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
#: Characters a value may carry as they are; every other one is percent-encoded ('%' itself too).
_SAFE = frozenset(chr(c) for c in range(0x21, 0x7F)) - frozenset('",;\\%')


class BaggageError(ValueError):
    """A `baggage` header that is not W3C baggage or is over its limits; the message says why, briefly."""


@dataclasses.dataclass(frozen=True, slots=True)
class Member:
    key: str
    #: The value decoded (percent-decoding, UTF-8).
    value: str
    #: `;`-led properties exactly as they came ('' for none).
    props: str = ""
    #: The member's text as it came, so an untouched member is forwarded byte for byte ('' = format it).
    raw: str = ""

    def text(self) -> str:
        return self.raw or f"{self.key}={encode_value(self.value)}{self.props}"


def encode_value(value: str) -> str:
    """`value` percent-encoded where the W3C grammar needs it (and nowhere else)."""
    if all(c in _SAFE for c in value):
        return value
    return "".join(c if c in _SAFE else urllib.parse.quote(c, safe="") for c in value)


def decode_value(value: str) -> str:
    if "%" not in value:
        return value
    if _BAD_ESCAPE.search(value):
        raise BaggageError("a '%' that is not an escape")
    try:
        return urllib.parse.unquote(value, errors="strict")
    except UnicodeDecodeError:
        raise BaggageError("a value that is not UTF-8") from None


def parse(header: str) -> list[Member]:
    """The members of a `baggage` header, in order (duplicates kept: readers take the first)."""
    try:
        size = len(header.encode())
    except UnicodeEncodeError:
        raise BaggageError("a header that is not UTF-8") from None
    if size > MAX_BYTES:
        raise BaggageError(f"over {MAX_BYTES} bytes")
    if not header.strip(" \t"):
        return []
    parts = header.split(",")
    if len(parts) > MAX_MEMBERS:
        raise BaggageError(f"over {MAX_MEMBERS} members")
    out = []
    for part in parts:
        m = _MEMBER.fullmatch(part)
        if m is None:
            raise BaggageError(f"a member that is not key=value: {part.strip()[:40]!r}")
        props = m["props"]
        out.append(Member(m["key"], decode_value(m["value"]), props.strip(" \t") if props else "", part.strip(" \t")))
    return out


def format_members(members: list[Member]) -> str:
    """The header for `members` (refused if over the limits: a sender never sends what a reader drops)."""
    if len(members) > MAX_MEMBERS:
        raise BaggageError(f"over {MAX_MEMBERS} members")
    text = ",".join(m.text() for m in members)
    if len(text.encode()) > MAX_BYTES:
        raise BaggageError(f"over {MAX_BYTES} bytes")
    return text


def entries(header: str, prefix: str) -> dict[str, str]:
    """{key: value} of the members whose key starts with `prefix` (first of each key wins)."""
    out: dict[str, str] = {}
    for m in parse(header):
        if m.key.startswith(prefix):
            out.setdefault(m.key, m.value)
    return out


def with_entries(header: str | None, prefix: str, values: dict[str, str]) -> str:
    """`header` with every `prefix` member replaced by `values` (appended, in their order); the other members
    as they came. A malformed `header` is replaced (its members cannot be told apart): raises nothing for it."""
    kept: list[Member] = []
    if header:
        try:
            kept = [m for m in parse(header) if not m.key.startswith(prefix)]
        except BaggageError:
            kept = []
    return format_members(kept + [Member(k, v) for k, v in values.items()])
