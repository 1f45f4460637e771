"""A trial's links: `drill link`'s relays (harness.link, in the runner's process) in front of replicas.

Owns what a plan's links do in one trial: each starts before its callers dial it (a topology's hop above
finds it by a ready file of the form `drill serve` writes, so the chain still starts at once; a stack's caller
dials `stack.links[].port`), the plan's link fault (`fault.link`) is set when the fault phase starts and
removed when it ends (`fault_on`/`fault_off`, from the runner's tick), the one-way stop removes it at once
(a guard's trip), and what the fault touched is counted from the relay itself:

- the connections the toxic acted on, and the calls (HTTP/2 streams the caller opened) on them while it did,
  organic and drill apart (the relay reads each stream's tenant): a connection fault touches every call on
  its connection, organic ones too;
- detection: for each connection the toxic held at the fault's start, when its caller closed it (keepalive
  found it dead, or the caller gave up on it). `detected_s` is the last of them, in seconds after the toxic
  was set; None when one was still open when the fault ended. Read by polling the relay every `POLL_S`
  on the runner's loop: the resolution is POLL_S plus that loop's lateness.

A blackhole (`timeout`) in user space still ACKs at the TCP level, so it exercises HTTP/2 keepalive, not
TCP_USER_TIMEOUT or `tcp_retries2`; its `mode: kernel` drops the packets too (harness.link.kernel), and the
summary's `mode` says which.

A stack link with `admin` is a `drill link` already running elsewhere (a compose service, a Kubernetes
sidecar): the runner starts nothing and sets and removes the toxic through its admin API (`RunningLink`).
Its connections live in that process, which records what the toxic touched (harness.link.ledger): the
runner reads it (`GET /proxies/{name}/toxics/{toxic}/connections`) just before it removes the toxic and
counts the same summary from it, detection included, so `expect` holds there too. The times are the
link's own (when its loop saw each connection close, after the toxic was set there), not a poll's:
`resolution_s` is None. A link that cannot answer (Toxiproxy itself has no such route, or the link's own
one-way stop removed the toxic first) leaves the trial without a summary, and says why in the log.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from harness.drills.plan.links import LinkFault, StackLink, TopologyLink
from harness.drills.stack.topology import Topology
from harness.link import Link, LinkSet, ToxicError, parse_toxic
from harness.link.relay import Connection

#: How often the relay's connections are looked at while a link fault is on (the detection's resolution)
POLL_S = 0.02

#: Seconds a running link's admin API may take to answer (a loopback or compose-network hop: milliseconds)
ADMIN_TIMEOUT_S = 2.0


class LinkStartError(RuntimeError):
    """A link could not start (its replica never served, or its port is taken); the target words it."""


class RunningLink:
    """A `drill link` (or Toxiproxy) already running, driven through its admin API: one link by name."""

    def __init__(self, name: str, admin: str) -> None:
        self.name, self.admin = name, admin.rstrip("/")

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        """(status, JSON or None); `OSError` when the API cannot be reached. Blocking, bounded by ADMIN_TIMEOUT_S."""
        data = json.dumps(body).encode() if body is not None else None
        head = {"Content-Type": "application/json", "User-Agent": "drill-run"}
        req = urllib.request.Request(f"{self.admin}{path}", data=data, method=method, headers=head)
        try:
            with urllib.request.urlopen(req, timeout=ADMIN_TIMEOUT_S) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        return status, (json.loads(raw) if raw else None)

    def check(self, toxic: str | None) -> str:
        """The link exists (its `upstream`); a toxic of the plan's name left by an earlier run is removed."""
        try:
            status, body = self.call("GET", f"/proxies/{self.name}")
            if status != 200:
                raise LinkStartError(f"link {self.name}: {self.admin} answered {status}: {body}")
            if toxic is not None and any(t.get("name") == toxic for t in body.get("toxics") or ()):
                self.call("DELETE", f"/proxies/{self.name}/toxics/{toxic}")
        except (OSError, ValueError) as exc:
            raise LinkStartError(f"link {self.name}: its admin API {self.admin} did not answer: {exc}") from None
        return str(body.get("upstream"))

    def set(self, toxic: dict) -> str | None:
        """Set `toxic`; None when set, else why not (the API's answer)."""
        return self._say("POST", f"/proxies/{self.name}/toxics", toxic, 200)

    def touched(self, name: str) -> tuple[dict | None, str | None]:
        """What the toxic `name` touched so far, as the link recorded it (harness.link.ledger), or why not."""
        try:
            status, answer = self.call("GET", f"/proxies/{self.name}/toxics/{name}/connections")
        except (OSError, ValueError) as exc:
            return None, f"{self.admin} did not answer: {exc}"
        if status != 200 or not isinstance(answer, dict) or not isinstance(answer.get("connections"), list):
            return None, f"{self.admin} answered {status}: {answer}"
        return answer, None

    def remove(self, name: str) -> str | None:
        """Remove the toxic `name`; None when removed (or already gone), else why not."""
        return self._say("DELETE", f"/proxies/{self.name}/toxics/{name}", None, 204, 404)

    def _say(self, method: str, path: str, body: dict | None, *ok: int) -> str | None:
        try:
            status, answer = self.call(method, path, body)
        except (OSError, ValueError) as exc:
            return f"{self.admin} did not answer: {exc}"
        return None if status in ok else f"{self.admin} answered {status}: {answer}"


