"""Prometheus as a drill data source: a local Prometheus watching a run, and reading a drill back.

`LocalPrometheus` starts the `prometheus` on PATH (1-s scrapes, a fresh TSDB
under OUT/prometheus, file-based service discovery the runner rewrites for each
configuration). Its first sample comes ~5 s after start, so it is started
before the first topology.

`read_drill` asks any Prometheus (`/api/v1/query_range`, step 1 s) for the same
aggregates the runner's scraper keeps and returns one `RunSeries` per
resilience configuration (the `config` label of the edge client's calls). The
fault window comes from `drill_fault_active`, or is given.
"""

from __future__ import annotations

import json
import math
import pathlib
import shutil
import time
import urllib.parse
import urllib.request

from harness.drills.series import RunSeries, build_series
from harness.procs.ports import free_port

#: The edge client's `service` label: the in-runner load ("loadgen") or Locust ("locust").
EDGE_SERVICES = "loadgen|locust"


class PrometheusError(RuntimeError):
    pass


class LocalPrometheus:
    """A throwaway Prometheus on 127.0.0.1 scraping the drill's endpoints every second."""

    def __init__(self, workdir: pathlib.Path, binary: str = "prometheus") -> None:
        from harness.drills.topology import spawn

        self.workdir = workdir
        if workdir.exists():
            shutil.rmtree(workdir)  # wipe the TSDB between runs
        workdir.mkdir(parents=True)
        self.targets = workdir / "targets.json"
        self.targets.write_text("[]")
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "drill",
                    "honor_labels": True,
                    "file_sd_configs": [{"files": [str(self.targets)], "refresh_interval": "1s"}],
                }
            ],
        }
        (workdir / "prometheus.yml").write_text(json.dumps(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [
            binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1d",
        ]  # fmt: skip
        self.proc = spawn(argv, workdir / "prometheus.log")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PrometheusError(f"prometheus exited: see {workdir / 'prometheus.log'}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise PrometheusError("prometheus not ready after 20 s")

    @classmethod
    def start_if_available(cls, workdir: pathlib.Path) -> LocalPrometheus | None:
        return cls(workdir) if shutil.which("prometheus") else None

    def set_targets(self, endpoints: list[tuple[str | None, str]]) -> None:
        write_targets(self.targets, endpoints)

    def wait_first_sample(self, timeout_s: float = 20.0) -> bool:
        """Block until Prometheus has scraped something (its first scrape comes ~5 s after start)."""
        deadline = time.monotonic() + timeout_s
        qs = urllib.parse.urlencode({"query": "up"})
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/api/v1/query?{qs}", timeout=2) as r:
                    if json.loads(r.read())["data"]["result"]:
                        return True
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.25)
        return False

    def stop(self) -> None:
        from harness.drills.topology import stop_processes

        stop_processes([self.proc])


def write_targets(path: pathlib.Path, endpoints: list[tuple[str | None, str]]) -> None:
    """A Prometheus file_sd targets file for the run's endpoints (atomically replaced)."""
    groups = []
    for service, url in endpoints:
        u = urllib.parse.urlsplit(url)
        labels = {"service": service or "loadgen", "__metrics_path__": u.path or "/metrics"}
        groups.append({"targets": [u.netloc], "labels": labels})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups))
    tmp.replace(path)


class ExternalPrometheus:
    """A Prometheus given by URL: the runner writes its targets to `sd_file` (file_sd) if given,
    and reads the run back from it at the end, as `LocalPrometheus` does."""

    def __init__(self, url: str, sd_file: pathlib.Path | None = None) -> None:
        self.url = url.rstrip("/")
        self.sd_file = sd_file

    def set_targets(self, endpoints: list[tuple[str | None, str]]) -> None:
        if self.sd_file is not None:
            write_targets(self.sd_file, endpoints)

    def stop(self) -> None:
        pass


