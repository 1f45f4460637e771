"""A chain of local processes the runner starts for each trial (`stack.processes`): services in any language,
proxies and taps, switched per configuration by what their commands are given.

The promises, each with a test in tests/stacks/test_processes.py:

- **In order, each ready before the next.** Process i+1 starts once process i is ready (its `ready.port` accepts a
  TCP connection on 127.0.0.1, or its `ready.file` exists), so a hop never starts before the hop it calls.
- **The configuration reaches them.** Each command runs under /bin/sh in the trial's output folder with
  `DRILL_CONFIG`, `DRILL_TRIAL`, `DRILL_PLAN_DIR`, `DRILL_OUT`, `DRILL_PYTHON` and its own `env`; that is the
  only way a configuration switches them (`$DRILL_CONFIG` in a command names its file).
- **Their output is the trial's.** NAME.log in the trial's output folder (stdout and stderr), kept after the run.
- **One line when one fails.** A ready port already taken before it starts (something else would answer for it),
  an exit before it is ready, or no readiness within `ready.timeout_s`: `RunFailed` (exit 1) naming the process
  and its log's last line; the processes started before it are stopped.
- **Nothing outlives the trial.** Each runs in its own process group with a parent-death signal
  (`harness.procs.spawn`); `stop` ends every group by PID (SIGTERM, a grace, SIGKILL), also after a failed start.

`ChainedStack` is the running stack (`targets.RunningStack`) with such a chain: started before the switch, the
proxy and the edge's readiness wait, stopped after the trial; its exits are crashes, the logs of its processes
marked `audit` the trial's audit lines when the stack names no other source, and a guard's trip is signalled
(SIGUSR1) to each of its processes that handles it (a `drill proxy`'s one-way emergency stop), as the demo's
replicas are.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

from harness.core.audit import hit_ids
from harness.core.environ import environ_now
from harness.core.errors import RunFailed
from harness.drills.plan.model import Plan, Variant
from harness.drills.plan.stack import StackProcess
from harness.drills.stack.targets import RunningStack, port_taken
from harness.procs.spawn import group_members, last_line, spawn, stop_processes

#: How often a start looks at its process (alive? ready?) while it waits.
POLL_S = 0.05
#: How long one readiness connect may take on the loopback (refused at once when nobody listens).
CONNECT_S = 0.5


class ProcessError(RunFailed):
    """A process of the chain did not start: one line naming it (exit 1)."""


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:`port` now."""
    with socket.socket() as s:
        s.settimeout(CONNECT_S)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            return False
    return True


