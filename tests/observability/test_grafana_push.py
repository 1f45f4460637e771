"""`drill dashboards push` and the runner's annotation helper, against a stand-in Grafana HTTP API
on 127.0.0.1 (Grafana itself cannot run here): what grafana-client sends is what Grafana's API takes.
"""

from __future__ import annotations

import pytest

from harness import cli
from harness.dashboards.annotations import DrillAnnotator
from harness.procs.ports import refused_port
from tests.fake_grafana import FakeGrafana


def test_push_creates_the_folder_and_imports_every_dashboard_with_overwrite(grafana: FakeGrafana) -> None:
    assert cli.main(["dashboards", "push", "--grafana", grafana.url, "--token", "sa-token"]) == 0
    posts = [(path, headers, body) for method, path, headers, body in grafana.requests if method == "POST"]
    assert posts[0][0] == "/api/folders" and posts[0][2]["uid"] == "drill"
    imported = [body for path, _, body in posts if path == "/api/dashboards/db"]
    assert sorted(b["dashboard"]["uid"] for b in imported) == ["drill-mttr", "drill-overview"]
    for body in imported:
        assert body["overwrite"] is True and body["folderUid"] == "drill" and body["dashboard"]["id"] is None
    assert all(h.get("Authorization") == "Bearer sa-token" for _, h, _ in posts)
    # A second push finds the folder and only re-imports.
    grafana.requests.clear()
    assert cli.main(["dashboards", "push", "--grafana", grafana.url, "--token", "sa-token"]) == 0
    assert [p for m, p, _, _ in grafana.requests if m == "POST"] == ["/api/dashboards/db"] * 2


def test_annotator_posts_tagged_drill_events_and_regions(grafana: FakeGrafana) -> None:
    ann = DrillAnnotator.from_url(grafana.url, user="admin", password="admin")
    assert ann.event("fault on: abort:UNAVAILABLE", plan="abort-drill", phase="fault", at_s=1700000000.5) == 7
    assert ann.region(1700000000.0, 1700000020.0, "fault", plan="abort-drill", phase="fault") == 7
    (_, _, headers, point), (_, _, _, region) = [r for r in grafana.requests if r[1] == "/api/annotations"]
    assert headers["Authorization"].startswith("Basic ")
    assert point["tags"] == ["drill", "plan:abort-drill", "phase:fault"]
    assert point["time"] == 1700000000500 and point["timeEnd"] is None
    assert (region["time"], region["timeEnd"]) == (1700000000000, 1700000020000)


def test_annotator_is_off_without_a_url_and_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DRILL_GRAFANA_URL", raising=False)
    assert DrillAnnotator.from_env() is None
    with refused_port() as port:  # connections to it are refused while we hold it
        monkeypatch.setenv("DRILL_GRAFANA_URL", f"http://127.0.0.1:{port}")
        ann = DrillAnnotator.from_env()
        assert ann is not None and ann.event("fault on", plan="p") is None
