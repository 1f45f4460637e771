"""Strict readers for configuration values: every error names the key path it is about.

`Reader` walks a parsed YAML/JSON mapping; each accessor checks one value's type
and range and raises `ConfigError("<source>: a.b.c: <problem>")`. Durations are
gRPC JSON durations (`"0.1s"`) or plain numbers of seconds. Nothing here knows
what a key means; `config.py` does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from harness.core.errors import BadInput


class ConfigError(BadInput):
    """A configuration that cannot be loaded as written."""


_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)s\s*$")
_MISSING = object()


def parse_duration(value: Any) -> float:
    """`"1.5s"` (gRPC JSON duration) or a number of seconds -> seconds; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("a duration, not a boolean")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1))
    else:
        raise ValueError(f'{value!r} is not a duration (gRPC JSON form like "0.1s", or seconds)')
    if not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a finite duration")
    return seconds


class Reader:
    """One mapping at `path` in `source`; accessors validate and remember which keys were read."""

    def __init__(self, raw: Any, path: str, source: str, allowed: Iterable[str]) -> None:
        self.path, self.source = path, source
        if not isinstance(raw, dict):
            self.fail(path, "must be a mapping")
        self.raw: dict[str, Any] = raw
        allowed = set(allowed)
        for key in raw:
            if key not in allowed:
                self.fail(self.key_path(str(key)), "unknown key")

    def key_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def fail(self, path: str, problem: str):
        where = f"{path}: " if path else ""
        raise ConfigError(f"{self.source}: {where}{problem}")

    def has(self, key: str) -> bool:
        return key in self.raw and self.raw[key] is not None

    def child(self, key: str, allowed: Iterable[str]) -> Reader | None:
        """The mapping under `key` (None when absent or null)."""
        if not self.has(key):
            return None
        return Reader(self.raw[key], self.key_path(key), self.source, allowed)

    def _get(self, key: str, default: Any) -> Any:
        value = self.raw.get(key, _MISSING)
        if value is _MISSING or value is None:
            if default is _MISSING:
                self.fail(self.key_path(key), "required")
            return default
        return value

    def string(self, key: str, default: Any = _MISSING, choices: Iterable[str] | None = None) -> str:
        value = self._get(key, default)
        if not isinstance(value, str):
            self.fail(self.key_path(key), f"must be a string, not {type(value).__name__}")
        if choices is not None and value not in set(choices):
            self.fail(self.key_path(key), f"{value!r} is not one of {', '.join(sorted(choices))}")
        return value

    def boolean(self, key: str, default: Any = _MISSING) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            self.fail(self.key_path(key), f"must be true or false, not {value!r}")
        return value

    def number(
        self,
        key: str,
        default: Any = _MISSING,
        *,
        lo: float | None = None,
        hi: float | None = None,
        lo_open: bool = False,
        integer: bool = False,
    ) -> Any:
        value = self._get(key, default)
        if value is None:
            return None  # absent, and None was the default
        kind = int if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
            self.fail(self.key_path(key), f"must be {'an integer' if integer else 'a number'}, not {value!r}")
        self._range(key, value, lo, hi, lo_open)
        return value if integer else float(value)

    def duration(
        self, key: str, default: Any = _MISSING, *, lo: float = 0.0, lo_open: bool = False, hi: float | None = None
    ) -> float:
        value = self._get(key, default)
        if value is None:
            return None  # absent, and None was the default
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            self.fail(self.key_path(key), str(exc))
        self._range(key, seconds, lo, hi, lo_open)
        return seconds

    def strings(self, key: str, default: Any = _MISSING) -> list[str]:
        value = self._get(key, default)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(self.key_path(key), "must be a list of strings")
        return list(value)

    def _range(self, key: str, value: float, lo: float | None, hi: float | None, lo_open: bool) -> None:
        if lo is not None and (value < lo or (lo_open and value == lo)):
            bound = f"> {lo:g}" if lo_open else f">= {lo:g}"
            self.fail(self.key_path(key), f"{value!r} out of range (must be {bound})")
        if hi is not None and value > hi:
            self.fail(self.key_path(key), f"{value!r} out of range (must be <= {hi:g})")
