"""Loopback port helper shared by the CLI, the drill runner and the tests."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` right now (the kernel's pick for port 0); callers bind it soon after."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
