"""`drill link`'s /metrics as a preflight reads them: the link has toxics, not the interceptors' switch, so it publishes
no `drill_fault_switch` sample, whatever DRILL_FAULT_ENABLED says; a Prometheus that scrapes it under a hop's name
(compose/blackhole.yml: the alias `ledger`) then counts no target of that hop as "injection OFF"."""

from __future__ import annotations

import pytest
import requests

from harness.drills.analysis.landing import Gates
from tests.link.test_cli import drill_link


@pytest.mark.parametrize("enabled", ["1", "0"])
def test_the_links_metrics_publish_no_fault_switch(tmp_path, enabled):
    env = {"DRILL_FAULT_ENABLED": enabled, "DRILL_SERVICE": "ledger"}
    with drill_link(tmp_path, "--upstream", "127.0.0.1:9", "--port", "0", "--metrics-port", "-1", "--name", "ledger-1",
                    env=env) as (_, ready):  # fmt: skip
        text = requests.get(f"http://127.0.0.1:{ready['metrics_port']}/metrics", timeout=5).text
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert 'drill_link_connections_total{link="ledger-1"} 0.0' in samples  # the link's own series are there
    assert not [s for s in samples if s.startswith("drill_fault_switch")]
    assert Gates.parse(text).switch == {}  # what the preflight reads from a hop's /metrics
