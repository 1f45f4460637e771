"""The live drill's links: one real `drill link` process in front of the leaf, scraped as a hop is.

The process starts empty (admin API and /metrics only) beside the hops; once the leaf serves, two links are
created through its admin API (Toxiproxy's), both relaying to the leaf:

- `obs-relay`, from its creation: a `latency` toxic (bytes held) and an `rst_stream` toxic that resets every
  stream carrying the drill tenant at its headers. One channel dials it: an organic user (delayed, never reset)
  and a drill user (every call reset) share its one connection.
- `obs-blackhole`: a `timeout` 0 toxic, set once one call went through, on that connection alone (a blackhole
  on the leaf's own callers would break the other assertions of the module). Its user's calls wait out a
  short deadline; without keepalive the caller keeps the connection, so the toxic acts on exactly one.

Both links exist before Prometheus' first scrape, so their counters' first samples are 0. The link process is
scraped under the service it fronts (`leaf`), as compose scrapes its link as `ledger`. Kernel mode needs
root: `drill_link_kernel_drops` is the gauge each link creates at 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib

from grpc import aio

from harness.core import headers as hdr
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.drills.stack.links import RunningLink
from harness.procs.spawn import ServeProcess, spawn_serve

RELAY, BLACKHOLE = "obs-relay", "obs-blackhole"
LATENCY = {"name": "latency", "type": "latency", "attributes": {"latency": 200}}
RESET = {"name": "reset", "type": "rst_stream", "attributes": {"code": "CANCEL", "at": "headers"}}
HOLE = {"name": "hole", "type": "timeout", "attributes": {"timeout": 0}}
#: every toxic set, by link: what the faulted panel is compared with
TOXICS = {RELAY: (LATENCY, RESET), BLACKHOLE: (HOLE,)}
PACE_S = 0.03


def spawn_link(workdir: pathlib.Path) -> ServeProcess:
    """`drill link` with no link yet: its admin API (any free port, the ready file's `port`) and /metrics."""
    return spawn_serve("link", ["--admin-port", "0", "--metrics-port", "-1", "--seed", "7"], workdir, command="link")


@dataclasses.dataclass
class LinkOutcome:
    """What the drill's link users saw, and each toxic's record as the link kept it."""

    drill_calls: int = 0  # drill calls sent through obs-relay
    drill_reset: int = 0  # of those, failed with the reset's CANCELLED
    organic_ok: int = 0  # organic calls through obs-relay that succeeded
    organic_failed: int = 0  # … and that failed (none should: the reset spares organic streams)
    blackhole_failed: int = 0  # calls through obs-blackhole after its toxic was set (each waits out its deadline)
    records: dict[tuple[str, str], dict] = dataclasses.field(default_factory=dict)  # (link, toxic type) → record


class LiveLinks:
    """The two links of one `drill link` process; `drive()` runs their users, `read_records()` their toxics'."""

    def __init__(self, proc: ServeProcess, leaf: str) -> None:
        self.admin = f"http://127.0.0.1:{proc.port}"
        self.ports: dict[str, int] = {}
        for name in (RELAY, BLACKHOLE):
            status, body = RunningLink(name, self.admin).call(
                "POST", "/proxies", {"name": name, "listen": "127.0.0.1:0", "upstream": leaf}
            )
            assert status == 201, (status, body)
            self.ports[name] = int(str(body["listen"]).rsplit(":", 1)[1])
        for toxic in TOXICS[RELAY]:
            self._set(RELAY, toxic)
        self.outcome = LinkOutcome()

    def _set(self, link: str, toxic: dict) -> None:
        status, body = RunningLink(link, self.admin).call("POST", f"/proxies/{link}/toxics", toxic)
        assert status == 200, (status, body)

    async def drive(self, stop: asyncio.Event) -> None:
        """Until `stop`: the relay's organic and drill users, and the blackhole's (its toxic set after a first call)."""
        out = self.outcome
        async with (
            aio.insecure_channel(f"127.0.0.1:{self.ports[RELAY]}") as relay,
            aio.insecure_channel(f"127.0.0.1:{self.ports[BLACKHOLE]}") as hole,
        ):
            relay_stub, hole_stub = drill_pb2_grpc.DemoStub(relay), drill_pb2_grpc.DemoStub(hole)
            req = drill_pb2.CallRequest(payload="link")
            await hole_stub.Call(req, timeout=5)  # the connection the blackhole will hold
            await asyncio.to_thread(self._set, BLACKHOLE, HOLE)

            async def organic() -> None:
                while not stop.is_set():
                    try:
                        await relay_stub.Call(req, timeout=5)  # delayed 200 ms, never reset
                        out.organic_ok += 1
                    except aio.AioRpcError:
                        out.organic_failed += 1
                    await asyncio.sleep(PACE_S)

            async def drill() -> None:
                tenant = ((hdr.TENANT, hdr.DEFAULT_DRILL_TENANT),)
                while not stop.is_set():
                    out.drill_calls += 1
                    try:
                        await relay_stub.Call(req, timeout=5, metadata=tenant)
                    except aio.AioRpcError as err:
                        out.drill_reset += err.code().name == "CANCELLED"
                    await asyncio.sleep(PACE_S)

            async def silent() -> None:
                while not stop.is_set():
                    try:
                        await hole_stub.Call(req, timeout=0.5)
                    except aio.AioRpcError:
                        out.blackhole_failed += 1

            await asyncio.gather(organic(), drill(), silent())

    def read_records(self) -> dict[tuple[str, str], dict]:
        """Each toxic's record (`GET …/toxics/NAME/connections`): read while it is still set."""
        for link, toxics in TOXICS.items():
            for toxic in toxics:
                path = f"/proxies/{link}/toxics/{toxic['name']}/connections"
                status, body = RunningLink(link, self.admin).call("GET", path)
                assert status == 200, (status, body)
                self.outcome.records[(link, toxic["type"])] = body
        return self.outcome.records