class TrialLinks:
    """The links of one trial, the fault on one of them, and what it touched."""

    def __init__(self, specs: tuple[TopologyLink, ...] | tuple[StackLink, ...], fault: LinkFault | None, *,
                 seed: int, tenant: str, log: Callable[[str], None] = print) -> None:  # fmt: skip
        self.specs, self.fault, self.log = specs, fault, log
        self.set = LinkSet(seed=seed, drill_tenants=(tenant,))
        self.links: dict[str, Link] = {}
        #: the running links (`stack.links[].admin`) by name
        self.running: dict[str, RunningLink] = {}
        self.on_at: float | None = None  # unix seconds the toxic was set
        self.off_at: float | None = None
        #: every connection the toxic acted on → (organic, drill) streams it had opened when it began to
        self.touched: dict[Connection, tuple[int, int]] = {}
        #: the connections the toxic held at its start that are still open
        self.held: set[Connection] = set()
        self.held_at_start = 0
        #: seconds after the toxic was set at which each connection it held at its start closed
        self.closed_s: list[float] = []
        self._watch: asyncio.Task | None = None
        self._counts: tuple[int, int] | None = None  # (organic, drill) when the toxic was removed
        #: a running link's record of what the toxic touched, read just before it was removed
        self._remote_ledger: dict | None = None
        self.stopped: str | None = None

    # -- starting ------------------------------------------------------------------------------
    async def start_topology(self, topology: Topology, timeout_s: float = 30.0) -> None:
        """Spawn `topology` with each linked replica's callers pointed at its link's ready file, then start each
        link once its replica serves and write that file (the caller of `topology.wait()` then waits for all)."""
        files = {spec.name: topology.workdir / f"link-{spec.name}.ready.json" for spec in self.specs}
        topology.link_files = {(spec.hop, spec.replica): files[spec.name] for spec in self.specs}
        topology.spawn()
        deadline = time.monotonic() + timeout_s
        for spec in self.specs:
            replica = topology.replicas[spec.hop][spec.replica]
            while not replica.ready_file.exists():
                if replica.proc.poll() is not None:
                    raise LinkStartError(f"link {spec.name}: {replica.name} exited before it served: {replica.why()}")
                if time.monotonic() > deadline:
                    raise LinkStartError(f"link {spec.name}: {replica.name} not ready after {timeout_s:g} s")
                await asyncio.sleep(0.02)
            port = int(json.loads(replica.ready_file.read_text())["port"])  # written whole (os.replace)
            link = await self._add(spec.name, "127.0.0.1:0", f"127.0.0.1:{port}")
            tmp = files[spec.name].with_suffix(".tmp")
            tmp.write_text(json.dumps({"host": "127.0.0.1", "port": link.port, "pid": os.getpid(), "link": spec.name}))
            os.replace(tmp, files[spec.name])
            self.log(f"link {spec.name} 127.0.0.1:{link.port} -> {replica.name} (127.0.0.1:{port})")

    async def start_stack(self) -> None:
        """Each `stack.links` entry on its port, relaying to its upstream; a running one (`admin`) checked."""
        for spec in self.specs:
            if spec.admin is not None:
                running = RunningLink(spec.name, spec.admin)
                toxic = self.fault.toxic_json()["name"] if self.fault is not None else None
                upstream = await asyncio.to_thread(running.check, toxic)
                self.running[spec.name] = running
                self.log(f"link {spec.name} running, driven through {spec.admin} -> {upstream} "
                         f"({spec.hop}-{spec.replica})")  # fmt: skip
                continue
            await self._add(spec.name, f"127.0.0.1:{spec.port}", spec.upstream)
            self.log(f"link {spec.name} 127.0.0.1:{spec.port} -> {spec.upstream} ({spec.hop}-{spec.replica})")

    async def _add(self, name: str, listen: str, upstream: str) -> Link:
        try:
            link = await self.set.add(name, listen, upstream)
        except ToxicError as exc:
            raise LinkStartError(f"link {name}: {exc}") from None
        self.links[name] = link
        return link

    # -- the fault -------------------------------------------------------------------------------
    @property
    def link(self) -> Link | None:
        return self.links.get(self.fault.link) if self.fault is not None else None

    @property
    def remote(self) -> RunningLink | None:
        return self.running.get(self.fault.link) if self.fault is not None else None

    def fault_on(self) -> None:
        """Set the plan's toxic on its link (once per trial; not after the one-way stop)."""
        remote = self.remote
        if remote is not None:
            if self.on_at is None and not self.set.stopped:
                self.on_at = time.time()  # blocking, on the runner's loop: one request, at most ADMIN_TIMEOUT_S
                why = remote.set(self.fault.toxic_json())
                self.log(f"link {remote.name}: {self.fault.describe()} " + (f"NOT set: {why}" if why else
                         f"set through {remote.admin}"))  # fmt: skip
            return
        link = self.link
        if link is None or self.on_at is not None or self.set.stopped:
            return
        toxic = link.add_toxic(parse_toxic(self.fault.toxic_json()))
        self.on_at = time.time()
        self._look(toxic.name)
        self.held = set(self.touched)
        self.held_at_start = len(self.held)
        self._watch = asyncio.get_running_loop().create_task(self._watching(toxic.name))
        self.log(f"link {link.name}: {self.fault.describe()} set on {len(self.held)} of "
                 f"{len(link.connections)} connection(s)")  # fmt: skip

    def _look(self, name: str) -> None:
        """Note each connection the toxic acts on now (with the streams it had), and the held ones that closed."""
        now = time.time()
        for conn in list(self.link.connections):
            if conn not in self.touched and name in conn.acting:
                self.touched[conn] = (conn.h2.organic_count, conn.h2.drill_count)
        for conn in [c for c in self.held if c.done]:
            self.held.discard(conn)
            self.closed_s.append(round(now - self.on_at, 3))

    async def _watching(self, name: str) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            self._look(name)

    def fault_off(self) -> None:
        """Remove the toxic (at the fault's end, or a guard's trip); what it touched is counted up to now."""
        remote = self.remote
        if remote is not None:
            if self.on_at is not None and self.off_at is None:
                name = self.fault.toxic_json()["name"]
                self._remote_ledger, why_not = remote.touched(name)  # up to now: then it goes
                if why_not:
                    self.log(f"link {remote.name}: what the toxic touched NOT read: {why_not}")
                self.off_at = time.time()
                why = remote.remove(name)
                self.log(f"link {remote.name}: toxic " + (f"NOT removed: {why}" if why else
                         f"removed through {remote.admin}"))  # fmt: skip
            return
        link = self.link
        if link is None or self.on_at is None or self.off_at is not None:
            return
        name = self.fault.toxic_json()["name"]
        self._look(name)
        self._stop_watching()
        self.off_at = time.time()
        if name in link.toxics:
            link.remove_toxic(name)
        self._counts = self._count()

    def _stop_watching(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def stop(self, reason: str) -> str:
        """The one-way stop (a guard tripped): every toxic removed at once, none set again this trial."""
        self.fault_off()
        self.set.stop(reason)
        self.stopped = reason
        return f"every link toxic removed ({len(self.links) + len(self.running)} link(s))"

    def _count(self) -> tuple[int, int]:
        organic = sum(c.h2.organic_count - o for c, (o, _) in self.touched.items())
        drill = sum(c.h2.drill_count - d for c, (_, d) in self.touched.items())
        return organic, drill

    def _remote_counts(self) -> tuple[int, int, int, int, list[float], bool] | None:
        """From a running link's record: (connections, held at start, organic, drill, closed_s, all held closed)."""
        ledger = self._remote_ledger
        if ledger is None:
            return None
        records = ledger["connections"]
        held = [r for r in records if r.get("open_at_start")]
        closed = sorted(r["closed_s"] for r in held if r.get("closed_s") is not None)

        def calls(kind: str) -> int:
            return sum(r["streams"][kind] - r["streams_before"][kind] for r in records if r.get("streams"))

        return (len(records) + int(ledger.get("left_off") or 0), len(held), calls("organic"), calls("drill"), closed,
                len(closed) == len(held))  # fmt: skip

    def summary(self) -> dict | None:
        """What results.json says of the trial's link fault (None without one, or when a running link's record
        could not be read)."""
        if self.fault is None:
            return None
        if self.remote is not None:
            counted = self._remote_counts()
            if counted is None:
                return None
            faulted, held_at_start, organic, drill, closed_s, all_closed = counted
            resolution = None
        else:
            organic, drill = self._counts or self._count()
            faulted, held_at_start, closed_s = len(self.touched), self.held_at_start, sorted(self.closed_s)
            all_closed, resolution = not self.held, POLL_S
        detected = max(closed_s) if held_at_start and all_closed else None
        out = {
            "link": self.fault.link, "toxic": self.fault.describe(), "mode": self.fault.mode,
            "set": self.on_at is not None, "connections_faulted": faulted,
            "connections_held_at_start": held_at_start, "calls_touched": {"organic": organic, "drill": drill},
            "closed_s": closed_s, "detected_s": detected, "resolution_s": resolution,
            "acted_s": round(self.off_at - self.on_at, 3) if self.on_at is not None and self.off_at else None,
            "stopped": self.stopped,
        }  # fmt: skip
        expect = self.fault.expect
        if expect is not None:
            out["expect"] = {"detect_within_s": expect.detect_within_s,
                             "met": detected is not None and detected <= expect.detect_within_s}  # fmt: skip
        return out

    async def close(self) -> None:
        self._stop_watching()
        if self.remote is not None and self.on_at is not None and self.off_at is None:
            await asyncio.to_thread(self.fault_off)  # a trial that ended inside its fault leaves no toxic set
        await self.set.close()
