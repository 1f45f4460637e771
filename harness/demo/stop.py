"""`drill stop PID|--all-local`: the emergency stop from outside — SIGUSR1 to running servers.

A server that installed the handler (`drill serve` does; a service calls
`harness.core.safety.install_stop_signal()`) turns injection off for the life of
the process and releases delayed and dropped calls in flight. SIGUSR1's default
action ends a process, so a process is signalled only when it catches SIGUSR1
(`SigCgt` in /proc/PID/status): a wrong PID is refused, never killed.

`--all-local` signals every process of this user whose command line is
`drill serve`, `drill proxy` or `drill link` (or `python -m harness.cli serve|proxy|link`):
a proxy runs the same pipeline in front of a service in another language, and a link's
one-way stop removes every toxic it set (its kernel-mode rules too). Linux only (/proc).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import signal

from harness.core import cliargs
from harness.core.errors import BadInput, RunFailed
from harness.core.limits import MAX_PID

PROC = pathlib.Path("/proc")


def add_arguments(p: argparse.ArgumentParser) -> None:
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("pid", nargs="?", type=cliargs.integer(1, MAX_PID, "a process id"),
                     help="process id of a server that handles SIGUSR1")  # fmt: skip
    who.add_argument(
        "--all-local",
        action="store_true",
        help="every `drill serve`, `drill proxy` and `drill link` process of this user on this machine",
    )


def cmdline(pid: int) -> list[str]:
    """The process's argv (empty when it is gone or unreadable)."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


#: the subcommands whose processes handle the emergency stop (SIGUSR1)
STOPPABLE = ("serve", "proxy", "link")


def is_drill_serve(argv: list[str]) -> bool:
    """`drill serve|proxy|link …`, `python -m harness.cli serve|proxy|link …` or `python …/harness/cli.py …`."""
    for i, arg in enumerate(argv[:-1]):
        base = os.path.basename(arg)
        drill = base == "drill" or arg == "harness.cli" or arg.endswith("harness/cli.py")
        if drill and argv[i + 1] in STOPPABLE:
            return True
    return False


def catches(pid: int, signum: int = signal.SIGUSR1) -> bool:
    """Whether the process has a handler for `signum` (its `SigCgt` mask), so the signal cannot end it."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def owner(pid: int) -> int | None:
    try:
        return (PROC / str(pid)).stat().st_uid
    except OSError:
        return None


def local_servers() -> list[int]:
    """PIDs of this user's `drill serve`, `drill proxy` and `drill link` processes (this process excluded)."""
    me, uid = os.getpid(), os.getuid()
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me or owner(pid) != uid:
            continue
        if is_drill_serve(cmdline(pid)):
            found.append(pid)
    return sorted(found)


def _signal(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        raise RunFailed(f"stop: process {pid} is gone") from None
    except PermissionError:
        raise RunFailed(f"stop: not allowed to signal process {pid} (another user's)") from None


def _describe(pid: int) -> str:
    return " ".join(cmdline(pid))[:120] or "?"


def run(args: argparse.Namespace) -> int:
    if not PROC.is_dir():
        raise RunFailed("stop: needs /proc (Linux)")
    if args.all_local:
        pids = local_servers()
        if not pids:
            raise RunFailed("stop: no local `drill serve`, `drill proxy` or `drill link` process of this user")
        refused = [pid for pid in pids if not catches(pid)]
        for pid in pids:
            if pid in refused:
                print(f"not signalled {pid}: no SIGUSR1 handler yet (still starting?): {_describe(pid)}")
                continue
            _signal(pid)
            print(f"signalled {pid} (SIGUSR1, emergency stop): {_describe(pid)}")
        if refused:
            raise RunFailed(f"stop: {len(refused)} of {len(pids)} servers had no SIGUSR1 handler; not signalled")
        return 0
    pid = args.pid  # 1..MAX_PID, checked by argparse
    if not (PROC / str(pid)).exists():
        raise RunFailed(f"stop: no process {pid}")
    if not catches(pid):
        raise BadInput(
            f"stop: process {pid} does not handle SIGUSR1 (the signal would end it); not signalled. "
            "Services install it with harness.core.safety.install_stop_signal()"
        )
    _signal(pid)
    print(f"signalled {pid} (SIGUSR1, emergency stop): {_describe(pid)}")
    return 0
