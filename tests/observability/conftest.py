"""Fixtures for the observability tests: a real Prometheus per test (see promserver.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.observability.promserver import PromServer


@pytest.fixture
def prometheus_server() -> Iterator:
    """Factory: `prometheus_server(targets, rule_files=...)` starts a PromServer, stopped at teardown."""
    started: list[PromServer] = []

    def start(targets, **kwargs) -> PromServer:
        server = PromServer(targets, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
