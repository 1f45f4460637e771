"""Reconnecting (gRPC's connection-backoff protocol) as a configuration names it, and the channel options it becomes.

A configuration's `reconnect` section:

    reconnect:
      connectTimeout: 2s    # grpc.min_reconnect_backoff_ms: how long one connection attempt may take (20 s)
      initialBackoff: 1s    # grpc.initial_reconnect_backoff_ms: the wait after the first failed attempt (1 s)
      maxBackoff: 2s        # grpc.max_reconnect_backoff_ms: the longest wait between attempts (120 s)

In parentheses, gRPC's defaults (doc/connection-backoff.md: MIN_CONNECT_TIMEOUT, INITIAL_BACKOFF, MAX_BACKOFF;
gRPC core reads MIN_CONNECT_TIMEOUT from `grpc.min_reconnect_backoff_ms`). Why a drill needs them: a connection
keepalive closed (`keepalive.py`) is reconnected at once, and where the peer is still silent that attempt's
handshake is lost too, so the caller waits out the connect timeout, after the peer is back as well; and every
failed attempt multiplies the wait before the next one by 1.6, up to the longest. A short connect timeout alone
therefore helps after a short outage and can hurt after a long one: after a 90-s blackhole the waits had grown
past the trial's recovery (docs/link-drills.md has both runs). Cap the backoff with it.
"""

from __future__ import annotations

from typing import Any

from harness.resilience._schema import Reader

KEYS = ("connectTimeout", "initialBackoff", "maxBackoff")
#: gRPC takes times as a C int of ms; a day is longer than any drill and far inside it
MAX_S = 86400.0
#: gRPC core's floor on a connect timeout and a backoff
MIN_S = 0.1

_OPTIONS = {
    "connect_timeout_s": "grpc.min_reconnect_backoff_ms",
    "initial_backoff_s": "grpc.initial_reconnect_backoff_ms",
    "max_backoff_s": "grpc.max_reconnect_backoff_ms",
}


def parse(r: Reader | None) -> dict[str, float | None] | None:
    """The `reconnect` section → {connect_timeout_s, initial_backoff_s, max_backoff_s} (None: gRPC's); None = absent."""
    if r is None:
        return None
    out = {
        "connect_timeout_s": r.duration("connectTimeout", None, lo=MIN_S, hi=MAX_S),
        "initial_backoff_s": r.duration("initialBackoff", None, lo=MIN_S, hi=MAX_S),
        "max_backoff_s": r.duration("maxBackoff", None, lo=MIN_S, hi=MAX_S),
    }
    initial = out["initial_backoff_s"] if out["initial_backoff_s"] is not None else 1.0  # gRPC's INITIAL_BACKOFF
    if out["max_backoff_s"] is not None and out["max_backoff_s"] < initial:
        r.fail(r.key_path("maxBackoff"), f"{out['max_backoff_s']:g}s is shorter than initialBackoff ({initial:g}s)")
    return out


def channel_options(spec: dict[str, float | None] | None) -> tuple[tuple[str, Any], ...]:
    """A caller's channel options for `spec` (none for what it leaves to gRPC)."""
    if spec is None:
        return ()
    return tuple((option, max(1, round(spec[key] * 1000))) for key, option in _OPTIONS.items() if spec[key] is not None)
