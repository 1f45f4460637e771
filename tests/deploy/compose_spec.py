"""Reading a compose file the way `docker compose` does, for tests/deploy/compose_local.py.

Interpolation of `${VAR:-default}` and friends, the Dockerfile's `ENV`, the ports a service
declares, and which (address, port) a process listens on (from /proc, IPv4, IPv6 and v4-mapped).
"""

from __future__ import annotations

import ipaddress
import pathlib
import re
import shlex
from typing import Any

import yaml

from harness.procs.ports import socket_inodes

_INTERP = re.compile(r"\$(?:\$|\{(?P<braced>[^}]*)\}|(?P<named>[A-Za-z_][A-Za-z0-9_]*))")
_LISTEN = "0A"


class ComposeError(RuntimeError):
    """The compose file asks for something these processes cannot do, or a service failed."""


# --- the compose file ---------------------------------------------------------------------------------
def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variable interpolation (`$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `$$`)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        expr = m.group("braced") if m.group("braced") is not None else m.group("named")
        for sep in (":-", "-"):
            if sep in expr:
                name, default = expr.split(sep, 1)
                got = env.get(name)
                if got is None or (sep == ":-" and got == ""):
                    return default
                return got
        return env.get(expr, "")

    return _INTERP.sub(one, value)


def _merge(base: Any, over: Any) -> Any:
    """Compose's merge of an override file, for what ours use: mappings merge key by key, anything else
    (a command, a list) is replaced by the override's."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: _merge(base[k], v) if k in base else v for k, v in over.items()}}
    return over


def load_compose(paths: pathlib.Path | list[pathlib.Path], env: dict[str, str]) -> dict:
    """One compose file, or several merged in order (`docker compose -f A -f B`), interpolated from `env`."""
    spec: dict = {}
    for path in [paths] if isinstance(paths, pathlib.Path) else paths:
        spec = _merge(spec, yaml.safe_load(path.read_text(encoding="utf-8")))  # merge keys (<<) resolved by the loader
    return interpolate(spec, env)


def dockerfile_env(path: pathlib.Path) -> dict[str, str]:
    """The `ENV KEY=VALUE …` lines of a Dockerfile (with `\\` continuations)."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip().upper().startswith("ENV "):
            for item in shlex.split(line.strip()[4:]):
                key, _, value = item.partition("=")
                out[key] = value
    return out


def declared_ports(service: dict) -> set[int]:
    """Container ports a service declares: `expose` and the container side of `ports`."""
    ports = {int(p) for p in service.get("expose", [])}
    for p in service.get("ports", []):
        ports.add(int(str(p).rsplit(":", 1)[-1].split("/")[0]))
    return ports


def _address(hex_ip: str) -> str:
    """An address from /proc/net/tcp{,6}: 32-bit words in host (little-endian) order; v4-mapped as IPv4."""
    raw = b"".join(bytes.fromhex(hex_ip[i : i + 8])[::-1] for i in range(0, len(hex_ip), 8))
    ip = ipaddress.ip_address(raw)
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def listening_sockets(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket the process `pid` listens on (IPv4, IPv6, v4-mapped), from /proc."""
    inodes = socket_inodes(pid)
    if not inodes:
        return set()
    out = set()
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        try:
            lines = pathlib.Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and fields[9] in inodes:
                hex_ip, hex_port = fields[1].split(":")
                out.add((_address(hex_ip), int(hex_port, 16)))
    return out
