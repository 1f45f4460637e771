"""What a drill runs against: the demo chain the runner starts itself, or services already running (contracts §13).

One runner drives both through the same questions, so trials, phases, scraping,
analysis, report and `--fail-on` are one code path:

- `up(variant, trial, workdir)`: make the stack serve this configuration. The local
  topology starts one `drill serve` per replica with it; a running stack runs the
  configuration's `switch` command (bounded, in its own process group) and waits
  until the edge's gRPC health check passes N times in a row.
- `edge()`, `edge_call(variant)`: where the load goes and what it calls (the demo's
  method, or the stack's method with a request built from JSON and a type from a
  .proto, a descriptor set or server reflection: harness.drills.stack.edge).
- `endpoints()`: /metrics URLs the runner scrapes each second; `selectors()`: hops
  read from Prometheus after each trial instead (a stack that is already scraped).
- `crashed()`, `down()`, `audit_hits(workdir)`: what only a stack the runner started
  can tell (a running stack's hits come from the `x-drill-fault` trailers the load got).
- `emergency_stop(workdir, trial)`: a guard tripped; trip the services' one-way stop where
  the runner reaches them (its own replicas by SIGUSR1, a stack by its `emergency_stop`
  command); None when nothing reaches them.

A stack with `stack.proxy` gets a `drill proxy` per trial (`RunningStack.start_proxy`, which the dry run
calls too): the service behind it is asked first (`check_upstream`, a few seconds at most), then the
proxy's ports, each problem one line naming its plan key.
"""

from __future__ import annotations

import asyncio
import glob
import os
import pathlib
import signal
import time
from collections.abc import Callable
from typing import Protocol

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from harness.core.audit import hit_ids
from harness.core.environ import environ_now
from harness.core.errors import RunFailed
from harness.core.headers import DEFAULT_DRILL_TENANT
from harness.drills.plan.model import Plan, Variant
from harness.drills.plan.stack import ProxyFront, Stack, StackConfig
from harness.drills.stack.edge import EdgeCall, Reach, demo_edge, reach, resolve_edge
from harness.drills.stack.links import LinkStartError, TrialLinks
from harness.drills.stack.topology import Topology, audit_hit_ids
from harness.procs.spawn import ServeError, ServeProcess, kill_group, last_line, start_serve

#: How long a stack's emergency stop command may run before it is stopped.
EMERGENCY_STOP_TIMEOUT_S = 60.0


class StackError(RunFailed):
    """A switch command or readiness check failed: the run stops (exit 1) and says how far it got."""


class DrillTarget(Protocol):
    """What the runner asks of the stack it drills."""

    kind: str

    async def up(self, variant: Variant, trial: int, workdir: pathlib.Path) -> None: ...

    def edge(self) -> list[str]: ...

    def edge_call(self, variant: Variant) -> EdgeCall: ...

    def endpoints(self) -> list[tuple[str, str]]: ...

    def selectors(self) -> dict[str, str]: ...

    def crashed(self) -> list[str]: ...

    async def audit_hits(self, workdir: pathlib.Path, since: float, until: float) -> set[str] | None: ...

    async def emergency_stop(self, workdir: pathlib.Path, trial: int) -> str | None: ...

    async def down(self) -> None: ...


