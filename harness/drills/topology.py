"""The demo topology's process supervisor: one `drill serve` process per replica per hop.

Hops are started deepest first (ledger, then account, ...) so each upstream
replica is given its downstream addresses. Every child runs in its own process
group and session, asks the kernel to SIGTERM it if the runner dies
(PR_SET_PDEATHSIG, Linux), and is stopped SIGTERM-then-SIGKILL by group. All
children of all supervisors are also registered for an atexit sweep, so an
error, Ctrl-C or SIGTERM in the runner leaves no process and no bound port.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from harness.procs.ports import free_port

#: every live child's process group, for the atexit sweep
_LIVE: dict[int, subprocess.Popen] = {}

PR_SET_PDEATHSIG = 1


def _child_setup() -> None:  # runs in the child between fork and exec
    os.setsid()
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() == 1:  # parent already gone
            os._exit(1)
    except Exception:  # noqa: BLE001 - not Linux: the atexit sweep still applies
        pass


def spawn(argv: list[str], log_path: pathlib.Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a child in its own process group with PDEATHSIG; registered for the sweep."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")  # noqa: SIM115 - owned by the child's lifetime
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_child_setup,  # noqa: PLW1509 - setsid + pdeathsig, nothing else
            close_fds=True,
        )
    finally:
        log.close()
    _LIVE[proc.pid] = proc
    return proc


def stop_processes(procs: list[subprocess.Popen], grace_s: float = 3.0) -> None:
    """SIGTERM each process group, wait up to `grace_s`, then SIGKILL what is left. Never raises."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.01, deadline - time.monotonic()))
    for p in procs:
        # the group may hold grandchildren even when the leader is gone
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=2.0)
        _LIVE.pop(p.pid, None)


@atexit.register
def _sweep() -> None:
    stop_processes(list(_LIVE.values()), grace_s=1.0)


def python_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child Python that can import `harness` from this checkout."""
    env = dict(os.environ)
    root = str(pathlib.Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra or {})
    return env


@dataclasses.dataclass
class HopSpec:
    """One hop of the chain: its replicas and their bounded capacity."""

    name: str
    replicas: int = 1
    work_ms: float = 5.0
    concurrency: int = 16
    queue: int = 64
    shed_code: str = "RESOURCE_EXHAUSTED"
    #: every attempt pays capacity, even one the fault aborts (see harness.demo.service)
    admission: bool = True
    #: admitted work goes on after the caller is gone (see harness.demo.service)
    orphan_work: bool = False
    keepalive_ms: int | None = None
    max_idle_ms: int | None = None

    @classmethod
    def from_dict(cls, data: dict) -> HopSpec:
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - fields
        if unknown:
            raise ValueError(f"unknown hop keys: {sorted(unknown)}")
        return cls(**data)


@dataclasses.dataclass
class Replica:
    hop: str
    index: int
    proc: subprocess.Popen
    port: int = 0
    metrics_port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"


class TopologyError(RuntimeError):
    pass


class Topology:
    """Starts, watches and stops the chain `hops[0] → hops[1] → …` for one configuration."""

    def __init__(
        self,
        hops: list[HopSpec],
        *,
        config: str | None,
        seed: int,
        workdir: pathlib.Path,
        tenants: str = "tenant-drill",
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
        self.replicas: dict[str, list[Replica]] = {}

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, ready_timeout_s: float = 30.0) -> None:
        """Start every replica at once (ports chosen up front), then wait until all serve."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            ports = {h.name: [free_port() for _ in range(h.replicas)] for h in self.hops}
            for depth in range(len(self.hops) - 1, -1, -1):
                hop = self.hops[depth]
                nxt = self.hops[depth + 1].name if depth + 1 < len(self.hops) else None
                downstream = [f"127.0.0.1:{p}" for p in ports[nxt]] if nxt else []
                self.replicas[hop.name] = [
                    self._spawn(hop, i, downstream, ports[hop.name][i]) for i in range(hop.replicas)
                ]
            self._wait_ready([r for rs in self.replicas.values() for r in rs], ready_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, hop: HopSpec, index: int, downstream: list[str], port: int = 0) -> Replica:
        ready = self.workdir / f"{hop.name}-{index}.ready.json"
        ready.unlink(missing_ok=True)
        argv = [
            sys.executable, "-m", "harness.cli", "serve",
            "--port", str(port), "--metrics-port", "-1", "--ready-file", str(ready),
            "--service", hop.name, "--instance-id", f"{hop.name}-{index}",
            "--work-ms", str(hop.work_ms), "--concurrency", str(hop.concurrency), "--queue", str(hop.queue),
            "--shed-code", hop.shed_code, "--enable-faults", "--seed", str(self.seed),
        ]  # fmt: skip
        if hop.admission:
            argv.append("--admission")
            if hop.orphan_work:
                argv.append("--orphan-work")
        if hop.keepalive_ms:
            argv += ["--keepalive-ms", str(hop.keepalive_ms)]
        if hop.max_idle_ms:
            argv += ["--max-idle-ms", str(hop.max_idle_ms)]
        if downstream:
            argv += ["--downstream", ",".join(downstream)]
            if self.config:
                argv += ["--config", self.config]
            elif self.timeout_s:
                argv += ["--downstream-timeout", str(self.timeout_s)]
        env = python_env({"DRILL_FAULT_TENANTS": self.tenants})
        proc = spawn(argv, self.workdir / f"{hop.name}-{index}.log", env)
        return Replica(hop.name, index, proc)

    def _wait_ready(self, replicas: list[Replica], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for r in replicas:
            ready = self.workdir / f"{r.hop}-{r.index}.ready.json"
            while True:
                if r.proc.poll() is not None:
                    tail = self.log_tail(r)
                    raise TopologyError(f"{r.hop}-{r.index} exited with {r.proc.returncode} at start:\n{tail}")
                if ready.exists():
                    info = json.loads(ready.read_text())
                    r.port, r.metrics_port = int(info["port"]), int(info["metrics_port"])
                    break
                if time.monotonic() > deadline:
                    raise TopologyError(f"{r.hop}-{r.index} not ready after {timeout_s:.0f} s")
                time.sleep(0.05)

    def stop(self) -> None:
        stop_processes([r.proc for rs in self.replicas.values() for r in rs])

    def __enter__(self) -> Topology:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- views -----------------------------------------------------------------------------
    @property
    def hop_names(self) -> list[str]:
        return [h.name for h in self.hops]

    @property
    def edge(self) -> list[str]:
        return [r.address for r in self.replicas.get(self.hops[0].name, [])]

    def endpoints(self) -> list[tuple[str, str]]:
        """(service, metrics URL) of every replica."""
        return [(r.hop, r.metrics_url) for rs in self.replicas.values() for r in rs]

    def pids(self) -> list[int]:
        return [r.proc.pid for rs in self.replicas.values() for r in rs]

    def ports(self) -> list[int]:
        return [p for rs in self.replicas.values() for r in rs for p in (r.port, r.metrics_port) if p]

    def crashed(self) -> list[str]:
        return [
            f"{r.hop}-{r.index} (exit {r.proc.returncode})"
            for rs in self.replicas.values()
            for r in rs
            if r.proc.poll() is not None
        ]

    def log_tail(self, r: Replica, lines: int = 15) -> str:
        path = self.workdir / f"{r.hop}-{r.index}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
