"""Ports a test names (in a plan, a command line) before the process that binds them starts: picked below the
kernel's ephemeral range.

A port found by `bind(("127.0.0.1", 0))` and released is free for anybody: the kernel hands the same range out to
every `bind(0)` and to every outgoing connection's source port, and the suite's five workers make thousands of
those. Between the pick and the bind (seconds, for a process started after others) another worker can take it (a
CI stress run: "cannot serve metrics on 127.0.0.1:45431: Address already in use"). Below the ephemeral range the
kernel hands out nothing: only another test's pick could take such a port, and picks are drawn at random (from the
system's source, so pytest-randomly's per-test reseeding cannot give every worker the same ones) over thousands of
ports, each checked free when drawn.
"""

from __future__ import annotations

import random
import socket

_DRAW = random.SystemRandom()
#: how many ports below the ephemeral range picks are drawn from
SPAN = 40_000


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux' default when it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            low, high = (int(x) for x in fh.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port(*hosts: str) -> int:
    """A port free on every one of `hosts` (127.0.0.1 when none), below the ephemeral range."""
    hosts = hosts or ("127.0.0.1",)
    low = ephemeral_range()[0]
    start = max(1024, low - SPAN)
    for _ in range(500):
        port = _DRAW.randrange(start, low)
        try:
            for host in hosts:
                with socket.socket() as s:
                    s.bind((host, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no port free on {', '.join(hosts)} in {start}-{low - 1}")