class ProcessChain:
    """The processes of one trial: `start` them in order, ask which `exited`, `stop` them all."""

    def __init__(self, specs: tuple[StackProcess, ...], plan_dir: pathlib.Path) -> None:
        self.specs = specs
        self.plan_dir = plan_dir
        #: (spec, process, log) of each process started this trial, in start order
        self.running: list[tuple[StackProcess, subprocess.Popen, pathlib.Path]] = []

    def env(self, spec: StackProcess, config: str, trial: int, workdir: pathlib.Path) -> dict[str, str]:
        """The environment `spec`'s command runs with: ours, the trial's variables, then its own `env`."""
        return {**environ_now(), "DRILL_CONFIG": config, "DRILL_TRIAL": str(trial),
                "DRILL_PLAN_DIR": str(self.plan_dir),
                "DRILL_OUT": str(workdir), "DRILL_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1",
                **spec.env}  # fmt: skip

    def start(self, config: str, trial: int, workdir: pathlib.Path, say: Callable[[str], None] = print) -> None:
        """Start every process in order, each ready before the next; on a failure, stop what started and raise
        ProcessError. Blocking (the runner calls it off the event loop)."""
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            for spec in self.specs:
                self._start_one(spec, config, trial, workdir)
        except BaseException:
            self.stop()
            raise
        if self.specs:
            say(f"processes up: {' → '.join(s.name for s in self.specs)} (logs in {workdir})")

    def _start_one(self, spec: StackProcess, config: str, trial: int, workdir: pathlib.Path) -> None:
        ready = spec.ready
        where = f"stack.processes {spec.name}"
        if ready.port is not None and (taken := port_taken(ready.port)):
            raise ProcessError(f"{where}: its ready port 127.0.0.1:{ready.port} is in use before it starts ({taken}):"
                               " something else would answer for it; stop what listens there")  # fmt: skip
        ready_file = None
        if ready.file is not None:
            ready_file = pathlib.Path(ready.file) if os.path.isabs(ready.file) else workdir / ready.file
            ready_file.unlink(missing_ok=True)  # the last trial's says nothing of this one
        log = workdir / f"{spec.name}.log"
        # cwd is the trial's folder: spawn has no cwd, so the shell changes to it first
        command = f"cd {_quote(str(workdir))} && {spec.command}"
        proc = spawn(["/bin/sh", "-c", command], log, self.env(spec, config, trial, workdir))
        self.running.append((spec, proc, log))
        deadline = time.monotonic() + ready.timeout_s
        what = f"port 127.0.0.1:{ready.port}" if ready.port is not None else f"file {ready_file}"
        while True:
            if proc.poll() is not None:
                raise ProcessError(f"{where} exited with {proc.returncode} before it was ready: {last_line(log)} "
                                   f"(log: {log})")  # fmt: skip
            if ready_file is not None and ready_file.exists() or ready.port is not None and listening(ready.port):
                return
            if time.monotonic() >= deadline:
                raise ProcessError(f"{where} was not ready ({what}) within {ready.timeout_s:g} s: {last_line(log)} "
                                   f"(log: {log})")  # fmt: skip
            time.sleep(POLL_S)

    def exited(self) -> list[str]:
        """The processes that ended while the trial ran, with their exit codes."""
        return [f"{s.name} (process exited with {p.returncode}; log: {log})" for s, p, log in self.running
                if p.poll() is not None]  # fmt: skip

    def logs(self, audit: bool = False) -> list[pathlib.Path]:
        """The logs of the processes started this trial (`audit`: only those that hold audit lines)."""
        return [log for s, _, log in self.running if s.audit or not audit]

    def signal_handlers(self, signum: int = signal.SIGUSR1) -> list[str]:
        """Send `signum` to each process of the chain (any member of its group) that handles it: a `drill proxy`
        trips its one-way emergency stop; a process that would die of it is left alone. The names reached."""
        from harness.demo.stop import catches

        reached = []
        for spec, proc, _ in self.running:
            if proc.poll() is not None:
                continue
            for pid in group_members(proc.pid) or [proc.pid]:
                if catches(pid, signum):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signum)
                        reached.append(spec.name)
        return sorted(set(reached), key=[s.name for s in self.specs].index)

    def stop(self) -> None:
        """Stop every group (SIGTERM, a grace, SIGKILL), by the PIDs started here. Never raises."""
        procs = [p for _, p, _ in self.running]
        stop_processes(procs)


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


class ChainedStack(RunningStack):
    """A running stack whose services are `stack.processes` the runner starts for each trial."""

    def __init__(self, plan: Plan, log=print) -> None:
        super().__init__(plan.stack, log, seed=plan.seed, tenant=plan.fault.tenant)
        plan_dir = pathlib.Path(plan.source).resolve().parent if plan.source else pathlib.Path.cwd()
        self.chain = ProcessChain(plan.stack.processes, plan_dir)

    async def up(self, variant: Variant, trial: int, workdir: pathlib.Path) -> None:
        self.chain.running = []
        await asyncio.to_thread(self.chain.start, variant.name, trial, workdir,
                                lambda text: self.log(f"[{variant.name}] {text}"))  # fmt: skip
        await super().up(variant, trial, workdir)

    def crashed(self) -> list[str]:
        return self.chain.exited()

    async def audit_hits(self, workdir: pathlib.Path, since: float, until: float) -> set[str] | None:
        """`stack.audit` or the runner's proxy when the plan has them; else the `fault_hit` lines of this trial's
        processes marked `audit` (None when none is)."""
        logs = self.chain.logs(audit=True)
        if self.stack.audit is not None or self._proxy_log is not None or not logs:
            return await super().audit_hits(workdir, since, until)
        lines: list[str] = []
        for log in logs:
            with contextlib.suppress(OSError), open(log, errors="replace") as fh:
                lines += fh.readlines()
        return hit_ids(lines, since, until)

    async def emergency_stop(self, workdir: pathlib.Path, trial: int) -> str | None:
        said = await super().emergency_stop(workdir, trial)
        reached = self.chain.signal_handlers()
        mine = f"SIGUSR1 to {len(reached)} of {len(self.chain.running)} processes ({', '.join(reached)})"
        return f"{said}; {mine}" if said else mine

    async def down(self) -> None:
        try:
            await super().down()
        finally:
            await asyncio.to_thread(self.chain.stop)
