"""A stand-in Grafana HTTP API on 127.0.0.1 that records every request (Grafana itself cannot run here).

Answers what `drill dashboards push` and the annotation helper call: folders, dashboards/db,
annotations. The `grafana` fixture (tests/conftest.py) serves one per test.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
