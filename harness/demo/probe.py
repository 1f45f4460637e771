"""`drill probe half-open HOST:PORT`: what does a server do with connections whose client went quiet?

Interceptors only see calls. A client that shuts down its write side (or
vanishes) leaves a connection the server must notice and reclaim, or it holds
a file descriptor forever. The probe opens `--count` connections, optionally
sends the HTTP/2 client preface, half-closes them (`shutdown(SHUT_WR)`), reads
with a timeout and reports per connection what the server did and when:
`eof` (closed), `reset`, `data` (bytes, then still open) or `open` (nothing).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import selectors
import socket
import time

from harness.core import cliargs
from harness.core import limits as lim
from harness.core.errors import RunFailed

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


@dataclasses.dataclass
class ProbeResult:
    index: int
    outcome: str = "open"  # eof | reset | open | refused
    closed_after_s: float | None = None
    bytes_received: int = 0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def half_open(
    host: str,
    port: int,
    *,
    count: int = 1,
    timeout_s: float = 5.0,
    send_preface: bool = True,
    connect_timeout_s: float = 2.0,
) -> list[ProbeResult]:
    """Open `count` connections, half-close them, watch them for `timeout_s` (bounded by both)."""
    if not 1 <= count <= lim.MAX_PROBE_CONNECTIONS:
        raise ValueError(f"count must be 1..{lim.MAX_PROBE_CONNECTIONS}")
    results = [ProbeResult(i) for i in range(count)]
    sel = selectors.DefaultSelector()
    socks: list[socket.socket] = []
    start = time.monotonic()
    try:
        for r in results:
            try:
                s = socket.create_connection((host, port), timeout=connect_timeout_s)
            except OSError:
                r.outcome = "refused"
                continue
            if send_preface:
                s.sendall(H2_PREFACE + H2_EMPTY_SETTINGS)
            s.shutdown(socket.SHUT_WR)
            s.setblocking(False)
            socks.append(s)
            sel.register(s, selectors.EVENT_READ, r)
        pending = len(socks)
        deadline = start + timeout_s
        while pending and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=max(0.0, min(0.2, deadline - time.monotonic()))):
                r: ProbeResult = key.data
                try:
                    data = key.fileobj.recv(65536)
                except ConnectionResetError:
                    data, r.outcome = None, "reset"
                except BlockingIOError:
                    continue
                if data:
                    r.bytes_received += len(data)
                    continue
                if r.outcome != "reset":
                    r.outcome = "eof"
                r.closed_after_s = round(time.monotonic() - start, 3)
                sel.unregister(key.fileobj)
                pending -= 1
    finally:
        for s in socks:
            try:
                s.close()
            except OSError:
                pass
        sel.close()
    return results


def summarize(results: list[ProbeResult]) -> dict:
    closed = [r.closed_after_s for r in results if r.closed_after_s is not None]
    out: dict = {"connections": len(results)}
    for outcome in ("eof", "reset", "open", "refused"):
        out[outcome] = sum(r.outcome == outcome for r in results)
    out["bytes_received"] = sum(r.bytes_received for r in results)
    out["closed_after_s_max"] = max(closed) if closed else None
    out["closed_after_s_min"] = min(closed) if closed else None
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="probe", metavar="PROBE", required=True)
    ho = sub.add_parser("half-open", help="half-close connections and report what the server does")
    ho.add_argument("target", metavar="HOST:PORT", type=cliargs.host_port)
    ho.add_argument("--count", type=cliargs.integer(1, lim.MAX_PROBE_CONNECTIONS, "connections"), default=1,
                    help="connections to open (default 1)")  # fmt: skip
    ho.add_argument("--timeout", type=cliargs.number(0, lim.MAX_PHASE_S, "seconds", above=True), default=5.0,
                    help="seconds to watch (default 5)")  # fmt: skip
    ho.add_argument("--no-preface", action="store_true", help="do not send the HTTP/2 client preface first")
    ho.add_argument(
        "--json", action="store_true", help="print JSON (one summary object plus per-connection rows)"
    )


def run(args: argparse.Namespace) -> int:
    host, port = cliargs.split_host_port(args.target)  # checked by argparse
    results = half_open(host, port, count=args.count, timeout_s=args.timeout, send_preface=not args.no_preface)
    summary = summarize(results)
    if summary["refused"] == summary["connections"] and not args.json:
        raise RunFailed(f"probe: cannot connect to {args.target}: all {summary['connections']} connection(s) refused")
    if args.json:
        print(json.dumps({"summary": summary, "connections": [r.as_dict() for r in results]}))
    else:
        print(
            f"{summary['connections']} half-open connection(s) to {args.target}, watched {args.timeout:g}s: "
            f"{summary['eof']} closed by server, {summary['reset']} reset, {summary['open']} still open, "
            f"{summary['refused']} refused" + (
                f"; first close after {summary['closed_after_s_min']}s, last after {summary['closed_after_s_max']}s"
                if summary["closed_after_s_min"] is not None else "; none closed by the server"
            )
        )  # fmt: skip
    return 0 if summary["refused"] < summary["connections"] else 1
