"""The `timeout` toxic's kernel mode: a faulted connection's packets dropped by nftables, on its 5-tuple.

A blackhole made in user space (the relay drops the bytes) still acknowledges at the TCP level, so it
tests HTTP/2 keepalive but not TCP_USER_TIMEOUT (gRFC A18) or `tcp_retries2`. In kernel mode
(`"attributes": {"mode": "kernel"}`) the relay asks the kernel to drop every packet of the connection
between the caller and the link, both ways, as a peer that is gone would: the caller's data is never
acknowledged. The relay's upstream connection is left alone.

Whose rules: each link of each process has its own nftables table, `inet drill_link_<name>_<hash>_<pid>_<start>`
(the link's name, made safe, a hash of it, the process's id and start time), holding two sets of
connections (IPv4, IPv6) and two chains that drop what matches them: `input` the caller's packets to
the link, `output` the link's packets to the caller (only those, so a caller on the same host sees
silence, not a local send error). No other table or rule is read or touched. A connection is added
when the toxic begins to act on it and removed when it stops (the toxic removed or updated, the one-way
stop, the connection closed); the table goes when its last connection does, when the link stops, and
when the process exits (atexit; `drill link` ends on SIGINT and SIGTERM through it). A process killed
outright (SIGKILL) leaves its table: the next relay to start (`drill link`, or the first kernel-mode
toxic of a process) deletes every `drill_link_` table whose process is gone (no such pid, or one that
started at another time). nftables is per network namespace, so this acts in the relay's own.

Needs root or CAP_NET_ADMIN and the `nft` command (Debian's `nftables`); `why_not()` says what is
missing, and the link refuses a kernel-mode toxic (400) with that reason. Each change is one `nft -f -`
run (a few ms, on the event loop's thread): the rules are in place when the call that set the toxic
returns; a toxic set on many open connections changes them in one run (`batch`).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import ipaddress
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Iterator

log = logging.getLogger("drill.link")

PREFIX = "drill_link_"
CAP_NET_ADMIN = 12
_TABLE = re.compile(r"^table inet (" + PREFIX + r"[A-Za-z0-9_]*_(\d+)_(\d+))$", re.M)
_NFT_TIMEOUT_S = 10.0


def _start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22), None when it is gone."""
    try:
        stat = open(f"/proc/{pid}/stat").read()  # noqa: SIM115 (one read)
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


def _has_net_admin() -> bool:
    if os.geteuid() == 0:
        return True
    try:
        for line in open("/proc/self/status").read().splitlines():  # noqa: SIM115
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def why_not() -> str | None:
    """Why this process cannot use the kernel mode (None: it can)."""
    if not _has_net_admin():
        return "the kernel mode needs root or CAP_NET_ADMIN (this process has neither)"
    if shutil.which("nft") is None:
        return "the kernel mode needs nftables' `nft` command (Debian: apt-get install nftables)"
    return None


def nft(script: str) -> str:
    """Run an nft script (`nft -f -`); its output. `RuntimeError` with nft's message if it fails."""
    proc = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True, timeout=_NFT_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"nft: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout


def _list_tables() -> str:
    proc = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, timeout=_NFT_TIMEOUT_S)
    return proc.stdout if proc.returncode == 0 else ""


def clean_stale() -> list[str]:
    """Delete each `drill_link_` table whose process is gone (killed outright); the tables deleted."""
    if why_not() is not None:
        return []
    gone = [name for name, pid, start in _TABLE.findall(_list_tables()) if _start_time(int(pid)) != int(start)]
    for name in gone:
        with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
            nft(f"delete table inet {name}\n")
            log.warning("kernel mode: deleted the stale table %s (its relay is gone)", name)
    return gone