class LocalTopology:
    """The demo chain of `drill serve` processes, started for every trial with that trial's configuration."""

    kind = "topology"

    def __init__(self, plan: Plan, log=print) -> None:
        self.plan = plan
        self.log = log
        self.topology: Topology | None = None
        #: the trial's links in front of replicas (`topology.links`; None when the plan has none)
        self.links: TrialLinks | None = None

    async def up(self, variant: Variant, trial: int, workdir: pathlib.Path) -> None:
        plan = self.plan
        self.links = None
        self.topology = Topology(
            variant.hops, config=variant.config, seed=plan.seed, workdir=workdir, tenants=variant.fault.tenant,
            timeout_s=plan.timeout_s,
        )  # fmt: skip
        if not plan.links:
            self.topology.start()  # in the main thread: PR_SET_PDEATHSIG is tied to the forking thread
        else:  # each link once its replica serves, before the hop above (waiting for the link's file) can
            self.links = TrialLinks(plan.links, variant.fault.link, seed=plan.seed, tenant=variant.fault.tenant,
                                    log=lambda text: self.log(f"[{variant.name}] {text}"))  # fmt: skip
            try:
                await self.links.start_topology(self.topology)
            except LinkStartError as exc:
                await self.down()
                raise StackError(str(exc)) from None
            except BaseException:
                await self.down()
                raise
            self.topology.wait()
        self.log(f"[{variant.name}] topology up: {' → '.join(f'{h.name}×{h.replicas}' for h in variant.hops)}")

    def edge(self) -> list[str]:
        return self.topology.edge if self.topology else []

    def edge_call(self, variant: Variant) -> EdgeCall:
        return demo_edge(variant.traffic.method)

    def endpoints(self) -> list[tuple[str, str]]:
        return self.topology.endpoints() if self.topology else []

    def selectors(self) -> dict[str, str]:
        return {}

    def crashed(self) -> list[str]:
        return self.topology.crashed() if self.topology else []

    async def audit_hits(self, workdir: pathlib.Path, since: float, until: float) -> set[str] | None:
        return audit_hit_ids(workdir)  # this trial's own processes: every line is the trial's

    async def emergency_stop(self, workdir: pathlib.Path, trial: int) -> str | None:
        """A guard tripped: SIGUSR1 to every replica this trial started (injection off for their life, held
        calls released at once). A process is signalled only once it handles SIGUSR1 (`drill stop`'s rule)."""
        from harness.demo.stop import catches

        replicas = [r for rs in (self.topology.replicas if self.topology else {}).values() for r in rs]
        links = f"; {self.links.stop('guard')}" if self.links is not None else ""  # first: no wait
        sent = []
        for r in replicas:
            if r.proc.poll() is None and catches(r.proc.pid):
                os.kill(r.proc.pid, signal.SIGUSR1)
                sent.append(r.name)
        return f"SIGUSR1 to {len(sent)} of {len(replicas)} replicas ({', '.join(sent)}){links}"

    async def down(self) -> None:
        if self.topology is not None:
            await asyncio.to_thread(self.topology.stop)
        self.topology = None
        if self.links is not None:
            await self.links.close()  # after the callers: their connections end with them


def proxy_args(px: ProxyFront, seed: int) -> list[str]:
    """`drill proxy`'s options for `stack.proxy`: injection on, the plan's seed, the method kinds from its files."""
    args = ["--upstream", px.upstream, "--port", str(px.port), "--metrics-port", str(px.metrics_port),
            "--service", px.service, "--enable-faults", "--seed", str(seed)]  # fmt: skip
    if px.descriptor_set:
        args += ["--descriptor-set", px.descriptor_set]
    if px.proto:
        args += ["--proto", px.proto, *(a for d in px.proto_path for a in ("--proto-path", d))]
    return args