# --- reading a drill back ---------------------------------------------------------------------
def query_range(url: str, expr: str, start: float, end: float, step: float = 1.0) -> list[dict]:
    qs = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query_range?{qs}", timeout=30) as r:
            body = json.loads(r.read())
    except OSError as exc:
        raise PrometheusError(f"{url}: {exc}") from exc
    if body.get("status") != "success":
        raise PrometheusError(f"{expr}: {body.get('error', body)}")
    return body["data"]["result"]


def _queries(edge: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(key prefix, PromQL, label names forming the key) for every snapshot key of series.py."""
    c = f'service=~"{edge}"'
    return [
        ("calls", f"sum by (config, traffic, grpc_status, fault_mode) (drill_client_calls_total{{{c}}})",
         ("traffic", "grpc_status", "fault_mode")),
        ("lat", f"sum by (config, traffic, fault_mode, le) (drill_client_latency_seconds_bucket{{{c}}})",
         ("traffic", "fault_mode", "le")),
        ("srv", "sum by (service) (drill_server_calls_total)", ("service",)),
        ("shed", "sum by (service) (drill_server_shed_total)", ("service",)),
        ("gap", "sum by (service) (drill_deadline_gap_seconds_count)", ("service",)),
        ("gapsum", "sum by (service) (drill_deadline_gap_seconds_sum)", ("service",)),
        ("hits", "sum by (service) (drill_fault_hits_total)", ("service",)),
        ("retry", "sum by (service) (drill_retry_attempts_total)", ("service",)),
        ("fds", "sum by (service) (process_open_fds)", ("service",)),
        ("breaker", "max by (service) (drill_breaker_state)", ("service",)),
        ("tcp", "sum by (state) (drill_tcp_connections)", ("state",)),
    ]  # fmt: skip


def read_drill(
    url: str,
    start: float,
    end: float,
    *,
    edge: str = EDGE_SERVICES,
    fault: tuple[float, float] | None = None,
    faults: dict[str, tuple[float, float]] | None = None,
) -> dict[str, RunSeries]:
    """One RunSeries per `config` label seen on the edge client's calls between start and end.

    The fault window (unix seconds) is `faults[config]`, else `fault`, else where
    `drill_fault_active` is 1 in that configuration's run.
    """
    grid: dict[float, dict[str, float]] = {}
    per_config: dict[str, dict[float, dict[str, float]]] = {}
    for prefix, expr, labels in _queries(edge):
        for res in query_range(url, expr, start, end):
            metric = res["metric"]
            key_prefix = "srv" if prefix == "shed" else prefix
            key = "|".join([key_prefix, *(metric.get(lb, "none" if lb == "fault_mode" else "") for lb in labels)])
            target = per_config.setdefault(metric["config"], {}) if "config" in metric else grid
            for ts, value in res["values"]:
                v = float(value)
                if math.isnan(v):
                    continue
                snap = target.setdefault(float(ts), {})
                snap[key] = snap.get(key, 0.0) + v
    active = query_range(url, "max(drill_fault_active)", start, end)
    active_points = [(float(ts), float(v)) for ts, v in active[0]["values"]] if active else []
    out: dict[str, RunSeries] = {}
    for config, client in per_config.items():
        times = sorted(client)
        # this configuration's run: where its client counters move (configs run one after another)
        moving = [t for i, t in enumerate(times[1:], 1) if client[t] != client[times[i - 1]]]
        if not moving:
            continue
        t0, t1 = max(start, moving[0] - 2), min(end, moving[-1] + 1)
        samples = []
        for t in times:
            if t0 <= t <= t1:
                samples.append((t - t0, {**grid.get(t, {}), **client[t]}))
        if faults and config in faults:
            on, off = faults[config]
        elif fault is not None:
            on, off = fault
        else:
            on_points = [t for t, v in active_points if v >= 1 and t0 <= t <= t1]
            if not on_points:
                raise PrometheusError(
                    f"config {config}: no drill_fault_active in range; pass --fault-start/--fault-end"
                )
            on, off = on_points[0], on_points[-1] + 1
        out[config] = build_series(config, samples, on - t0, off - t0, baseline_on_first=True)
    if not out:
        raise PrometheusError(f"no edge client calls (service=~{edge!r}) between {start} and {end}")
    return out