def table_name(link: str, pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    safe = re.sub(r"[^A-Za-z0-9]", "_", link)[:40]
    digest = hashlib.sha256(link.encode()).hexdigest()[:8]
    return f"{PREFIX}{safe}_{digest}_{pid}_{_start_time(pid)}"


def _addr(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    addr = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped  # a dual-stack socket's IPv4 peer: IPv4 packets on the wire
    return addr


Tuple = tuple[str, int, str, int]  # (caller address, caller port, link address, link port), as the link sees it


def five_tuple(peer: tuple, local: tuple) -> Tuple:
    """A TCP connection's (caller, link) addresses as `five_tuple` keys (the protocol is TCP)."""
    return (str(_addr(peer[0])), int(peer[1]), str(_addr(local[0])), int(local[1]))


def _element(t: Tuple) -> tuple[str, str]:
    family = "4" if isinstance(ipaddress.ip_address(t[0]), ipaddress.IPv4Address) else "6"
    return f"conns{family}", f"{t[0]} . {t[1]} . {t[2]} . {t[3]}"


class KernelDrops:
    """One link's table: the connections whose packets the kernel drops now."""

    def __init__(self, link: str) -> None:
        self.link = link
        self.table = table_name(link)
        self.dropped: set[Tuple] = set()
        self._made = False
        self._pending: list[str] | None = None

    def _run(self, lines: list[str]) -> None:
        if self._pending is not None:
            self._pending.extend(lines)
        elif lines:
            self._apply(lines)

    def _apply(self, lines: list[str]) -> None:
        """One nft run; a failure (nft gone, a namespace torn down) is logged: the relay goes on."""
        try:
            nft("".join(lines))
        except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
            log.error("kernel mode: link %s: nft failed, packets may pass: %s", self.link, exc)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Changes made inside go to nft in one run at the end."""
        if self._pending is not None:
            yield
            return
        self._pending = []
        try:
            yield
        finally:
            lines, self._pending = self._pending, None
            if lines:
                self._apply(lines)

    def _create(self) -> list[str]:
        if self._made:
            return []
        clean_stale()
        _LIVE.add(self)
        self._made = True
        t = f"inet {self.table}"
        return [
            f"add table {t}\n",
            f"add set {t} conns4 {{ type ipv4_addr . inet_service . ipv4_addr . inet_service; }}\n",
            f"add set {t} conns6 {{ type ipv6_addr . inet_service . ipv6_addr . inet_service; }}\n",
            f"add chain {t} input {{ type filter hook input priority filter - 5; policy accept; }}\n",
            f"add chain {t} output {{ type filter hook output priority filter - 5; policy accept; }}\n",
            f"add rule {t} input ip saddr . tcp sport . ip daddr . tcp dport @conns4 drop\n",
            f"add rule {t} input ip6 saddr . tcp sport . ip6 daddr . tcp dport @conns6 drop\n",
            f"add rule {t} output ip daddr . tcp dport . ip saddr . tcp sport @conns4 drop\n",
            f"add rule {t} output ip6 daddr . tcp dport . ip6 saddr . tcp sport @conns6 drop\n",
        ]

    def drop(self, conn: Tuple) -> None:
        """The kernel drops this connection's packets from now on (both ways)."""
        if conn in self.dropped:
            return
        lines = self._create()
        name, element = _element(conn)
        self._run([*lines, f"add element inet {self.table} {name} {{ {element} }}\n"])
        self.dropped.add(conn)

    def release(self, conn: Tuple) -> None:
        """This connection's packets pass again (the table goes with its last connection)."""
        if conn not in self.dropped:
            return
        self.dropped.discard(conn)
        if not self.dropped:
            self.close()
            return
        name, element = _element(conn)
        self._run([f"delete element inet {self.table} {name} {{ {element} }}\n"])

    def close(self) -> None:
        """Delete the table (every rule of this link); a no-op when there is none."""
        self.dropped.clear()
        if not self._made:
            return
        self._made = False
        _LIVE.discard(self)
        if self._pending is not None:
            self._pending.clear()
        try:
            nft(f"delete table inet {self.table}\n")
        except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
            log.error("kernel mode: could not delete table %s: %s", self.table, exc)


#: every table this process made and has not deleted (deleted at exit)
_LIVE: set[KernelDrops] = set()


@atexit.register
def close_all() -> None:
    """Delete every table this process made (at exit, and on the way out of `drill link`)."""
    for drops in list(_LIVE):
        drops.close()
