"""Process helpers for the Locust profile tests: `drill serve` and `locust` as subprocesses.

Nothing here imports locust or gevent: every Locust run is a headless subprocess
in its own process group (killed on exit, even on failure), talking to a `drill
serve` subprocess on 127.0.0.1. Every process binds its own ports and announces
them (`--drill-metrics-port 0 --drill-ports-dir DIR`: `local`, `master`,
`worker-N`); client-side metrics are scraped from the announced ports while the
run lasts, by role. Locust's own stats come from `--csv`.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.procs import spawn
from harness.procs.spawn import ServeProcess, start_serve
from tests.conftest import ROOT

VENV_BIN = pathlib.Path(sys.executable).parent
LOCUST = str(VENV_BIN / "locust")
PROFILES = ROOT / "loadtests" / "profiles"


def kill_group(proc: subprocess.Popen) -> None:
    """Stop a process group we created: SIGINT, then SIGKILL after a grace period. The whole group, even when
    its leader has exited: a `--processes` master that failed at start leaves its forked workers behind."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    spawn.kill_group(proc.pid, signal.SIGKILL)
    proc.wait(timeout=5)


def announced(ports_dir: pathlib.Path) -> dict[str, dict]:
    """What each Locust process wrote to `--drill-ports-dir`: {role[-index]: {metrics_port, master_port, …}}."""
    out = {}
    for path in sorted(ports_dir.glob("*.json")) if ports_dir.exists() else []:
        try:
            out[path.stem] = json.loads(path.read_text())
        except ValueError:
            continue  # written atomically; a partial read cannot happen, a stray file is skipped
    return out


def wait_announced(ports_dir: pathlib.Path, name: str, proc: subprocess.Popen, timeout: float = 30.0) -> dict:
    """Block until the process `name` (e.g. master) announced its ports; fail if its Locust exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = announced(ports_dir).get(name)
        if got:
            return got
        if proc.poll() is not None:
            raise AssertionError(f"locust exited with {proc.returncode} before announcing {name}")
        time.sleep(0.05)
    raise TimeoutError(f"{name} announced no ports in {ports_dir} after {timeout}s")


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One /metrics scrape as {(sample name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(samples: dict, name: str, **labels: str) -> float:
    """Sum of samples named `name` whose labels include `labels`."""
    return sum(
        v for (n, lab), v in samples.items() if n == name and all(dict(lab).get(k) == x for k, x in labels.items())
    )


@dataclasses.dataclass
class DrillServer:
    serve: ServeProcess

    @property
    def port(self) -> int:
        return self.serve.port

    @property
    def metrics_port(self) -> int:
        return self.serve.metrics_port

    @property
    def host(self) -> str:
        return self.serve.address

    def metrics(self) -> dict:
        return scrape(self.metrics_port)


@pytest.fixture
def drill_server(tmp_path):
    """A `drill serve` subprocess with the fault switch on (seed 7), via harness.procs."""
    args = ["--port", "0", "--metrics-port", "-1", "--enable-faults", "--seed", "7", "--service", "demo"]
    server = start_serve("demo", args, tmp_path)
    try:
        yield DrillServer(server)
    finally:
        server.stop()


class Scraper(threading.Thread):
    """Scrapes every port announced in `ports_dir` every `interval` s while a run lasts, by process name
    (`local`, `master`, `worker-0`, …); keeps each one's history and last good scrape."""

    def __init__(self, ports_dir: pathlib.Path, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.ports_dir = ports_dir
        self.interval = interval
        self.last: dict[str, dict] = {}
        self.history: dict[str, list[dict]] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            for name, info in announced(self.ports_dir).items():
                if not info.get("metrics_port"):
                    continue
                try:
                    snap = scrape(int(info["metrics_port"]))
                except OSError:
                    continue
                self.last[name] = snap
                self.history.setdefault(name, []).append(snap)
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)


