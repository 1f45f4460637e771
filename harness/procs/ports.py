"""Ports that cannot collide: every server binds port 0 itself and reports the port it got.

A port found free (bind 0, read it, release it) and bound again later by someone
else can be taken in between: the kernel hands out the same ephemeral range
(32768–60999 on Linux) to every outgoing connection, and a drill makes thousands.
It lost a `make demo` that way. So nothing here picks a port for someone else to
bind. Servers we start bind port 0 themselves and tell us what they got:
`drill serve` in its ready file, a Locust process in `--drill-ports-dir`, and any
other child (Prometheus) through `listening_ports(pid)`, which reads the kernel's
own table of the sockets that process listens on.

`refused_port()` is for the opposite need, an address where nothing answers: it
holds a bound, never-listening socket, so connections are refused for as long as
the context lasts and nobody else can take that port meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator

#: /proc/net/tcp state of a listening socket
_LISTEN = "0A"


def socket_inodes(pid: int) -> set[str]:
    """The inodes of every socket the process has open (`socket:[INODE]` links in /proc/PID/fd)."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def listening_ports(pid: int) -> list[int]:
    """TCP ports the process `pid` listens on (IPv4 and IPv6), from /proc; [] when it is gone."""
    inodes = socket_inodes(pid)
    ports: set[int] = set()
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh, None)  # header
                for line in fh:
                    fields = line.split()
                    if len(fields) > 9 and fields[3] == _LISTEN and fields[9] in inodes:
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            continue
    return sorted(ports)


def wait_listening(proc: subprocess.Popen, timeout_s: float, *, count: int = 1) -> list[int]:
    """The ports a child we started listens on, once it listens on at least `count` of them.

    Returns [] when the child exits or time runs out (the caller says why, with the child's log).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        ports = listening_ports(proc.pid)
        if len(ports) >= count:
            return ports
        time.sleep(0.05)
    return []


@contextlib.contextmanager
def refused_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port on `host` where connections are refused while the context lasts (bound, not listening)."""
    with socket.socket() as s:
        s.bind((host, 0))
        yield s.getsockname()[1]


def private_loopback(pid: int | None = None) -> str:
    """A loopback address of this process's own (127.A.B.C from its PID), for a server that must listen on
    a fixed port: Locust's `--processes` master binds 5557 before its forked workers connect to it, so it
    cannot bind port 0 and announce. No other live process of ours derives the same address, so two drills
    (or a drill and a compose stack's master on its own address) cannot collide on it. Linux routes all of
    127.0.0.0/8 to the loopback interface."""
    pid = os.getpid() if pid is None else pid
    return f"127.{100 + (pid >> 16) % 150}.{(pid >> 8) & 255}.{pid & 255}"
