"""The soak's processes: gateway → ledger `drill serve`s (each under the memory probe), and /proc readings.

Topology: `drill serve` gateway (naive retries: 4 attempts on UNAVAILABLE, a fixed 1-s
per-attempt timeout, no deadline propagation) → `drill serve` ledger, both on
127.0.0.1, each run by `benchmarks/soak_probe.py` (the same `drill serve` code with a
sampler thread writing `probe-NAME.jsonl`). The soak pins both servers to one core and
its load generator to the other (os.sched_setaffinity).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import sys

from harness.procs.spawn import ServeProcess, spawn, stop_processes, wait_serving

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
PROBE = pathlib.Path(__file__).with_name("soak_probe.py")
#: `drill serve --concurrency/--queue` of both hops: at most this many calls hold a handler at once.
CONCURRENCY = 256
QUEUE = 1024


# --- /proc readings ------------------------------------------------------------------------
def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def load_average() -> list[float]:
    with open("/proc/loadavg") as fh:
        return [float(x) for x in fh.read().split()[:3]]


def pin(pid: int, cpu: int) -> bool:
    try:
        cpus = sorted(os.sched_getaffinity(0 if pid == os.getpid() else pid))
        if len(os.sched_getaffinity(0)) < 2 and pid == os.getpid():
            return False
        os.sched_setaffinity(pid, {cpu})
        return bool(cpus)
    except OSError:
        return False


def audit_hits(log: pathlib.Path) -> dict[str, list[int]]:
    """The attempts hit per request id, from the `fault_hit` audit lines of a server log."""
    out: dict[str, list[int]] = {}
    with open(log, errors="replace") as fh:
        for line in fh:
            if '"event":"fault_hit"' not in line:
                continue
            record = json.loads(line[line.index("{") :])
            out.setdefault(record["request_id"], []).append(int(record.get("attempt", 0)))
    return out


# --- the topology --------------------------------------------------------------------------
@dataclasses.dataclass
class Topology:
    gateway: ServeProcess
    ledger: ServeProcess
    workdir: pathlib.Path

    @property
    def servers(self) -> list[ServeProcess]:
        return [self.gateway, self.ledger]

    def probe_path(self, name: str) -> pathlib.Path:
        return self.workdir / f"probe-{name}.jsonl"

    def probe(self, name: str) -> list[dict]:
        """The probe's lines so far for server `name`."""
        path = self.probe_path(name)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def trim(self) -> None:
        """Ask every server's probe for a sample, glibc's malloc_trim(0), and a sample (SIGUSR2)."""
        for s in self.servers:
            os.kill(s.proc.pid, signal.SIGUSR2)

    def stop(self) -> None:
        stop_processes([s.proc for s in self.servers])


def _spawn_probed(
    name: str, args: list[str], workdir: pathlib.Path, env: dict[str, str], interval_s: float, frames: int
) -> ServeProcess:
    ready = workdir / f"{name}.ready.json"
    ready.unlink(missing_ok=True)
    probe_out = workdir / f"probe-{name}.jsonl"
    probe_out.unlink(missing_ok=True)
    argv = [sys.executable, str(PROBE), "--probe-out", str(probe_out), "--interval", str(interval_s),
            "--tracemalloc", str(frames), "--", "serve", *args, "--ready-file", str(ready)]  # fmt: skip
    log_path = workdir / f"{name}.log"
    from harness.procs.spawn import python_env

    return ServeProcess(name, spawn(argv, log_path, python_env(env)), ready, log_path)


def start_topology(
    workdir: pathlib.Path,
    seed: int,
    tenant: str,
    *,
    interval_s: float = 30.0,
    frames: int = 0,
    env_extra: dict[str, str] | None = None,
) -> Topology:
    """Ledger, then the gateway calling it with the naive configuration; each under the probe.

    `frames` > 0 runs tracemalloc in both servers (the diagnostic run); `env_extra` goes into both
    servers' environment (e.g. `MALLOC_ARENA_MAX=2`, a control)."""
    env = {"DRILL_FAULT_TENANTS": tenant, **(env_extra or {})}
    common = ["--port", "0", "--metrics-port", "-1", "--enable-faults", "--seed", str(seed)]
    common += ["--concurrency", str(CONCURRENCY), "--queue", str(QUEUE)]
    ledger = _spawn_probed(
        "ledger", [*common, "--service", "ledger", "--instance-id", "ledger-0"], workdir, env, interval_s, frames
    )
    try:
        wait_serving([ledger])
        gateway = _spawn_probed(
            "gateway",
            [*common, "--service", "gateway", "--instance-id", "gateway-0", "--downstream", ledger.address,
             "--config", "naive"],
            workdir, env, interval_s, frames,
        )  # fmt: skip
        try:
            wait_serving([gateway])
        except BaseException:
            gateway.stop()
            raise
    except BaseException:
        ledger.stop()
        raise
    return Topology(gateway, ledger, workdir)
