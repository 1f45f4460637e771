"""argparse types with range checks, shared by every `drill` subcommand.

A flag is checked where argparse reads it, so a bad value is the house's one line, exit 2, before
anything starts: `drill: serve: argument --port: a port 0-65535, got '99999' (see `drill serve
--help`)`. Numbers are finite and within a bound from `harness.core.limits`; addresses and URLs
have the parts a connection needs. Each factory returns a callable for `type=`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import pathlib
import re
import urllib.parse
from collections.abc import Callable

from harness.core.faults import DirectiveError, parse_directive
from harness.core.limits import MAX_PORT, MAX_SEED, MIN_SEED
from harness.core.reasons import explain
from harness.core.status import STATUS_NAMES


def _fmt(x: float) -> str:
    return str(x) if isinstance(x, int) else str(int(x)) if float(x).is_integer() else f"{x:g}"


def integer(low: int, high: int, what: str = "a whole number") -> Callable[[str], int]:
    """A whole number within [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            span = f"{low}-{high}" if low >= 0 else f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"{what} {span}, got {text!r}")
        return value

    parse.__name__ = "integer"
    return parse


def number(low: float, high: float, what: str = "a number", *, above: bool = False) -> Callable[[str], float]:
    """A finite number within [low, high] (`above`: strictly above low)."""
    span = f"{'above ' + _fmt(low) + ' and up to' if above else _fmt(low) + ' to'} {_fmt(high)}"

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and (value > low if above else value >= low) and value <= high):
            raise argparse.ArgumentTypeError(f"{what} {span}, got {text!r}")
        return value

    parse.__name__ = "number"
    return parse


def port(low: int = 0, what: str = "a port") -> Callable[[str], int]:
    """A port number `low`..65535 (0 = any free port where the command says so)."""
    return integer(low, MAX_PORT, what)


def split_host_port(text: str) -> tuple[str, int] | None:
    """`HOST:PORT` or `[IPv6]:PORT` → (host, port) with a port 1-65535, else None."""
    host, sep, port_text = text.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or re.search(r"[\s/@]", host) or not (port_text.isascii() and port_text.isdigit()):
        return None
    value = int(port_text)
    return (host, value) if 1 <= value <= MAX_PORT else None


def host_port(text: str) -> str:
    """An address to connect to, `HOST:PORT` (port 1-65535), returned as given."""
    if split_host_port(text) is None:
        raise argparse.ArgumentTypeError(f"an address HOST:PORT (port 1-{MAX_PORT}), got {text!r}")
    return text.strip()


host_port.__name__ = "address"


def http_url(text: str) -> str:
    """An http:// or https:// URL with a host (and a valid port when it names one), returned as given."""
    try:
        parts = urllib.parse.urlsplit(text.strip())
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(f"an http:// or https:// URL with a host, got {text!r}")
    return text.strip()


http_url.__name__ = "URL"


def duration(high: float) -> Callable[[str], float]:
    """Seconds as `90`, `90s`, `5m` or `1h`: above 0, at most `high`."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}

    def parse(text: str) -> float:
        t = text.strip()
        try:
            seconds = float(t[:-1]) * units[t[-1]] if t[-1:] in units else float(t)
        except ValueError:
            seconds = math.nan
        if not (math.isfinite(seconds) and 0 < seconds <= high):
            raise argparse.ArgumentTypeError(f"a duration like 90s, 5m or 1h, up to {_span(high)}, got {text!r}")
        return seconds

    parse.__name__ = "duration"
    return parse


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


#: Times a drill can have run at: from 2000-01-01 to 2100-01-01 (unix seconds).
_EARLIEST, _LATEST = 946_684_800.0, 4_102_444_800.0


def timestamp(text: str) -> float:
    """A point in time: unix seconds or ISO 8601 (`2026-01-31T12:00:00Z`), between 2000 and 2100."""
    try:
        value = float(text)
    except ValueError:
        try:
            value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise argparse.ArgumentTypeError(f"not unix seconds or ISO 8601: {text!r}") from None
    if not (math.isfinite(value) and _EARLIEST <= value <= _LATEST):
        raise argparse.ArgumentTypeError(f"a time between 2000 and 2100 (unix seconds or ISO 8601), got {text!r}")
    return value


timestamp.__name__ = "time"


#: `--seed`: the hit formula's 64-bit seed (harness.core.limits.MIN_SEED..MAX_SEED).
seed = integer(MIN_SEED, MAX_SEED, "a seed (64-bit whole number)")


def error_status(text: str) -> str:
    """A gRPC status name other than OK (`RESOURCE_EXHAUSTED`), any case, returned upper-case."""
    name = text.strip().upper()
    if name not in STATUS_NAMES or name == "OK":
        raise argparse.ArgumentTypeError(f"a gRPC error status name (RESOURCE_EXHAUSTED, UNAVAILABLE, …), got {text!r}")
    return name


error_status.__name__ = "status"


def directive(text: str) -> str:
    """An `x-fault` directive servers accept (`delay:250`, `abort:UNAVAILABLE`, `drop:300`), said in words if not."""
    try:
        parse_directive(text)
    except DirectiveError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {explain(err)}") from None
    return text


directive.__name__ = "directive"


def new_file(text: str) -> str:
    """A file this command will write: its folder exists and is writable, and it is not a folder itself."""
    path = pathlib.Path(text)
    folder = path.parent
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"no directory {str(folder)!r} to write {path.name!r} in")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"directory {str(folder)!r} is not writable")
    return text


new_file.__name__ = "file"


def directory(text: str) -> str:
    """A folder this command writes into (created when missing): refused when a file has that name."""
    if pathlib.Path(text).exists() and not pathlib.Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory")
    return text


directory.__name__ = "directory"