@dataclasses.dataclass
class LocustRun:
    rc: int
    log: str
    stats: list[dict[str, str]]
    failures: list[dict[str, str]]
    scraped: dict[str, dict]
    history: dict[str, list[dict]]

    def row(self, request_type: str, name: str) -> dict[str, str] | None:
        return next((r for r in self.stats if r["Type"] == request_type and r["Name"] == name), None)

    def median_ms(self, name: str, request_type: str = "grpc") -> float:
        row = self.row(request_type, name)
        assert row is not None, f"no {request_type} {name} row in Locust stats: {self.stats}"
        return float(row["50%"])


def _read_csv(path: pathlib.Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


class LocustProcess:
    """One headless `locust` subprocess in its own process group, with an optional scraper."""

    def __init__(
        self,
        tmp_path: pathlib.Path,
        host: str,
        *args: str,
        profile: str | None = "smoke",
        metrics: bool = False,
        tag: str = "run",
    ) -> None:
        """`metrics=True`: every process serves /metrics on a port it binds and announces in `ports_dir`,
        and a scraper follows them while the run lasts."""
        self.prefix = tmp_path / tag
        self.ports_dir = tmp_path / f"{tag}-ports"
        cmd = [LOCUST]
        if profile:
            cmd += ["--config", str(PROFILES / f"{profile}.conf")]
        cmd += ["--host", host, "--headless", "--csv", str(self.prefix), "--exit-code-on-error", "0", *args]
        if metrics:
            cmd += ["--drill-metrics-port", "0", "--drill-ports-dir", str(self.ports_dir)]
        self.log_path = tmp_path / f"{tag}.log"
        self._log = open(self.log_path, "w")
        self.scraper = Scraper(self.ports_dir) if metrics else None
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        if self.scraper:
            self.scraper.start()

    def kill(self) -> None:
        kill_group(self.proc)
        if self.scraper:
            self.scraper.stop()
        self._log.close()

    def finish(self, timeout: float) -> LocustRun:
        """Wait for the run to end (bounded), always kill the group, then collect the results."""
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            self.kill()
        return LocustRun(
            rc=rc,
            log=self.log_path.read_text(),
            stats=_read_csv(pathlib.Path(f"{self.prefix}_stats.csv")),
            failures=_read_csv(pathlib.Path(f"{self.prefix}_failures.csv")),
            scraped=self.scraper.last if self.scraper else {},
            history=self.scraper.history if self.scraper else {},
        )


def run_locust(tmp_path: pathlib.Path, host: str, *args: str, timeout: float = 60.0, **kw) -> LocustRun:
    """Run `locust` headless to completion (bounded by `timeout`), scraping its processes meanwhile."""
    proc = LocustProcess(tmp_path, host, *args, **kw)
    return proc.finish(timeout)


def run_concurrently(tmp_path: pathlib.Path, host: str, runs: dict[str, tuple[str, ...]], timeout: float = 60.0):
    """Start several runs at once (same machine noise for all), wait for all; {tag: LocustRun}."""
    procs: dict[str, LocustProcess] = {}
    try:
        for tag, args in runs.items():
            procs[tag] = LocustProcess(tmp_path, host, *args, tag=tag)
        deadline = time.monotonic() + timeout
        return {tag: p.finish(max(1.0, deadline - time.monotonic())) for tag, p in procs.items()}
    finally:
        for p in procs.values():
            if p.proc.poll() is None:
                p.kill()


#: Tracebacks from Locust itself, not from our code: with `--processes`, Locust's CSV writer
#: greenlet can outlive its file during shutdown ("I/O operation on closed file").
LOCUST_SHUTDOWN_RACES = (("in stats_writer", "I/O operation on closed file"),)


def unexpected_tracebacks(log: str) -> list[str]:
    """Tracebacks in a Locust log other than Locust's own known shutdown races."""
    blocks = log.split("Traceback (most recent call last):")[1:]
    return [b[:1500] for b in blocks if not any(all(k in b[:2000] for k in race) for race in LOCUST_SHUTDOWN_RACES)]
