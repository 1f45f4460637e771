"""Fixtures for the observability tests: a real Prometheus per test (harness.procs.prometheus)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.procs.prometheus import LocalPrometheus


@pytest.fixture
def prometheus_server() -> Iterator:
    """Factory: `prometheus_server(targets, rule_files=...)` starts a LocalPrometheus, stopped at teardown."""
    started: list[LocalPrometheus] = []

    def start(targets, **kwargs) -> LocalPrometheus:
        server = LocalPrometheus(targets=targets, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
