"""Toxiproxy's admin API over a `LinkSet`, so Toxiproxy's clients drive `drill link` unchanged.

HTTP/1.1 (keep-alive) on a loopback port, on the relay's own event loop: the same objects the Python API
drives. Routes, JSON and status codes are Toxiproxy's (api.go): GET/POST /proxies, GET/POST/PATCH/DELETE
/proxies/{name}, GET/POST /proxies/{name}/toxics, GET/POST/PATCH/DELETE /proxies/{name}/toxics/{toxic},
POST /reset (204), POST /populate (201), GET /version. Errors are `{"error": MESSAGE, "status": CODE}` with
Toxiproxy's codes (400 bad body, unknown toxic type, bad attribute; 404; 409 name taken; 500 listen failed)
and change nothing; a toxic set after the one-way stop is refused with 403. As Toxiproxy, a request from a
browser (User-Agent `Mozilla/…`) is refused (403), so no web page can set a fault on a loopback link.
Extension: GET /proxies/{name}/toxics/{toxic}/preview?count=N: which of the link's next connections (by
order, from the first) the toxic's toxicity hits, as `x` and `.` (the seeded draw, `harness.link.draw`);
GET /proxies/{name}/toxics/{toxic}/connections: what the toxic touched so far (`harness.link.ledger`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.parse
from typing import Any

from harness.link import draw
from harness.link.links import LinkSet
from harness.link.toxics import ToxicError, parse_toxic

log = logging.getLogger("drill.link")

VERSION = "drill-link 0.1.0 (Toxiproxy API 2.x)"
#: A request's head and body at most; a client past them is answered 400 (413 for the body) and let go
MAX_HEAD = 16 * 1024
MAX_BODY = 1024 * 1024
#: Seconds an idle keep-alive client may hold its connection
IDLE_S = 60.0
MAX_PREVIEW = 10_000
_REASONS = {
    200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large", 500: "Internal Server Error",
}  # fmt: skip


class AdminApi:
    """The routes over one `LinkSet`; `handle(method, path, body)` → (status, JSON value or None)."""

    def __init__(self, links: LinkSet) -> None:
        self.links = links

    async def handle(self, method: str, target: str, body: bytes) -> tuple[int, Any]:
        url = urllib.parse.urlsplit(target)
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        try:
            return await self._route(method, parts, body, urllib.parse.parse_qs(url.query))
        except ToxicError as err:
            return err.status, {"error": str(err), "status": err.status}
        except Exception as exc:  # noqa: BLE001 - a bug answers 500 with its line, as Toxiproxy does; never a hang-up
            log.exception("admin API: %s %s failed", method, target)
            return 500, {"error": f"{type(exc).__name__}: {exc}", "status": 500}

    @staticmethod
    def _json(body: bytes) -> Any:
        try:
            return json.loads(body or b"null")
        except ValueError as exc:
            raise ToxicError(f"bad request body: {exc}") from None

    async def _route(self, method: str, parts: list[str], body: bytes, query: dict) -> tuple[int, Any]:
        links = self.links
        n = len(parts)
        if parts == ["version"] and method == "GET":
            return 200, {"version": VERSION}
        if parts == ["reset"] and method == "POST":
            await links.reset()
            return 204, None
        if parts == ["populate"] and method == "POST":
            made = await links.populate(self._json(body))
            return 201, {"proxies": [link.to_json() for link in made]}
        if parts[0] != "proxies" or n > 5:
            return 404, {"error": "not found", "status": 404}
        if n == 1:
            if method == "GET":
                return 200, {name: link.to_json() for name, link in links.links.items()}
            if method == "POST":
                req = self._json(body)
                if not isinstance(req, dict):
                    raise ToxicError("bad request body: a JSON object")
                enabled = req.get("enabled", True)
                if not isinstance(enabled, bool):
                    raise ToxicError("bad request body: enabled must be true or false")
                link = await links.add(req.get("name"), req.get("listen") or "127.0.0.1:0", req.get("upstream"),
                                       enabled)  # fmt: skip
                return 201, link.to_json()
            return 405, {"error": "method not allowed", "status": 405}
        link = links.get(parts[1])
        if n == 2:
            if method == "GET":
                return 200, link.to_json()
            if method in ("POST", "PATCH"):
                req = self._json(body)
                if not isinstance(req, dict):
                    raise ToxicError("bad request body: a JSON object")
                return 200, (await links.update(link.name, req)).to_json()
            if method == "DELETE":
                await links.remove(link.name)
                return 204, None
            return 405, {"error": "method not allowed", "status": 405}
        if parts[2] != "toxics":
            return 404, {"error": "not found", "status": 404}
        if n == 3:
            if method == "GET":
                return 200, [t.to_json() for t in link.toxics.values()]
            if method == "POST":
                return 200, link.add_toxic(parse_toxic(self._json(body))).to_json()
            return 405, {"error": "method not allowed", "status": 405}
        name = parts[3]
        if n == 5 and parts[4] == "connections":
            if method != "GET":
                return 405, {"error": "method not allowed", "status": 405}
            return 200, link.touched(name)
        if n == 5:
            if parts[4] != "preview" or method != "GET":
                return 404, {"error": "not found", "status": 404}
            toxic = link.toxics.get(name)
            if toxic is None:
                raise ToxicError("toxic not found", 404)
            count = query.get("count", ["32"])[0]
            if not count.isdigit() or not 0 < int(count) <= MAX_PREVIEW:
                raise ToxicError(f"bad count: 1-{MAX_PREVIEW}")
            return 200, {"seed": links.seed, "toxic": name, "toxicity": toxic.toxicity,
                         "connections": draw.preview(links.seed, name, toxic.toxicity, int(count))}  # fmt: skip
        if method == "GET":
            toxic = link.toxics.get(name)
            if toxic is None:
                raise ToxicError("toxic not found", 404)
            return 200, toxic.to_json()
        if method in ("POST", "PATCH"):
            return 200, link.update_toxic(name, self._json(body)).to_json()
        if method == "DELETE":
            link.remove_toxic(name)
            return 204, None
        return 405, {"error": "method not allowed", "status": 405}


async def _serve_client(api: AdminApi, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            try:
                method, target, _version = lines[0].split(" ", 2)
            except ValueError:
                await _respond(writer, 400, {"error": "bad request line", "status": 400}, close=True)
                return
            fields = {}
            for line in lines[1:]:
                key, sep, value = line.partition(":")
                if sep:
                    fields[key.strip().lower()] = value.strip()
            length = fields.get("content-length", "0")
            if not length.isdigit() or int(length) > MAX_BODY or "chunked" in fields.get("transfer-encoding", ""):
                await _respond(writer, 413, {"error": "body too large or chunked", "status": 413}, close=True)
                return
            body = await reader.readexactly(int(length)) if int(length) else b""
            if fields.get("user-agent", "").startswith("Mozilla/"):
                status, value = 403, {"error": "User agent not allowed", "status": 403}
            else:
                status, value = await api.handle(method.upper(), target, body)
            close = fields.get("connection", "").lower() == "close"
            await _respond(writer, status, value, close=close)
            if close:
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


async def _respond(writer: asyncio.StreamWriter, status: int, value: Any, *, close: bool) -> None:
    payload = b"" if status == 204 or value is None else json.dumps(value).encode()
    head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", f"Content-Length: {len(payload)}"]
    if payload:
        head.append("Content-Type: application/json")
    if close:
        head.append("Connection: close")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
    await writer.drain()


async def serve_admin(links: LinkSet, host: str, port: int) -> asyncio.AbstractServer:
    """Serve the admin API on host:port (0: any free port); the server (its port: `.sockets[0]`)."""
    api = AdminApi(links)
    return await asyncio.start_server(lambda r, w: _serve_client(api, r, w), host, port, limit=MAX_HEAD,
                                      reuse_address=True)  # fmt: skip
