"""Locust headless as the trial's load: a subprocess from a profile in loadtests/profiles, with the drill flags.

Its users are open loop too (loadtests/openloop.py): they keep the plan's
per-user rates and send ids of the same form as the in-runner load
(`harness.core.ids.request_id`, from the `--drill-config` and `--drill-trial`
it is given), and each Locust process logs the ids it sent with the directive,
so the expected hits are known here as they are for the aio load.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import shutil
import sys
import time
import urllib.request

from harness.core.errors import RunFailed
from harness.core.faults import is_hit
from harness.drills.load.schedule import announced_start, planned_rps
from harness.drills.plan.files import locust_profile
from harness.drills.plan.sections import Fault, Phases, Traffic
from harness.procs.ports import private_loopback
from harness.procs.spawn import last_line


class LocustLoad:
    """Locust headless as a subprocess, from a profile in loadtests/profiles, with the drill flags.

    Locust runs the phases itself (`--drill-phases`); its client metrics are on
    `--drill-metrics-port`. Its users are open loop at the plan's per-user rates
    and send `PLAN-SEED-USER-N-MIX` ids; each Locust process appends the ids it sent
    with the directive to `WORKDIR/ids-PID.txt`, and the expected hits
    are those `is_hit` says are hit.
    """

    name = "locust"

    def __init__(
        self, *, plan: str, seed: int, config_label: str, traffic: Traffic, fault: Fault, phases: Phases,
        workdir: pathlib.Path, trial: int = 1,
    ) -> None:  # fmt: skip
        self.trial = trial
        self.plan, self.seed, self.config_label = plan, seed, config_label
        self.traffic, self.fault, self.phases = traffic, fault, phases
        self.workdir = workdir
        self.ids_dir = workdir  # ids-PID.txt beside the services' logs
        self.ports_dir = workdir / "locust-ports"  # each Locust process binds its own port and writes it here
        self.port = 0
        self.proc = None
        self.start_unix: float | None = None

    def metrics_endpoints(self) -> list[tuple[str | None, str]]:
        """Every Locust process's /metrics, as each announced it (one standalone, or a master and its workers)."""
        urls = []
        for path in sorted(self.ports_dir.glob("*.json")) if self.ports_dir.exists() else []:
            try:
                port = json.loads(path.read_text()).get("metrics_port")
            except (OSError, ValueError):
                continue
            if port:
                urls.append(("loadgen", f"http://127.0.0.1:{port}/metrics"))
        return urls

    async def start(self, edge: list[str]) -> None:
        from harness.procs.spawn import python_env, spawn

        tr, f, ph = self.traffic, self.fault, self.phases
        users = tr.organic_users + tr.drill_users
        argv = [
            _venv_locust() or shutil.which("locust") or "locust",
            "--config", str(locust_profile(tr.profile or "")), "--host", edge[0], "--headless",
            "-u", str(users), "-r", str(users), "-t", f"{int(ph.total + 2)}s", "--stop-timeout", "2",
            "--drill-tenant", f.tenant, "--drill-directive", f.directive, "--drill-ratio", str(f.ratio),
            "--drill-config", self.config_label, "--drill-plan", self.plan,
            "--drill-phases", f"warmup={ph.warmup:g},fault={ph.fault:g},recovery={ph.recovery:g}",
            "--drill-users", str(users), "--drill-weights", f"organic={tr.organic_users},drill={tr.drill_users}",
            "--drill-rate", f"{tr.drill_rate:g}", "--drill-organic-rate", f"{tr.organic_rate:g}",
            "--drill-timeout", f"{tr.timeout_s:g}",
            "--drill-metrics-port", "0", "--drill-ports-dir", str(self.ports_dir),
            "--drill-seed", str(self.seed), "--drill-ids-dir", str(self.ids_dir), "--drill-trial", str(self.trial),
        ]  # fmt: skip
        if tr.workers > 1:  # Locust's own distributed mode on this machine: a master and N worker processes
            # its master binds a fixed port (5557) before the forked workers connect: on an address of our own
            here = private_loopback()
            argv += ["--processes", str(tr.workers), "--master-host", here, "--master-bind-host", here]
        if f.target:
            argv += ["--drill-target", f.target]
        if f.instances is not None:
            argv += ["--drill-instances", str(f.instances)]
        # per-attempt faults reach Locust as they reach the in-runner load (through Fault.tagging)
        argv += ["--drill-fault-scope", f.scope, "--drill-fault-attempts", str(f.attempts or "")]
        # the plan decides cancels, not the profile (smoke cancels 10 % of drill calls after 1 ms)
        if tr.cancel_ms:
            argv += ["--drill-cancel-ms", f"{tr.cancel_ms:g}", "--drill-cancel-share", "100"]
        else:
            argv += ["--drill-cancel-ms", "", "--drill-cancel-share", "0"]
        env = python_env({"DRILL_FAULT_SEED": str(self.seed)})
        shutil.rmtree(self.ports_dir, ignore_errors=True)
        self.proc = spawn(argv, self.workdir / "locust.log", env)
        # Locust's phase clock starts with its /metrics (same init): wait for it, so the runner's
        # scrapes cover Locust's whole recovery phase rather than starting seconds early
        first = self.ports_dir / ("master.json" if tr.workers > 1 else "local.json")  # the one that runs the phases
        self.port = await asyncio.to_thread(_wait_announced, first, LOCUST_START_S, self.proc)
        if self.port:  # its phases start on the whole second it exports (drill_trial_phase_start_seconds)
            self.start_unix = await asyncio.to_thread(self._phase_start, LOCUST_START_S)
        if not self.port or self.start_unix is None:
            raise RunFailed(
                f"locust did not start: {last_line(self.workdir / 'locust.log')} (log: {self.workdir / 'locust.log'})"
            )

    def _phase_start(self, timeout_s: float) -> float | None:
        """The unix second Locust's timeline starts at, read from the phase times it exports."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                text = ""
            start = announced_start(text, self.config_label, self.trial)
            if start is not None:
                return start
            time.sleep(0.1)
        return None

    def exact_counts(self) -> None:
        return None  # Locust's counts are read from its processes' /metrics, like a hop's

    def edge_selector(self) -> None:
        return None

    async def wait(self, timeout_s: float) -> None:
        """Locust runs its own clock and stops its own users: nothing to wait for here."""
        return None

    def expected_hits(self) -> list[str]:
        f = self.fault
        return [r for r in read_tagged_ids(self.ids_dir) if is_hit(self.seed, r, f.directive, f.ratio)]

    def observed_hits(self) -> None:
        return None  # the answers (and their markers) stay in Locust's processes

    def message_counts(self) -> None:
        return None

    def stop_tagging(self) -> None:
        """Locust's users decide their directive in their own processes: nothing here reaches them (None)."""
        return None

    def planned_rps(self) -> dict[str, float]:
        return planned_rps(self.traffic)

    async def stop(self) -> None:
        from harness.procs.spawn import stop_processes

        if self.proc is not None:
            stop_processes([self.proc])


#: Seconds Locust may take to start (imports, gevent) before the drill fails
LOCUST_START_S = 30.0


def _wait_announced(path: pathlib.Path, timeout_s: float, proc) -> int:
    """The metrics port a Locust process announced in `path` (0 when it exited or time ran out)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            port = int(json.loads(path.read_text())["metrics_port"] or 0)
        except (OSError, ValueError, KeyError, TypeError):
            time.sleep(0.05)
            continue
        if port:  # the server answers as soon as it is announced: it was bound before the file was written
            return port
        time.sleep(0.05)
    return 0



def read_tagged_ids(directory: pathlib.Path) -> list[str]:
    """Every id the Locust processes of a run sent with the directive (`--drill-ids-dir`)."""
    ids: list[str] = []
    for path in sorted(directory.glob("ids-*.txt")):
        ids += [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return ids


def _venv_locust() -> str | None:
    cand = pathlib.Path(sys.executable).with_name("locust")
    return str(cand) if cand.exists() else None