class RunningStack:
    """Services the runner did not start: switched per configuration by the user's commands."""

    kind = "stack"

    def __init__(self, stack: Stack, log=print, *, seed: int = 0, tenant: str = DEFAULT_DRILL_TENANT) -> None:
        self.stack = stack
        self.log = log
        self.seed, self.tenant = seed, tenant
        self._edge_call: EdgeCall | None = None
        self.switches: list[str] = []
        #: the `drill proxy` this trial runs in front of the service (`stack.proxy`), and its log
        self._proxy: ServeProcess | None = None
        self._proxy_log: pathlib.Path | None = None
        #: the trial's links (`stack.links`; None when the stack has none)
        self.links: TrialLinks | None = None

    def _config(self, name: str) -> StackConfig:
        return next(c for c in self.stack.configs if c.name == name)

    async def up(self, variant: Variant, trial: int, workdir: pathlib.Path) -> None:
        config = self._config(variant.name)
        workdir.mkdir(parents=True, exist_ok=True)
        self.links = None
        if self.stack.links:  # before the switch: the services it starts dial them
            self.links = TrialLinks(self.stack.links, variant.fault.link, seed=self.seed, tenant=self.tenant,
                                    log=lambda text: self.log(f"[{config.name}] {text}"))  # fmt: skip
            try:
                await self.links.start_stack()
            except LinkStartError as exc:
                await self.links.close()
                raise StackError(f"stack.links: {exc}") from None
        if config.switch:
            self.log(f"[{config.name}] switching the stack (at most {config.switch_timeout_s:g} s): {config.switch}")
            await run_switch(config, trial, workdir / "switch.log")
        self.switches.append(config.name)
        if self.stack.proxy is not None:
            await asyncio.to_thread(self.start_proxy, workdir)
        await wait_ready(self.stack.edge.address, config, say=lambda text: self.log(f"[{config.name}] {text}"))
        self.log(f"[{config.name}] the edge {self.stack.edge.address} serves ({config.ready.checks} health checks)")

    def edge(self) -> list[str]:
        return [self.stack.edge.address]

    def edge_call(self, variant: Variant) -> EdgeCall:
        if self._edge_call is None:  # typed once the edge serves: reflection needs it up (the aio load only)
            self._edge_call = resolve_edge(self.stack.edge)
        return self._edge_call

    def use_call(self, call: EdgeCall) -> None:
        """The edge call the preflight already resolved (from a file, or by reflection once the edge served)."""
        self._edge_call = call

    def endpoints(self) -> list[tuple[str, str]]:
        return [(h.name, url) for h in self.stack.hops for url in h.metrics]

    def selectors(self) -> dict[str, str]:
        return {h.name: h.selector for h in self.stack.hops if h.selector}

    def crashed(self) -> list[str]:
        return []

    def start_proxy(self, workdir: pathlib.Path) -> None:
        """`drill proxy` in front of the service for this trial: injection on, the plan's seed and tenant.

        The run and the dry run both start it here, so both ask first what would make it useless or fail, each
        said on one line in terms of the plan: the service behind it (`check_upstream`: refused, silent, not
        gRPC — at once, not after the edge's readiness wait), then its two ports (`stack.proxy.port`,
        `stack.proxy.metrics_port`) free on 127.0.0.1. Blocking: the runner calls it off the event loop."""
        px = self.stack.proxy
        seen = check_upstream(px.upstream)
        ports = (("stack.proxy.port", px.port), ("stack.proxy.metrics_port", px.metrics_port))
        for key, port in ports:
            if taken := port_taken(port):
                raise StackError(f"{key} 127.0.0.1:{port} is in use ({taken}): the runner cannot start drill proxy "
                                 "there; stop what listens on it (an earlier proxy: drill stop --all-local) or give "
                                 f"{key} a free port")  # fmt: skip
        args = proxy_args(px, self.seed)
        self.log(f"starting drill proxy {px.address} -> {px.upstream} (service {px.service}); the upstream {seen}")
        try:
            self._proxy = start_serve("proxy", args, workdir, {"DRILL_FAULT_TENANTS": self.tenant}, command="proxy")
        except ServeError as exc:
            for key, port in ports:  # taken between the check above and the proxy's bind: still named by its key
                if taken := port_taken(port):
                    raise StackError(f"{key} 127.0.0.1:{port} is in use ({taken}): drill proxy could not start "
                                     f"there ({exc})") from None  # fmt: skip
            raise StackError(f"drill proxy in front of {px.upstream} did not start: {exc}") from None
        self._proxy_log = self._proxy.log_path

    async def audit_hits(self, workdir: pathlib.Path, since: float, until: float) -> set[str] | None:
        """The hits the services' audit lines report for [since, until]: `stack.audit`, else the runner's
        proxy's own lines, else None."""
        audit = self.stack.audit
        if audit is None and self._proxy_log is not None:
            with open(self._proxy_log, errors="replace") as fh:
                return hit_ids(fh, since, until)
        if audit is None:
            return None
        if audit.files:
            lines: list[str] = []
            for pattern in audit.files:
                for path in sorted(glob.glob(pattern)):
                    with open(path, errors="replace") as fh:
                        lines += fh.readlines()
            return hit_ids(lines, since, until)
        log_path = workdir / "audit.out"
        with open(log_path, "wb") as out:
            proc = await asyncio.create_subprocess_shell(
                audit.command, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
            try:
                code = await asyncio.wait_for(proc.wait(), audit.timeout_s)
            except (TimeoutError, asyncio.TimeoutError):
                kill_group(proc.pid)
                await proc.wait()
                raise StackError(f"audit command did not finish in {audit.timeout_s:g} s: {audit.command}") from None
        if code != 0:
            raise StackError(f"audit command failed (exit {code}): {audit.command} (output: {log_path})")
        with open(log_path, errors="replace") as fh:
            return hit_ids(fh, since, until)

    async def emergency_stop(self, workdir: pathlib.Path, trial: int) -> str | None:
        """A guard tripped: run `stack.emergency_stop` (bounded, in its own process group); None without one."""
        command = self.stack.emergency_stop
        links = self.links.stop("guard") if self.links is not None else None  # first: no wait
        if not command:
            return links
        workdir.mkdir(parents=True, exist_ok=True)
        log_path = workdir / "emergency-stop.log"
        env = environ_now(DRILL_TRIAL=str(trial))
        with open(log_path, "ab") as log:
            proc = await asyncio.create_subprocess_shell(
                command, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True
            )
            try:
                code = await asyncio.wait_for(proc.wait(), EMERGENCY_STOP_TIMEOUT_S)
            except (TimeoutError, asyncio.TimeoutError):
                kill_group(proc.pid)
                await proc.wait()
                return f"emergency stop command did not finish in {EMERGENCY_STOP_TIMEOUT_S:g} s (log: {log_path})"
            except asyncio.CancelledError:
                kill_group(proc.pid)
                raise
        said = "ran" if code == 0 else f"failed (exit {code}: {last_line(log_path)})"
        return f"emergency stop command {said}: {command} (log: {log_path})" + (f"; {links}" if links else "")

    async def down(self) -> None:
        # the stack stays as the last switch left it (the next trial switches it again); a proxy the runner
        # started for the trial stops with it (its log stays: the trial's audit lines)
        if self._proxy is not None:
            proxy, self._proxy = self._proxy, None
            await asyncio.to_thread(proxy.stop)
        if self.links is not None:
            await self.links.close()  # kept for the trial's summary


#: How long the upstream check waits for a TCP connection, then for the server's first HTTP/2 frame on it (a
#: gRPC server sends its SETTINGS at once, in one segment): one connection (`edge.reach`), so the check of an IP
#: address takes at most 1.5 + 1 = 2.5 s, under the 5 s a wrong upstream may cost (a host name adds its
#: resolution, and a try per address it resolves to). A port nobody listens on on a reachable host is refused
#: at once (the kernel's RST), well inside it.
UPSTREAM_CONNECT_S = 1.5
UPSTREAM_ANSWER_S = 1.0
#: The most `check_upstream` takes, derived above.
UPSTREAM_CHECK_S = UPSTREAM_CONNECT_S + UPSTREAM_ANSWER_S


def check_upstream(address: str, key: str = "stack.proxy.upstream") -> str:
    """The service behind `stack.proxy` answers on `address` as a gRPC server does, said in words (`accepts a
    connection and answers HTTP/2`); StackError (exit 1: the stack is down, as for an edge that is down) with one
    line naming `key` when it refuses the connection, stays silent, cannot be resolved, or answers otherwise
    than gRPC (the proxy forwards plaintext HTTP/2, never TLS). At most UPSTREAM_CHECK_S."""
    how, detail = reach(address, UPSTREAM_CONNECT_S, UPSTREAM_ANSWER_S)
    if how is Reach.GRPC:
        return f"{address} accepts a connection and answers HTTP/2"
    if how is Reach.SILENT:  # connected, silent so far: nothing more to tell in the time we allow
        return f"{address} accepts a connection (it sent no HTTP/2 settings within {UPSTREAM_ANSWER_S:g} s)"
    host = address.rpartition(":")[0]
    raise StackError({
        Reach.REFUSED: f"{key} {address} refused the connection: is the service up?",
        Reach.NO_CONNECTION: f"{key} {address} did not accept a connection within {UPSTREAM_CONNECT_S:g} s: is the "
                             "service up, and reachable from this machine?",
        Reach.UNRESOLVED: f"{key} {address}: cannot resolve {host!r} ({detail})",
        Reach.ERROR: f"{key} {address}: cannot connect ({detail})",
        Reach.NOT_GRPC: f"{key} {address} accepted the connection but does not answer as a gRPC server (no HTTP/2 "
                        "settings in reply to a client's preface; the proxy forwards plaintext gRPC, not TLS): is it "
                        "the service's gRPC port?",
    }[how])  # fmt: skip


def port_taken(port: int, host: str = "127.0.0.1") -> str | None:
    """Why `host:port` cannot be bound now (the OS's words), or None when it can: bound as gRPC and the metrics
    server bind it (SO_REUSEADDR, so the last trial's connections in TIME_WAIT do not count; a listener does)."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def target_for(plan: Plan, log=print) -> DrillTarget:
    if plan.stack is None:
        return LocalTopology(plan, log)
    if plan.stack.processes:  # a chain the runner starts per trial (it builds on RunningStack: imported here)
        from harness.drills.stack.processes import ChainedStack

        return ChainedStack(plan, log)
    return RunningStack(plan.stack, log, seed=plan.seed, tenant=plan.fault.tenant)


async def run_switch(config: StackConfig, trial: int, log_path: pathlib.Path) -> None:
    """Run a configuration's switch command in its own process group, bounded by its timeout."""
    env = environ_now(DRILL_CONFIG=config.name, DRILL_TRIAL=str(trial))
    with open(log_path, "ab") as log:
        proc = await asyncio.create_subprocess_shell(
            config.switch, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True
        )
        try:
            code = await asyncio.wait_for(proc.wait(), config.switch_timeout_s)
        except (TimeoutError, asyncio.TimeoutError):
            kill_group(proc.pid)
            await proc.wait()
            raise StackError(
                f"switch to {config.name} did not finish in {config.switch_timeout_s:g} s (stopped): "
                f"{last_line(log_path)} (log: {log_path}); the stack may be partly switched to {config.name}"
            ) from None
        except asyncio.CancelledError:
            kill_group(proc.pid)
            raise
    if code != 0:
        raise StackError(
            f"switch to {config.name} failed (exit {code}): {last_line(log_path)} (log: {log_path}); "
            f"the stack may be partly switched to {config.name}"
        )


#: How often a wait for the edge says it is still waiting (and what the last check saw).
WAIT_PROGRESS_S = 5.0


async def wait_ready(address: str, config: StackConfig, say: Callable[[str], None] | None = None) -> None:
    """The edge's gRPC health check (service "") SERVING `checks` times in a row, within the timeout.

    A server without the health service answers UNIMPLEMENTED: it is up and speaks gRPC, which is all a
    check can tell of it, so that counts as serving. `say` hears at once what is awaited and for how long at
    most, then every `WAIT_PROGRESS_S` while it is not there yet: a stack that is down is never a silent wait.
    """
    ready = config.ready
    started = time.monotonic()
    deadline = started + ready.timeout_s
    streak, last = 0, "no answer yet"
    said = started
    if say is not None:
        say(f"waiting for the edge {address} to pass its gRPC health check {ready.checks} time"
            f"{'s' if ready.checks > 1 else ''} in a row (at most {ready.timeout_s:g} s)")  # fmt: skip
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=min(2.0, ready.timeout_s))
                ok = reply.status == health_pb2.HealthCheckResponse.SERVING
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            except grpc.aio.AioRpcError as err:
                ok, last = err.code() == grpc.StatusCode.UNIMPLEMENTED, f"{err.code().name}: {err.details()}"
            streak = streak + 1 if ok else 0
            if streak >= ready.checks:
                return
            now = time.monotonic()
            if say is not None and now - said >= WAIT_PROGRESS_S and now < deadline:
                said = now
                say(f"still waiting for the edge {address}: {now - started:.0f} of {ready.timeout_s:g} s "
                    f"(last: {last})")  # fmt: skip
            if time.monotonic() >= deadline:
                raise StackError(
                    f"{config.name}: the edge {address} did not pass {ready.checks} health checks in a row within "
                    f"{ready.timeout_s:g} s (last: {last})"
                )
            await asyncio.sleep(ready.interval_s)


