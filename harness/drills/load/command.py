"""A load the stack file starts for every trial with a command (`stack.load`), e.g. a Locust master.

It runs elsewhere (a shell command here, compose, a cluster) and says when its
trial starts by exporting the phase times (`schedule.announced_start`), read from
its /metrics or from the stack's Prometheus.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import time
import urllib.request

from harness.core import metrics as m
from harness.core.environ import environ_now
from harness.core.errors import RunFailed
from harness.drills.load.schedule import announced_start, planned_rps
from harness.drills.plan.sections import Fault, Phases, Traffic
from harness.procs.spawn import kill_group, last_line


class CommandLoad:
    """A load the stack file starts for every trial with a command (`stack.load`): typically a Locust master.

    The trial travels in the environment as the `LOCUST_DRILL_*` variables Locust reads for each
    `--drill-*` option, so the same profile runs here, in compose or in a cluster; so does the stack's
    edge (method, JSON request, type source), so the Locust user calls the stack's method without the
    stack file repeating it. The trial starts
    when the load says so: its timeline exports the phase times (`drill_trial_phase_start_seconds`),
    read from its /metrics or from the stack's Prometheus. Its client counters are scraped each second
    (`metrics`) or read from Prometheus after the trial (`selector`). Which ids it tagged stays in its
    own processes, so the expected hits are not known here (the services' audit lines still are).
    """

    name = "external"

    def __init__(
        self, *, plan: str, seed: int, config_label: str, traffic: Traffic, fault: Fault, phases: Phases,
        spec, prometheus: str | None, workdir: pathlib.Path, trial: int = 1, edge=None,
    ) -> None:  # fmt: skip
        self.plan, self.seed, self.config_label, self.trial = plan, seed, config_label, trial
        self.traffic, self.fault, self.phases = traffic, fault, phases
        self.spec, self.prometheus, self.workdir = spec, prometheus, workdir
        #: the stack's edge (`stack.edge`): its method and request reach the load as the Locust user's options
        self.edge = edge
        self.proc: asyncio.subprocess.Process | None = None
        self.start_unix: float | None = None

    def environment(self) -> dict[str, str]:
        """What Locust reads for this trial (each `--drill-*` option's variable)."""
        tr, f, ph = self.traffic, self.fault, self.phases
        values = {
            "PLAN": self.plan, "CONFIG": self.config_label, "TRIAL": str(self.trial), "SEED": str(self.seed),
            "PHASES": f"warmup={ph.warmup:g},fault={ph.fault:g},recovery={ph.recovery:g}",
            "USERS": str(tr.organic_users + tr.drill_users),
            "WEIGHTS": f"organic={tr.organic_users},drill={tr.drill_users}",
            "RATE": f"{tr.drill_rate:g}", "ORGANIC_RATE": f"{tr.organic_rate:g}", "TIMEOUT": f"{tr.timeout_s:g}",
            "TENANT": f.tenant, "DIRECTIVE": f.directive, "RATIO": str(f.ratio), "TARGET": f.target or "",
            "INSTANCES": "" if f.instances is None else str(f.instances), "FAULT_SCOPE": f.scope,
            "FAULT_ATTEMPTS": str(f.attempts or ""), "CANCEL_MS": f"{tr.cancel_ms:g}" if tr.cancel_ms else "",
            "CANCEL_SHARE": "100" if tr.cancel_ms else "0",
        }  # fmt: skip
        if self.edge is not None:  # what to call: the Locust user for any service reads these (loadtests/)
            e = self.edge
            rate = getattr(e, "message_rate", None)
            values.update({
                "METHOD": e.method, "REQUEST": json.dumps(e.request), "PROTO": e.proto or "",
                "DESCRIPTOR_SET": e.descriptor_set or "", "PROTO_PATH": os.pathsep.join(e.proto_path),
                "MESSAGE_RATE": f"{rate:g}" if rate else "",
            })  # fmt: skip
        env = {f"LOCUST_DRILL_{k}": v for k, v in values.items()}
        return {**environ_now(), **env, "DRILL_CONFIG": self.config_label, "DRILL_TRIAL": str(self.trial)}

    def metrics_endpoints(self) -> list[tuple[str | None, str]]:
        return [("loadgen", url) for url in self.spec.metrics]

    async def start(self, edge: list[str]) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / "load.log"
        with open(log, "ab") as out:
            self.proc = await asyncio.create_subprocess_shell(
                self.spec.command, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
                env=self.environment(), start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + self.spec.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.returncode not in (None, 0):
                raise RunFailed(f"load command failed (exit {self.proc.returncode}): {last_line(log)} (log: {log})")
            self.start_unix = await asyncio.to_thread(self._phase_start)
            if self.start_unix is not None:
                return
            await asyncio.sleep(0.5)
        raise RunFailed(f"the load exported no phase times for {self.config_label} trial {self.trial} within "
                        f"{self.spec.start_timeout_s:g} s: {last_line(log)} (log: {log})")  # fmt: skip

    def _phase_start(self) -> float | None:
        if self.spec.selector:
            from harness.drills.readings.prom import PrometheusError, latest

            want = {"phase": "warmup", "trial": str(self.trial), "config": self.config_label}
            matchers = ", ".join(f'{k}="{v}"' for k, v in want.items())
            name = m.sample_name(m.TRIAL_PHASE_START)
            try:
                return latest(self.prometheus, f"{name}{self.spec.selector[:-1].rstrip(', ')}, {matchers}}}")
            except PrometheusError:
                return None
        for url in self.spec.metrics:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                continue
            start = announced_start(text, self.config_label, self.trial)
            if start is not None:
                return start
        return None

    def exact_counts(self) -> None:
        return None  # its counts are read from its /metrics, or from the stack's Prometheus

    def edge_selector(self) -> str | None:
        """`stack.load.selector`: its calls are read from the stack's Prometheus after the trial."""
        return self.spec.selector or None

    async def wait(self, timeout_s: float) -> None:
        """The command's load ends on its own clock: nothing to wait for here."""
        return None

    def expected_hits(self) -> list[str] | None:
        return None  # the ids it tagged stay in its own processes

    def observed_hits(self) -> None:
        return None

    def message_counts(self) -> None:
        return None

    def stop_tagging(self) -> None:
        """The load's own processes decide its directive: nothing here reaches them (None)."""
        return None

    def planned_rps(self) -> dict[str, float]:
        return planned_rps(self.traffic)

    async def stop(self) -> None:
        if self.spec.stop:
            done = await asyncio.create_subprocess_shell(
                self.spec.stop, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL, env=self.environment(), start_new_session=True,
            )  # fmt: skip
            try:
                await asyncio.wait_for(done.wait(), 60)
            except (TimeoutError, asyncio.TimeoutError):
                kill_group(done.pid)
        if self.proc is not None and self.proc.returncode is None:
            kill_group(self.proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except (TimeoutError, asyncio.TimeoutError):
                kill_group(self.proc.pid)
