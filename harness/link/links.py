"""Links and the set of them: the Python API the admin API, `drill link` and a drill's runner drive.

`LinkSet` owns every link of a process, the seed of their draws, the cap on faulted connections and
the one-way stop; a `Link` is one listen address relayed to one upstream, with its toxics (in the order
they were set) and its open connections. Every method runs on the event loop's thread. Bad input raises
`ToxicError` with Toxiproxy's status code and changes nothing: 400 bad field, 404 no such link or
toxic, 409 a name taken, 500 a listen address that cannot be bound (Toxiproxy's answer to a port in
use), 403 a toxic set after the one-way stop.

    links = LinkSet(seed=7)
    link = await links.add("ledger-1", "127.0.0.1:0", "127.0.0.1:50051")
    link.add_toxic(parse_toxic({"type": "timeout", "attributes": {"timeout": 0}}))
    link.remove_toxic("timeout_downstream")
    await links.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Iterable
from typing import Any

from harness.core import headers as hdr
from harness.core.safety import ActiveFaults
from harness.link import kernel
from harness.link.calls import LinkCalls
from harness.link.ledger import ToxicLedger
from harness.link.metrics import LinkMetrics
from harness.link.relay import Connection
from harness.link.toxics import Toxic, ToxicError, update_toxic

log = logging.getLogger("drill.link")

#: Connections toxics may act on at once across the process (`--max-faulted`); past it they pass untouched
DEFAULT_MAX_FAULTED = 100
MAX_NAME = 128


def split_address(text: Any, field: str) -> tuple[str, int]:
    """`HOST:PORT` (or `[v6]:PORT`) → (host, port); `ToxicError` 400 otherwise."""
    if not isinstance(text, str) or ":" not in text:
        raise ToxicError(f"bad request body: {field} must be HOST:PORT")
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ToxicError(f"bad request body: {field} port must be 0-65535")
    return host, int(port)


class Link:
    """One listen address relayed to one upstream, with its toxics."""

    def __init__(self, links: LinkSet, name: str, listen: str, upstream: str, *, reuse_port: bool = False) -> None:
        self.links = links
        self.name = name
        self.listen_addr = split_address(listen, "listen")
        self.upstream_addr = split_address(upstream, "upstream")
        self.upstream = upstream
        self.loop = asyncio.get_running_loop()
        self.toxics: dict[str, Toxic] = {}
        #: what each toxic set touched (harness.link.ledger), by its name, until it is removed
        self.ledgers: dict[str, ToxicLedger] = {}
        self.connections: set[Connection] = set()
        self.metrics = LinkMetrics(name)
        self._server: asyncio.AbstractServer | None = None
        self.reuse_port = reuse_port  # SO_REUSEPORT on its port (`drill proxy --plane link --workers`)
        self._kernel: kernel.KernelDrops | None = None
        self._order = itertools.count()
        #: connections accepted so far (the next one's order in the draw)
        self.accepted = 0

    # read by the connections
    @property
    def seed(self) -> int:
        return self.links.seed

    @property
    def drill_tenants(self) -> frozenset[str]:
        return self.links.drill_tenants

    @property
    def slots(self) -> ActiveFaults:
        return self.links.slots

    @property
    def enabled(self) -> bool:
        return self._server is not None

    @property
    def listen(self) -> str:
        host, port = self.listen_addr
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def port(self) -> int:
        return self.listen_addr[1]

    async def start(self) -> None:
        if self._server is not None:
            return
        host, port = self.listen_addr
        try:
            self._server = await self.loop.create_server(self._accept, host, port, reuse_address=True,
                                                         reuse_port=self.reuse_port or None)  # fmt: skip
        except OSError as exc:
            raise ToxicError(f"listen tcp {host}:{port}: {exc.strerror or exc}", 500) from None
        self.listen_addr = (host, self._server.sockets[0].getsockname()[1])

    def _accept(self):
        conn = Connection(self, next(self._order))
        self.accepted += 1
        self.connections.add(conn)
        self.metrics.connections.inc()
        return conn.client

    def kernel_drops(self) -> kernel.KernelDrops:
        """This link's nftables table (made with its first connection in kernel mode)."""
        if self._kernel is None:
            self._kernel = kernel.KernelDrops(self.name)
        return self._kernel

    def _batch(self):
        return self._kernel.batch() if self._kernel is not None else contextlib.nullcontext()

    @staticmethod
    def _check_mode(toxic: Toxic) -> None:
        if toxic.mode == "kernel":
            why = kernel.why_not()
            if why is not None:
                raise ToxicError(f"bad attribute mode: {why}")

    def forget(self, conn: Connection) -> None:
        self.connections.discard(conn)
        if self.ledgers:
            now = self.loop.time()
            for ledger in self.ledgers.values():
                ledger.closed(conn, now)

    def began(self, name: str, conn: Connection) -> None:
        """The toxic `name` began to act on `conn` (told by the connection)."""
        ledger = self.ledgers.get(name)
        if ledger is not None:
            ledger.began(conn, self.loop.time())

    def touched(self, name: str) -> dict:
        """What the toxic `name` touched so far (the ledger's JSON); `ToxicError` 404 if it is not set."""
        if name not in self.toxics:
            raise ToxicError("toxic not found", 404)
        return self.ledgers[name].to_json(self.loop.time())

    def stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def stop(self) -> None:
        """Stop listening and close every connection (Toxiproxy's `enabled: false`)."""
        self.stop_listening()
        for conn in list(self.connections):
            conn.close()
        if self._kernel is not None:
            self._kernel.close()  # the connections' rules go now, not when their sockets are done

    def add_toxic(self, toxic: Toxic) -> Toxic:
        if self.links.stopped:
            raise ToxicError("drill link is stopped (the one-way stop): no toxic for the life of this process", 403)
        if toxic.name in self.toxics:
            raise ToxicError("toxic already exists", 409)
        self._check_mode(toxic)
        self.toxics[toxic.name] = toxic
        ledger = self.ledgers[toxic.name] = ToxicLedger(toxic.name, self.loop.time())
        if toxic.mode == "kernel":
            self.kernel_drops()
        with self._batch():
            for conn in list(self.connections):
                conn.toxic_set(toxic)
        ledger.setting = False
        log.warning("link %s: toxic %s (%s, %s, toxicity %g, %s) set", self.name, toxic.name, toxic.type,
                    toxic.stream, toxic.toxicity, toxic.mode)  # fmt: skip
        return toxic

    def update_toxic(self, name: str, body: Any) -> Toxic:
        if name not in self.toxics:
            raise ToxicError("toxic not found", 404)
        if self.links.stopped:
            raise ToxicError("drill link is stopped (the one-way stop): no toxic for the life of this process", 403)
        toxic = update_toxic(self.toxics[name], body)
        self._check_mode(toxic)
        self.toxics[name] = toxic
        if toxic.mode == "kernel":
            self.kernel_drops()
        with self._batch():
            for conn in list(self.connections):
                conn.toxic_removed(name)
                conn.toxic_set(toxic)
        return toxic

    def remove_toxic(self, name: str) -> None:
        if self.toxics.pop(name, None) is None:
            raise ToxicError("toxic not found", 404)
        self.ledgers.pop(name, None)
        with self._batch():
            for conn in list(self.connections):
                conn.toxic_removed(name)
        log.warning("link %s: toxic %s removed", self.name, name)

    def remove_all(self) -> None:
        for name in list(self.toxics):
            self.remove_toxic(name)

    def to_json(self) -> dict:
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream, "enabled": self.enabled,
                "toxics": [t.to_json() for t in self.toxics.values()]}  # fmt: skip


