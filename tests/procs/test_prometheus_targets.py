"""A target handed to the run's Prometheus is scraped within Prometheus' own discovery delay.

Both ways this went wrong cost every trial of every run 15 s and its first seconds in Prometheus:
a relative `--out` (the default `drill-out`) put a relative file_sd path in the config, which
Prometheus reads relative to the config file's folder (no targets, ever); and the wait's PromQL
regex carried `\\.` (an unknown escape in a PromQL string: the query failed each time).
"""

from __future__ import annotations

import os
import pathlib

import pytest
from prometheus_client import CollectorRegistry, start_http_server

from harness.procs.prometheus import LocalPrometheus, PrometheusError, wait_scraped

pytestmark = pytest.mark.slow


def test_targets_written_under_a_relative_workdir_are_scraped_and_the_wait_sees_them(tmp_path, monkeypatch):
    # an empty registry each: the worker's default one holds every earlier test's series (megabytes late in a
    # run), which a starved box could not serve within the 900-ms scrape timeout (up stayed 0)
    servers = [start_http_server(0, addr="127.0.0.1", registry=CollectorRegistry()) for _ in range(2)]
    urls = [f"http://127.0.0.1:{server.server_port}/metrics" for server, _ in servers]
    monkeypatch.chdir(tmp_path)
    prom = LocalPrometheus(pathlib.Path("drill-out/prometheus")).start()  # relative, as `drill run` is given
    try:
        prom.set_targets([(f"hop{i}", u) for i, u in enumerate(urls)])
        # Prometheus 2.x hands discovered targets to its scrape manager on 5-s ticks (discovery, then scrape
        # reload) and a new target's first scrape lands within one 1-s interval after: ~11 s on a quiet box. The
        # property is "scraped at all" (the old code: never), so the limit is only a hang guard; a box starved
        # by a soak and two CPU hogs once took over 30 s
        assert wait_scraped(prom.url, urls, timeout_s=120.0)
        assert {r["metric"]["service"] for r in prom.query("up == 1")} == {"hop0", "hop1"}
    finally:
        prom.stop()
        for server, thread in servers:
            server.shutdown()
            thread.join()
    assert not os.path.isabs(str(prom.workdir))


def test_a_wait_whose_query_prometheus_refuses_says_so_at_once(tmp_path):
    prom = LocalPrometheus(tmp_path / "p").start()
    try:
        with pytest.raises(PrometheusError, match="bad_data"):
            wait_scraped(prom.url, ['http://127.0.0.1:1"/metrics'], timeout_s=30.0)
    finally:
        prom.stop()
