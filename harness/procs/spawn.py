"""Child processes that never outlive us, and `drill serve` started and waited for.

Every child runs in its own process group with a parent-death signal and is
registered for an atexit sweep, so a killed runner, test or benchmark leaves no
process and no port behind. `start_serve` is the one way to start a `drill serve`
and wait until it serves (it writes its bound ports to a ready file).

No Python code runs in the child between fork and exec (no `preexec_fn`): that
lets CPython start it with vfork, where no `pthread_atfork` handler runs. gRPC's
do run after a plain fork in a process with live channels, restart its pollers
in the child, and those abort when the child closes its inherited descriptors
(`epoll_wait error: Bad file descriptor`, exit −6: a topology hop lost at start).
The parent-death signal is set by util-linux's `setpriv --pdeathsig` on the way
to the program instead, and `start_new_session` makes the process group.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

from harness.core.environ import environ_now
from harness.core.errors import RunFailed

#: every live child's process group, for the atexit sweep
_LIVE: dict[int, subprocess.Popen] = {}

#: util-linux's setpriv sets PR_SET_PDEATHSIG, then execs the program (None: not Linux, the sweep still applies)
SETPRIV = shutil.which("setpriv")


def spawn(argv: list[str], log_path: pathlib.Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a child in its own process group with PDEATHSIG; registered for the sweep."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")  # noqa: SIM115 - owned by the child's lifetime
    try:
        proc = subprocess.Popen(
            [SETPRIV, "--pdeathsig", "TERM", "--", *argv] if SETPRIV else argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        log.close()
    _LIVE[proc.pid] = proc
    return proc


def stop_processes(procs: list[subprocess.Popen], grace_s: float = 3.0) -> None:
    """SIGTERM each process group, wait up to `grace_s` until no member of any is left, then SIGKILL what is
    left and wait (at most 2 s) until it is gone. Never raises.

    The whole group, not only the process started here: a shell's program is its child, and it still runs (holding
    its port and its folder) after the shell is reaped; a program that drains on SIGTERM gets its grace too."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGTERM)
    if not _gone(procs, grace_s):
        for p in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
        _gone(procs, 2.0)  # SIGKILL is delivered, not done: a large process takes a moment to exit
    for p in procs:
        _LIVE.pop(p.pid, None)


def _gone(procs: list[subprocess.Popen], timeout_s: float) -> bool:
    """Wait until each process is reaped and its group has no live member; False if `timeout_s` passed first."""
    deadline = time.monotonic() + timeout_s
    while True:
        if all(p.poll() is not None for p in procs) and not any(group_members(p.pid) for p in procs):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def group_members(pgid: int, zombies: bool = False) -> list[int]:
    """The PIDs of process group `pgid` from /proc (a zombie holds nothing: left out unless `zombies`)."""
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            state, _, pgrp = stat[stat.rfind(")") + 2 :].split()[:3]
            if int(pgrp) == pgid and (zombies or state != "Z"):
                pids.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return pids


@atexit.register
def _sweep() -> None:
    stop_processes(list(_LIVE.values()), grace_s=1.0)


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal a process group we started (a child spawned with its own session); gone already is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def last_line(path: pathlib.Path) -> str:
    """The last non-empty line of a child's log, for a one-line error message ('no output' when none)."""
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    return lines[-1] if lines else "no output"


def python_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child Python that can import `harness` from this checkout."""
    env = environ_now()
    root = str(pathlib.Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra or {})
    return env


class ServeError(RunFailed):
    """A `drill serve` child that exited or did not become ready."""


@dataclasses.dataclass
class ServeProcess:
    """A `drill serve` child and the ports it bound (known once ready)."""

    name: str
    proc: subprocess.Popen
    ready_file: pathlib.Path
    log_path: pathlib.Path
    port: int = 0
    metrics_port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def why(self) -> str:
        """The child's last non-empty log line and where its log is: one line for an error message."""
        return f"{last_line(self.log_path)} (log: {self.log_path})"

    def stop(self) -> None:
        stop_processes([self.proc])


def spawn_serve(name: str, args: list[str], workdir: pathlib.Path, env: dict[str, str] | None = None,
                command: str = "serve") -> ServeProcess:  # fmt: skip
    """Start `drill COMMAND ARGS --ready-file ...` (`serve`, or `proxy`: both write the same ready file; logs to
    WORKDIR/NAME.log); see `wait_serving`."""
    ready = workdir / f"{name}.ready.json"
    ready.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "harness.cli", command, *args, "--ready-file", str(ready)]
    log_path = workdir / f"{name}.log"
    return ServeProcess(name, spawn(argv, log_path, python_env(env)), ready, log_path)


def wait_serving(servers: list[ServeProcess], timeout_s: float = 30.0) -> None:
    """Wait until every server wrote its ready file; ServeError if one exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    for s in servers:
        while True:
            if s.proc.poll() is not None:
                raise ServeError(f"{s.name} exited with {s.proc.returncode} at start: {s.why()}")
            if s.ready_file.exists():
                info = json.loads(s.ready_file.read_text())  # written whole (os.replace)
                s.port, s.metrics_port = int(info["port"]), int(info["metrics_port"])
                break
            if time.monotonic() > deadline:
                raise ServeError(f"{s.name} not ready after {timeout_s:.0f} s: {s.why()}")
            time.sleep(0.05)


def start_serve(
    name: str, args: list[str], workdir: pathlib.Path, env: dict[str, str] | None = None, timeout_s: float = 30.0,
    command: str = "serve",
) -> ServeProcess:
    """`spawn_serve` + `wait_serving` for one server; stops it again if it does not come up."""
    server = spawn_serve(name, args, workdir, env, command)
    try:
        wait_serving([server], timeout_s)
    except BaseException:
        server.stop()
        raise
    return server
