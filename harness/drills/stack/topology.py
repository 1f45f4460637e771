"""The drill topology: the chain `hops[0] → hops[1] → …`, one `drill serve` process per replica.

Processes are started with `harness.procs.spawn` (own process group, parent-death
signal, atexit sweep), so a killed runner leaves nothing behind. Every replica
binds port 0 itself and writes what it got to its ready file; a hop finds its
downstream replicas through their ready files (`--downstream @FILE`), so the
whole chain starts at once and no port is ever chosen for someone else to bind
(harness.procs.ports).
"""

from __future__ import annotations

import pathlib

from harness.core.audit import hit_ids
from harness.core.errors import RunFailed
from harness.core.headers import DEFAULT_DRILL_TENANT
from harness.drills.plan.sections import HopSpec
from harness.procs.spawn import ServeError, ServeProcess, spawn_serve, stop_processes, wait_serving


class TopologyError(RunFailed):
    pass


class Topology:
    """Starts, watches and stops the chain for one configuration."""

    def __init__(
        self,
        hops: tuple[HopSpec, ...],
        *,
        config: str | None,
        seed: int,
        workdir: pathlib.Path,
        tenants: str = DEFAULT_DRILL_TENANT,
        timeout_s: float | None = None,
    ) -> None:
        if not hops:
            raise ValueError("a topology needs at least one hop")
        self.hops = hops
        self.config = config
        self.seed = seed
        self.workdir = workdir
        self.tenants = tenants
        self.timeout_s = timeout_s
        self.replicas: dict[str, list[ServeProcess]] = {}
        #: (hop, replica index) → the ready file of the link in front of it (its callers dial the link)
        self.link_files: dict[tuple[str, int], pathlib.Path] = {}

    def start(self, ready_timeout_s: float = 30.0) -> None:
        """Start every replica at once (each binds its own ports), then wait until all serve."""
        self.spawn()
        self.wait(ready_timeout_s)

    def spawn(self) -> None:
        """Start every replica at once; a hop finds the one below through its ready file, or its link's."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            for depth in range(len(self.hops) - 1, -1, -1):
                hop = self.hops[depth]
                below = self.hops[depth + 1].name if depth + 1 < len(self.hops) else None
                downstream = [f"@{self.link_files.get((below, i), r.ready_file)}"
                              for i, r in enumerate(self.replicas.get(below, []))]  # fmt: skip
                self.replicas[hop.name] = [self._spawn(hop, i, downstream) for i in range(hop.replicas)]
        except BaseException:
            self.stop()
            raise

    def wait(self, ready_timeout_s: float = 30.0) -> None:
        """Wait until every replica serves (stopping them all if one does not)."""
        try:
            wait_serving([r for rs in self.replicas.values() for r in rs], ready_timeout_s)
        except ServeError as exc:
            self.stop()
            raise TopologyError(str(exc)) from None
        except BaseException:
            self.stop()
            raise

    def _spawn(self, hop: HopSpec, index: int, downstream: list[str]) -> ServeProcess:
        args = [
            "--port", "0", "--metrics-port", "-1",
            "--service", hop.name, "--instance-id", f"{hop.name}-{index}",
            "--work-ms", str(hop.work_ms), "--concurrency", str(hop.concurrency), "--queue", str(hop.queue),
            "--shed-code", hop.shed_code, "--enable-faults", "--seed", str(self.seed),
        ]  # fmt: skip
        if hop.admission:
            args.append("--admission")
            if hop.orphan_work:
                args.append("--orphan-work")
        if hop.keepalive_ms:
            args += ["--keepalive-ms", str(hop.keepalive_ms)]
        if hop.max_idle_ms:
            args += ["--max-idle-ms", str(hop.max_idle_ms)]
        if self.config:  # every hop, the leaf too: its server permits its callers' keepalive (serverPermit)
            args += ["--config", self.config]
        if downstream:
            args += ["--downstream", ",".join(downstream)]
            if not self.config and self.timeout_s:
                args += ["--downstream-timeout", str(self.timeout_s)]
        return spawn_serve(f"{hop.name}-{index}", args, self.workdir, {"DRILL_FAULT_TENANTS": self.tenants})

    def stop(self) -> None:
        stop_processes([r.proc for rs in self.replicas.values() for r in rs])

    # -- views -----------------------------------------------------------------------------
    @property
    def edge(self) -> list[str]:
        return [r.address for r in self.replicas.get(self.hops[0].name, [])]

    def endpoints(self) -> list[tuple[str, str]]:
        """(service, metrics URL) of every replica."""
        return [(hop, r.metrics_url) for hop, rs in self.replicas.items() for r in rs]

    def crashed(self) -> list[str]:
        """Replicas that exited: `NAME (exit CODE)`."""
        everyone = [r for rs in self.replicas.values() for r in rs]
        return [f"{r.name} (exit {r.proc.returncode})" for r in everyone if r.proc.poll() is not None]


def audit_hit_ids(workdir: pathlib.Path) -> set[str]:
    """Request ids of every `fault_hit` audit line in the topology's logs."""
    ids: set[str] = set()
    for log in workdir.glob("*.log"):
        with open(log, errors="replace") as fh:
            ids |= hit_ids(fh)
    return ids
