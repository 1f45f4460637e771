"""A throwaway Prometheus on 127.0.0.1: the drill runner's `--prometheus auto` and the tests' PromQL.

`LocalPrometheus` starts the `prometheus` on PATH (or `DRILL_PROMETHEUS_BIN`)
with its own config, a fresh TSDB under its workdir and a port it binds itself
(`127.0.0.1:0`, read back from /proc: `harness.procs.ports`), as a child
that cannot outlive us (`harness.procs.spawn`). Targets come from a file_sd file
(`set_targets`, rewritten per configuration by the runner) and/or static jobs;
rule files load as in compose. Prometheus 2.x takes ~5 s after start before its
first scrape, even at a 1 s interval: `wait_first_sample`.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.core.errors import RunFailed
from harness.procs.ports import wait_listening
from harness.procs.spawn import spawn, stop_processes

PROMETHEUS = os.environ.get("DRILL_PROMETHEUS_BIN", "prometheus")
PROMTOOL = os.environ.get("DRILL_PROMTOOL_BIN", "promtool")


class PrometheusError(RunFailed):
    """Prometheus missing, not starting, unreachable, or answering with an error."""


def api_get(url: str, path: str, params: Sequence[tuple[str, str]] = (), timeout_s: float = 30.0) -> Any:
    """GET URL/api/v1/PATH; the `data` of a success, else PrometheusError (one line)."""
    full = f"{url.rstrip('/')}/api/v1/{path}?{urllib.parse.urlencode(list(params))}"
    try:
        with urllib.request.urlopen(full, timeout=timeout_s) as r:
            body = json.load(r)
    except urllib.error.HTTPError as err:
        try:
            body = json.load(err)
        except ValueError:
            raise PrometheusError(f"{url}: HTTP {err.code} for {path}") from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PrometheusError(f"cannot reach Prometheus at {url}: {reason}") from None
    if body.get("status") != "success":
        raise PrometheusError(f"{path}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]


def write_targets(path: pathlib.Path, endpoints: Iterable[tuple]) -> None:
    """A file_sd targets file for (service, metrics URL[, instance]) endpoints, atomically replaced.

    An `instance` names a target that shares its address with others (the runner's relay paths)."""
    groups = []
    for service, url, *instance in endpoints:
        u = urllib.parse.urlsplit(url)
        labels = {"service": service or "loadgen", "__metrics_path__": u.path or "/metrics"}
        if instance:
            labels["instance"] = instance[0]
        groups.append({"targets": [u.netloc], "labels": labels})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups))
    tmp.replace(path)