class LinkSet:
    """Every link of a process, their seed, their cap on faulted connections and the one-way stop."""

    def __init__(self, *, seed: int = 0, drill_tenants: Iterable[str] = (hdr.DEFAULT_DRILL_TENANT,),
                 max_faulted: int = DEFAULT_MAX_FAULTED, calls: LinkCalls | None = None) -> None:  # fmt: skip
        self.seed = seed
        #: the drill's per-call faults, carried by every link's connections opened while its switch is on
        #: (`harness.link.calls`; None: the link reads no more than the drill tenant)
        self.calls = calls
        self.drill_tenants = frozenset(drill_tenants)
        self.slots = ActiveFaults(max_faulted)
        self.links: dict[str, Link] = {}
        self.stopped = False

    def get(self, name: str) -> Link:
        link = self.links.get(name)
        if link is None:
            raise ToxicError("proxy not found", 404)
        return link

    @staticmethod
    def _check(name: Any, upstream: Any) -> None:
        if not isinstance(name, str) or not name:
            raise ToxicError("missing required field: name")
        if len(name) > MAX_NAME or "/" in name:
            raise ToxicError(f"bad request body: name must be at most {MAX_NAME} characters, no '/'")
        if not upstream:
            raise ToxicError("missing required field: upstream")

    async def add(self, name: str, listen: str, upstream: str, enabled: bool = True, *,
                  reuse_port: bool = False) -> Link:  # fmt: skip
        """A new link; `reuse_port`: its port shared with other processes' (SO_REUSEPORT: `drill proxy --plane
        link --workers`), else a port in use is refused."""
        self._check(name, upstream)
        if name in self.links:
            raise ToxicError("proxy already exists", 409)
        link = Link(self, name, listen or "127.0.0.1:0", upstream, reuse_port=reuse_port)
        if enabled:
            await link.start()
        self.links[name] = link
        return link

    async def update(self, name: str, body: dict) -> Link:
        """Toxiproxy's proxy update: `listen`/`upstream` (restart) and `enabled`."""
        link = self.get(name)
        listen, upstream = body.get("listen", link.listen), body.get("upstream", link.upstream)
        enabled = body.get("enabled", link.enabled)
        if not isinstance(enabled, bool):
            raise ToxicError("bad request body: enabled must be true or false")
        new_listen, new_up = split_address(listen, "listen"), split_address(upstream, "upstream")
        old = (link.listen_addr, link.upstream_addr, link.upstream, link.enabled)
        if (new_listen, new_up) != (link.listen_addr, link.upstream_addr):
            await link.stop()
            link.listen_addr, link.upstream_addr, link.upstream = new_listen, new_up, upstream
        try:
            if enabled:
                await link.start()
            else:
                await link.stop()
        except ToxicError:  # the new address cannot be bound: the link as it was (bad input changes nothing)
            link.listen_addr, link.upstream_addr, link.upstream = old[:3]
            if old[3]:
                await link.start()
            raise
        return link

    async def remove(self, name: str) -> None:
        link = self.get(name)
        del self.links[name]
        link.remove_all()
        await link.stop()

    async def populate(self, body: Any) -> list[Link]:
        """Toxiproxy's /populate: each proxy added, or replaced where it differs; all checked before any."""
        if not isinstance(body, list) or not all(isinstance(p, dict) for p in body):
            raise ToxicError("bad request body: a JSON array of proxies")
        for i, p in enumerate(body, 1):
            if not p.get("name"):
                raise ToxicError(f"missing required field: name at proxy {i}")
            if not p.get("upstream"):
                raise ToxicError(f"missing required field: upstream at proxy {i}")
            self._check(p["name"], p["upstream"])
            split_address(p.get("listen") or "127.0.0.1:0", "listen")
            split_address(p["upstream"], "upstream")
        out = []
        for p in body:
            old = self.links.get(p["name"])
            listen = p.get("listen") or "127.0.0.1:0"
            if old is not None and (old.upstream, old.listen) == (p["upstream"], listen):
                out.append(old)
                continue
            if old is not None:
                await self.remove(p["name"])
            out.append(await self.add(p["name"], listen, p["upstream"], p.get("enabled", True)))
        return out

    async def reset(self) -> None:
        """Toxiproxy's /reset: every link enabled, every toxic removed."""
        for link in self.links.values():
            link.remove_all()
            await link.start()

    def stop(self, reason: str = "stop") -> None:
        """The one-way stop: every toxic removed at once, none set again for the life of the process."""
        self.stopped = True
        if self.calls is not None:
            self.calls.core.stop.trip(reason)  # held calls released, no fault decided again
        for link in self.links.values():
            link.remove_all()
            for conn in list(link.connections):
                if conn.hung:
                    conn.close()  # a connection a connect fault left unanswered is let go
        log.warning("drill link STOPPED (%s): every toxic removed, none set again", reason)

    async def drain(self, grace_s: float) -> None:
        """A graceful stop's first half (`drill proxy --plane link` at SIGTERM, as grpc.aio's `stop(grace)`): no new
        connection, each client told to open no new stream (`Connection.drain`), then up to `grace_s` for the streams
        in flight to end. `close()` ends what is left."""
        conns = []
        for link in self.links.values():
            link.stop_listening()
            conns += list(link.connections)
        for conn in conns:
            conn.drain()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while any(conn.streams_in_flight for conn in conns) and loop.time() < deadline:
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        for link in list(self.links.values()):
            await link.stop()
        self.links.clear()
