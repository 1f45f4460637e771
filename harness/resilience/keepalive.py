"""Keepalive (gRFC A8) as a configuration names it, and the gRPC channel and server options it becomes.

A configuration's `keepalive` section:

    keepalive:
      time: 1s              # grpc.keepalive_time_ms: a PING after this long without activity
      timeout: 1s           # grpc.keepalive_timeout_ms: the PING's ACK awaited this long
      pingTimeout: 1s       # grpc.http2.ping_timeout_ms: gRPC core's own bound on any PING's ACK
      permitWithoutCalls: true   # grpc.keepalive_permit_without_calls: PINGs also with no call open
      serverPermit: {minPingInterval: 1s, permitWithoutCalls: true}

`pingTimeout` is not in gRFC A8 but governs it in gRPC core (grpc-python 1.8x): there a keepalive PING
whose ACK never comes is failed by the transport's ping timeout, 60 s by default, not by
`keepalive_timeout_ms` (issue 48 measured it: keepalive 1 s / 1 s did not notice a blackholed connection
within a 20-s deadline; with `pingTimeout` 1 s it failed in 2.0 s). Leave it out to drill keepalive "as it
is usually written".

`serverPermit` is what a server running this configuration should let its callers do (`server_options`;
`drill serve --config` applies it to its own server, a leaf's too, and the runner passes every hop its `--config`):
gRPC servers answer PINGs more frequent than `grpc.http2.min_ping_interval_without_data_ms` (5 min by
default) while no data flows with GOAWAY `too_many_pings` (A8's ping strikes), and PINGs with no call open
unless `grpc.keepalive_permit_without_calls`; a client keepalive of 1 s needs both relaxed. It defaults to
the client's own `time` and `permitWithoutCalls`, so one configuration run at every hop agrees with itself.
"""

from __future__ import annotations

from typing import Any

from harness.resilience._schema import Reader

KEYS = ("time", "timeout", "pingTimeout", "permitWithoutCalls", "serverPermit")
#: gRPC takes times as a C int of ms; a day is longer than any drill and far inside it
MAX_S = 86400.0


def parse(r: Reader | None) -> dict[str, Any] | None:
    """The `keepalive` section → {time_s, timeout_s, ping_timeout_s, permit_without_calls, server}; None = off."""
    if r is None:
        return None
    out: dict[str, Any] = {
        "time_s": r.duration("time", lo=0.001, hi=MAX_S),
        "timeout_s": r.duration("timeout", 20.0, lo=0.001, hi=MAX_S),  # gRPC's default: 20 s
        "ping_timeout_s": r.duration("pingTimeout", None, lo=0.001, hi=MAX_S),
        "permit_without_calls": r.boolean("permitWithoutCalls", False),
    }
    s = r.child("serverPermit", ("minPingInterval", "permitWithoutCalls"))
    out["server"] = {
        "min_ping_interval_s": s.duration("minPingInterval", out["time_s"], lo=0.0, hi=MAX_S) if s else out["time_s"],
        "permit_without_calls": s.boolean("permitWithoutCalls", out["permit_without_calls"])
        if s else out["permit_without_calls"],
    }  # fmt: skip
    if out["server"]["min_ping_interval_s"] > out["time_s"]:
        r.fail(r.key_path("serverPermit.minPingInterval"),
               f"{out['server']['min_ping_interval_s']:g}s is longer than time ({out['time_s']:g}s): a server "
               "running this configuration would answer its own callers' PINGs with GOAWAY too_many_pings")  # fmt: skip
    return out


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def channel_options(spec: dict[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """A caller's channel options for `spec` (none when keepalive is off)."""
    if spec is None:
        return ()
    out: list[tuple[str, Any]] = [
        ("grpc.keepalive_time_ms", _ms(spec["time_s"])),
        ("grpc.keepalive_timeout_ms", _ms(spec["timeout_s"])),
        ("grpc.keepalive_permit_without_calls", int(spec["permit_without_calls"])),
        # PINGs are not capped while no data is sent (gRPC's default allows 2, then waits for data)
        ("grpc.http2.max_pings_without_data", 0),
    ]
    if spec["ping_timeout_s"] is not None:
        out.append(("grpc.http2.ping_timeout_ms", _ms(spec["ping_timeout_s"])))
    return tuple(out)


def server_options(spec: dict[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """A server's options that permit its callers' keepalive (none when keepalive is off)."""
    if spec is None:
        return ()
    server = spec["server"]
    return (
        ("grpc.http2.min_ping_interval_without_data_ms", _ms(server["min_ping_interval_s"])),
        ("grpc.keepalive_permit_without_calls", int(server["permit_without_calls"])),
    )
