"""The fleet's services, built once per session by the project's one build step (go build, npm ci)."""

from __future__ import annotations

import pytest

from harness.fleet import build


@pytest.fixture(scope="session")
def built() -> build.Built:
    return build.ensure()