class LocalPrometheus:
    """One Prometheus process. `start()` (or use as a context manager), `stop()` ends it by PID."""

    def __init__(
        self,
        workdir: pathlib.Path | None = None,
        *,
        targets: Mapping[str, Sequence[str]] | None = None,
        rule_files: Iterable[str | os.PathLike[str]] = (),
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        extra_args: Sequence[str] = (),
        keep_data: bool | None = None,
        reuse: bool = False,
    ) -> None:
        """`reuse=True` serves the TSDB already in WORKDIR/data (a finished run's) instead of a fresh one."""
        self._own_dir = workdir is None
        self.reuse = reuse
        self.workdir = workdir or pathlib.Path(tempfile.mkdtemp(prefix="drill-prom-"))
        #: a runner's TSDB stays for later reading; a temporary one goes with stop()
        self.keep_data = (not self._own_dir or reuse) if keep_data is None else keep_data
        self.targets_file = self.workdir / "targets.json"
        self.config = {
            "global": {
                "scrape_interval": scrape_interval,
                "scrape_timeout": scrape_interval if scrape_interval != "1s" else "900ms",
                "evaluation_interval": evaluation_interval,
            },
            "rule_files": [str(pathlib.Path(p).resolve()) for p in rule_files],
            "scrape_configs": [
                {
                    "job_name": "drill",
                    "honor_labels": True,
                    "file_sd_configs": [{"files": [str(self.targets_file.resolve())], "refresh_interval": "1s"}],
                },
                *(
                    {"job_name": job, "static_configs": [{"targets": list(addrs)}]}
                    for job, addrs in (targets or {}).items()
                ),
            ],
        }
        self.extra_args = list(extra_args)
        self.port = 0
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, timeout_s: float = 30.0) -> LocalPrometheus:
        if shutil.which(PROMETHEUS) is None:
            raise PrometheusError(
                f"{PROMETHEUS!r} not found: install Debian's prometheus (scripts/system-deps) "
                "or set DRILL_PROMETHEUS_BIN"
            )
        if not self._own_dir and self.workdir.exists() and not self.reuse:
            shutil.rmtree(self.workdir)  # a fresh TSDB per run
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.targets_file.write_text("[]")
        cfg = self.workdir / "prometheus.yml"
        cfg.write_text(json.dumps(self.config, indent=1))
        argv = [
            PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={self.workdir / 'data'}",
            "--web.listen-address=127.0.0.1:0", "--storage.tsdb.retention.time=1d", "--log.level=warn",
            *self.extra_args,
        ]  # fmt: skip
        self.proc = spawn(argv, self.workdir / "prometheus.log")
        deadline = time.monotonic() + timeout_s
        ports = wait_listening(self.proc, timeout_s)  # its web port is the only one it listens on
        self.port = ports[0] if ports else 0
        while time.monotonic() < deadline and self.port:
            if self.proc.poll() is not None:
                tail = self.log()[-500:].strip().replace("\n", " | ")
                self.stop()
                raise PrometheusError(f"prometheus exited with {self.proc.returncode}: {tail}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        code = self.proc.poll()
        tail = self.log()[-300:].strip().replace("\n", " | ")
        self.stop()
        if code is not None:
            raise PrometheusError(f"prometheus exited with {code}: {tail or 'no output'}")
        raise PrometheusError(f"prometheus not ready after {timeout_s:.0f} s: {tail or 'no output'}")

    def stop(self) -> None:
        """Stop this instance only (by its process group); drop a temporary data dir."""
        if self.proc is not None:
            stop_processes([self.proc])
        if not self.keep_data:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log(self) -> str:
        try:
            return (self.workdir / "prometheus.log").read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> LocalPrometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- targets --------------------------------------------------------------------------
    def set_targets(self, endpoints: Iterable[tuple]) -> None:
        write_targets(self.targets_file, endpoints)

    # -- HTTP API -------------------------------------------------------------------------
    def api(self, path: str, **params: Any) -> Any:
        pairs = []
        for k, v in params.items():
            if v is None:
                continue
            for item in v if isinstance(v, list | tuple) else [v]:
                pairs.append(("match[]" if k == "match" else k, str(item)))
        return api_get(self.url, path, pairs)

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; returns the result list (vector or matrix)."""
        return self.api("query", query=expr, time=at)["result"]

    def query_range(self, expr: str, start: float, end: float, step: str = "1s") -> list[dict[str, Any]]:
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        return self.api(f"label/{label}/values", match=match)

    def active_targets(self) -> list[dict[str, Any]]:
        return self.api("targets")["activeTargets"]

    def wait_for(self, expr: str, ok=lambda v: True, timeout_s: float = 30.0) -> float:
        """Poll an instant query until its first sample satisfies `ok`; returns that value."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            try:
                res = self.query(expr)
            except PrometheusError:
                res = []
            if res:
                last = float(res[0]["value"][1])
                if ok(last):
                    return last
            time.sleep(0.25)
        raise PrometheusError(f"timed out waiting for {expr!r} (last value {last})")

    def wait_for_up(self, n: int, timeout_s: float = 30.0) -> None:
        """Wait until at least `n` targets have been scraped successfully."""
        self.wait_for("sum(up)", lambda v: v >= n, timeout_s)

    def wait_first_sample(self, timeout_s: float = 20.0) -> bool:
        """True once Prometheus has scraped anything (its first scrape comes ~5 s after start)."""
        try:
            self.wait_for("count(up)", lambda v: v > 0, timeout_s)
            return True
        except PrometheusError:
            return False


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
