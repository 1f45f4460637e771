"""`drill dashboards push` and the runner's annotation helper, against a stand-in Grafana HTTP API
on 127.0.0.1 (Grafana itself cannot run here): what grafana-client sends is what Grafana's API takes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness import cli
from harness.dashboards.annotations import DrillAnnotator
from harness.procs.ports import free_port


class FakeGrafana(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, str, dict, dict]] = []
        self.folders: set[str] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeGrafana

    def log_message(self, *args: object) -> None:
        pass

    def _reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self.server.requests.append((self.command, self.path, dict(self.headers), body))
        return body

    def do_GET(self) -> None:  # noqa: N802
        self._record()
        if self.path.startswith("/api/folders/"):
            uid = self.path.rsplit("/", 1)[1]
            if uid in self.server.folders:
                return self._reply(200, {"uid": uid, "title": "Drill"})
            return self._reply(404, {"message": "folder not found"})
        self._reply(404, {"message": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        body = self._record()
        if self.path == "/api/folders":
            self.server.folders.add(body["uid"])
            return self._reply(200, {"uid": body["uid"], "title": body["title"]})
        if self.path == "/api/dashboards/db":
            uid = body["dashboard"]["uid"]
            return self._reply(200, {"status": "success", "uid": uid, "url": f"/d/{uid}/x", "version": 1})
        if self.path == "/api/annotations":
            return self._reply(200, {"id": 7, "message": "Annotation added"})
        self._reply(404, {"message": "not found"})


@pytest.fixture
def grafana() -> Iterator[FakeGrafana]:
    server = FakeGrafana()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


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
    monkeypatch.setenv("DRILL_GRAFANA_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    ann = DrillAnnotator.from_env()
    assert ann is not None and ann.event("fault on", plan="p") is None
