"""A real Prometheus for tests: started on a free 127.0.0.1 port with a temp TSDB, stopped by PID.

Reusable by any test that needs PromQL evaluated for real (Debian's
`prometheus` package; `scripts/system-deps` installs it):

    with PromServer({"topology": ["127.0.0.1:9464"]}, rule_files=[...]) as prom:
        prom.wait_for_up(1)
        prom.query('sum(rate(drill_client_calls_total[30s]))')

or through the `prometheus_server` fixture in this package's conftest. Never
relies on a system service: each instance has its own config, data dir and port.
Prometheus 2.x takes ~5 s after start before its first scrape, even at 1 s.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

PROMETHEUS = os.environ.get("DRILL_PROMETHEUS_BIN", "prometheus")
PROMTOOL = os.environ.get("DRILL_PROMTOOL_BIN", "promtool")


class PrometheusError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_config(
    targets: Mapping[str, Sequence[str]],
    *,
    rule_files: Iterable[str | os.PathLike[str]] = (),
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
) -> dict[str, Any]:
    """A prometheus.yml: one static job per entry of `targets` (job -> ["host:port", ...])."""
    return {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "evaluation_interval": evaluation_interval,
        },
        "rule_files": [str(pathlib.Path(p).resolve()) for p in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": list(addrs)}]} for job, addrs in targets.items()
        ],
    }


class PromServer:
    """One Prometheus process. Use as a context manager, or call start() / stop()."""

    def __init__(
        self,
        targets: Mapping[str, Sequence[str]],
        *,
        rule_files: Iterable[str | os.PathLike[str]] = (),
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        extra_args: Sequence[str] = (),
    ) -> None:
        if shutil.which(PROMETHEUS) is None:
            raise PrometheusError(
                f"{PROMETHEUS!r} not found: install Debian's prometheus (scripts/system-deps) "
                "or set DRILL_PROMETHEUS_BIN"
            )
        self.config = scrape_config(
            targets,
            rule_files=rule_files,
            scrape_interval=scrape_interval,
            evaluation_interval=evaluation_interval,
        )
        self.extra_args = list(extra_args)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.workdir: pathlib.Path | None = None

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> PromServer:
        self.workdir = pathlib.Path(tempfile.mkdtemp(prefix="drill-prom-"))
        cfg = self.workdir / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.workdir / "prometheus.log", "wb"),  # noqa: SIM115 - closed with the process
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self.proc.returncode}: {self.log()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise PrometheusError(f"prometheus not ready after {timeout_s}s")

    def stop(self) -> None:
        """Stop this instance only (by its PID) and remove its data dir."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def log(self) -> str:
        if self.workdir is None:
            return ""
        try:
            return (self.workdir / "prometheus.log").read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> PromServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- HTTP API -------------------------------------------------------------------------
    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; returns `data`, raises PrometheusError on an error status."""
        pairs = []
        for k, v in params.items():
            if v is None:
                continue
            for item in v if isinstance(v, list | tuple) else [v]:
                pairs.append(("match[]" if k == "match" else k, str(item)))
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(pairs)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = json.load(r)
        except urllib.error.HTTPError as err:
            body = json.load(err)
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; returns the result list (vector or matrix)."""
        return self.api("query", query=expr, time=at)["result"]

    def query_range(self, expr: str, start: float, end: float, step: str = "1s") -> list[dict[str, Any]]:
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        return self.api(f"label/{label}/values", match=match)

    def targets(self) -> list[dict[str, Any]]:
        return self.api("targets")["activeTargets"]

    def wait_for_up(self, n: int, timeout_s: float = 30.0) -> None:
        """Wait until at least `n` targets have been scraped successfully."""
        self.wait_for("sum(up)", lambda v: v >= n, timeout_s)

    def wait_for(self, expr: str, ok=lambda v: True, timeout_s: float = 30.0) -> float:
        """Poll an instant query until its first sample satisfies `ok`; returns that value."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            res = self.query(expr)
            if res:
                last = float(res[0]["value"][1])
                if ok(last):
                    return last
            time.sleep(0.25)
        raise PrometheusError(f"timed out waiting for {expr!r} (last value {last})")


def finite_values(result: list[dict[str, Any]]) -> list[float]:
    """Every finite sample value of a query result (vector or matrix)."""
    out = []
    for series in result:
        samples = series.get("values") or ([series["value"]] if "value" in series else [])
        for _, v in samples:
            f = float(v)
            if f == f and f not in (float("inf"), float("-inf")):
                out.append(f)
    return out
