"""A stack: services the runner did not start (contracts §13) — where the load calls, where each hop's series
come from, how each configuration is switched on and when it is ready, the services' audit lines, an
external load and the emergency stop."""

from __future__ import annotations

from pydantic import Field, model_validator

from harness.core import limits as lim
from harness.drills.plan.base import HOP_NAME, Section
from harness.drills.plan.links import StackLink, check_links

#: The most processes a stack may ask the runner to start per trial (a chain of a dozen hops with a tap or proxy
#: beside each is 24: a bound on what one trial may leave to clean up, not a limit of the design)
MAX_PROCESSES = 24

#: What an edge field that does not match its pattern should look like, in words (for error lines)
EDGE_FORMS = {"address": "expected HOST:PORT", "method": "expected a full method name, package.Service/Method"}


class EdgeSpec(Section):
    """What the load calls: an address, a full method of any kind and a JSON request typed like ghz/grpcurl
    take it (for a client-streaming or bidi method, the stream's messages in order)."""

    #: HOST:PORT the load calls (a port-forward for a cluster)
    address: str = Field(pattern=r"^[^\s:]+:\d+$")
    #: full method name, `pkg.Service/Method`
    method: str = Field(pattern=r"^/?[A-Za-z_][\w.]*/[A-Za-z_]\w*$")
    #: the request as JSON (protobuf's JSON mapping); {} = the default message. For a client-streaming or bidi
    #: method a list of messages, sent in order (an object alone is a stream of one, [] a stream of none)
    request: dict | list[dict] = Field(default_factory=dict)
    #: messages/s within a client stream: message i leaves i / rate s after the call starts (None: each as
    #: soon as the stream takes it). Only for a client-streaming or bidi method.
    message_rate: float | None = Field(None, gt=0, le=lim.MAX_MESSAGE_RATE)
    #: where the request's type comes from: a .proto file (needs grpcio-tools), a descriptor set
    #: (`protoc --include_imports --descriptor_set_out=FILE`), or the server's reflection (default); with
    #: `stack.proxy`, the proxy's proto or descriptor set when the edge names neither
    proto: str | None = None
    descriptor_set: str | None = None
    #: import path for `proto` (default: the .proto's folder)
    proto_path: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_type_source(self) -> EdgeSpec:
        if self.proto and self.descriptor_set:
            raise ValueError("give proto or descriptor_set, not both (neither = server reflection)")
        return self


class StackHop(Section):
    """One hop of a running stack, in chain order: where its series come from."""

    name: str = Field(min_length=1, pattern=HOP_NAME)
    #: its replicas' /metrics URLs, scraped by the runner each second
    metrics: list[str] = Field(default_factory=list)
    #: or a PromQL label selector read from `stack.prometheus` after each trial, e.g. {namespace="d", app="x"}
    selector: str | None = Field(None, pattern=r"^\{.*\}$")
    #: a tap (`drill proxy --tap`): injection off by design, it forwards the drill's keys untouched, so the
    #: preflight does not ask it to inject even in front of the target; its readings are the hop's
    tap: bool = False

    @model_validator(mode="after")
    def _one_source(self) -> StackHop:
        if bool(self.metrics) == bool(self.selector):
            raise ValueError(f"hop {self.name!r}: give metrics (URLs) or selector (read from stack.prometheus)")
        for url in self.metrics:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"hop {self.name!r}: {url!r} is not an http:// URL")
        return self


class ReadyProbe(Section):
    """The edge serves a configuration once its gRPC health check passed `checks` times in a row."""

    checks: int = Field(3, ge=1, le=100)
    timeout_s: float = Field(60.0, gt=0, le=lim.MAX_WAIT_S)
    interval_s: float = Field(1.0, gt=0, le=60)


class StackConfig(Section):
    """One configuration of a stack and how to switch the stack to it."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    #: shell command the runner runs (with a timeout) before each trial of this configuration; it returns
    #: once the stack serves it (e.g. `kubectl apply -k … && kubectl rollout status …`). None: nothing to switch.
    switch: str | None = None
    switch_timeout_s: float = Field(300.0, gt=0, le=lim.MAX_WAIT_S)
    ready: ReadyProbe = ReadyProbe()


class AuditSource(Section):
    """Where the stack's audit lines can be read after a trial: the hit set the services themselves report."""

    #: globs of log files on this machine holding the services' audit lines
    files: list[str] = Field(default_factory=list)
    #: or a command that prints them (e.g. `kubectl -n drill logs -l app=ledger --since=10m`)
    command: str | None = None
    timeout_s: float = Field(60.0, gt=0, le=600)

    @model_validator(mode="after")
    def _one(self) -> AuditSource:
        if bool(self.files) == bool(self.command):
            raise ValueError("audit: give files (globs) or command")
        return self


class ExternalLoad(Section):
    """A Locust (or any load speaking the `--drill-*` options) the runner starts per trial with a command.

    The command gets the trial in `LOCUST_DRILL_*` variables (what Locust reads for each `--drill-*` option:
    plan, config, trial, phases, directive, ratio, target, tenant, seed, users, weights, rates, timeout) and
    `DRILL_CONFIG`/`DRILL_TRIAL`; it may run the load itself (until its phases end) or start it elsewhere
    (`kubectl apply -k deploy/k8s/load`) and return. Its client counters are read from `metrics` (/metrics
    URLs of its master and workers, scraped each second) or `selector` (from `stack.prometheus`).
    """

    command: str
    stop: str | None = None
    metrics: list[str] = Field(default_factory=list)
    selector: str | None = Field(None, pattern=r"^\{.*\}$")
    #: how long its timeline may take to start (image pulls, worker joins) before the trial fails
    start_timeout_s: float = Field(120.0, gt=0, le=lim.MAX_WAIT_S)

    @model_validator(mode="after")
    def _one_source(self) -> ExternalLoad:
        if bool(self.metrics) == bool(self.selector):
            raise ValueError("load: give metrics (its /metrics URLs) or selector (read from stack.prometheus)")
        return self


class ProxyFront(Section):
    """`drill proxy` the runner starts in front of a service it is given, for each trial (contracts §15).

    The service may be written in any language and is left unchanged: the proxy is the edge the load calls
    (`stack.edge.address` is 127.0.0.1:`port`, filled in when left out, and the edge's request is typed by the
    proxy's `proto`/`descriptor_set` when it names none of its own), the hop named `service` reads the
    proxy's /metrics (filled in when the hop names no source), and, without `stack.audit`, the proxy's
    audit lines of each trial are its hits. It runs with injection on, the plan's seed and fault tenant."""

    #: HOST:PORT of the service every call is forwarded to (the only address the proxy calls)
    upstream: str = Field(pattern=r"^[^\s:]+:\d+$")
    #: the hop the proxy stands for: its `--service` (what `fault.target` names)
    service: str = Field(pattern=HOP_NAME)
    #: the proxy's gRPC port on 127.0.0.1 (the edge) and its /metrics port
    port: int = Field(ge=1, le=lim.MAX_PORT)
    metrics_port: int = Field(ge=1, le=lim.MAX_PORT)
    #: each method's kind (so `@after`/`@read` are judged as in process): a descriptor set or a .proto;
    #: neither = the service's reflection, or the wire. The edge takes it too when it names neither
    descriptor_set: str | None = None
    proto: str | None = None
    #: import paths for `proto` (default: the .proto's folder); the edge takes them with the proto
    proto_path: list[str] = Field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"


class ProcessReady(Section):
    """When a process the runner started serves: a TCP port on 127.0.0.1 accepts connections, or a file exists
    (a path in the trial's output folder, the process's working directory, unless absolute). One of the two."""

    port: int | None = Field(None, ge=1, le=lim.MAX_PORT)
    file: str | None = Field(None, min_length=1)
    #: how long it may take before the trial fails (exit 1)
    timeout_s: float = Field(30.0, gt=0, le=lim.MAX_WAIT_S)

    @model_validator(mode="after")
    def _one(self) -> ProcessReady:
        if (self.port is None) == (self.file is None):
            raise ValueError("ready: give port (a TCP port on 127.0.0.1) or file (a path it writes once serving)")
        return self


class StackProcess(Section):
    """A local process the runner starts before each trial, in list order, and stops (its process group) after.

    `command` runs under /bin/sh in the trial's output folder (its output is NAME.log there) with `DRILL_CONFIG`
    (the configuration's name: what switches it, e.g. `-service-config $DRILL_PLAN_DIR/$DRILL_CONFIG.json`),
    `DRILL_TRIAL`, `DRILL_PLAN_DIR` (the plan file's folder), `DRILL_OUT` (the trial's output folder),
    `DRILL_PYTHON` (the Python running the drill: `"$DRILL_PYTHON" -m harness.cli proxy …` is this drill) and
    `env` in its environment."""

    name: str = Field(min_length=1, pattern=HOP_NAME)
    command: str = Field(min_length=1)
    ready: ProcessReady
    env: dict[str, str] = Field(default_factory=dict)
    #: its log holds the drill's audit lines (a `drill proxy` with injection on, a `drill serve`): without
    #: `stack.audit`, the trial's hits are the `fault_hit` lines of these processes' logs
    audit: bool = False


class Stack(Section):
    """Services the runner did not start: the edge, the hops' series, the configurations' switches."""

    edge: EdgeSpec
    hops: tuple[StackHop, ...] = Field(min_length=1)
    #: Prometheus base URL for hops given by `selector`
    prometheus: str | None = Field(None, pattern=r"^https?://")
    #: the services' audit lines (their own word on which requests they hit); without it, the hits are the
    #: calls answered with the `x-drill-fault` marker (set by the hop that injects, when that is the edge)
    audit: AuditSource | None = None
    #: one entry per configuration; a stack without switch commands runs one, named by the user
    configs: tuple[StackConfig, ...] = Field(default_factory=lambda: (StackConfig(name="stack"),), min_length=1)
    #: a load started per trial by a command (default: the runner's own aio load to the edge)
    load: ExternalLoad | None = None
    #: shell command that trips the services' one-way emergency stop when a guard trips (e.g.
    #: `docker compose -f compose/docker-compose.yml kill -s SIGUSR1 gateway order account ledger`); the
    #: services then inject nothing until they restart. None: only the load's directive is stopped
    emergency_stop: str | None = None
    #: a `drill proxy` the runner starts in front of the service (a service in any language, unchanged)
    proxy: ProxyFront | None = None
    #: `drill link`s the runner starts for each trial in front of replicas (the stack's callers dial their ports)
    links: tuple[StackLink, ...] = ()
    #: local processes the runner starts before each trial, in this order, and stops after it (a chain of
    #: services in any language, proxies and taps: harness.drills.stack.processes)
    processes: tuple[StackProcess, ...] = Field((), max_length=MAX_PROCESSES)

    @model_validator(mode="before")
    @classmethod
    def _proxy_fills_in(cls, data):
        """With a runner-started proxy, the edge's address, its request's type source and the proxy's hop's
        /metrics are the proxy's unless given: here, in the model, so the dry run, the runner and a Locust user
        fed the stack's edge (`LOCUST_DRILL_PROTO`, …) all see the same edge."""
        proxy = data.get("proxy") if isinstance(data, dict) else None
        if not isinstance(proxy, dict):
            return data
        data = dict(data)
        if isinstance(data.get("edge"), dict):
            edge = dict(data["edge"])
            if isinstance(proxy.get("port"), int):
                edge.setdefault("address", f"127.0.0.1:{proxy['port']}")
            # the proxy's proto or descriptor set types the edge's request too (one file named once); when the
            # proxy names both, that is its own error (below), not the edge's
            given = [k for k in ("proto", "descriptor_set") if proxy.get(k)]
            if len(given) == 1 and not edge.get("proto") and not edge.get("descriptor_set"):
                edge[given[0]] = proxy[given[0]]
                if given == ["proto"] and proxy.get("proto_path") and not edge.get("proto_path"):
                    edge["proto_path"] = proxy["proto_path"]
            data["edge"] = edge
        if isinstance(data.get("hops"), list | tuple) and isinstance(proxy.get("metrics_port"), int):
            url = f"http://127.0.0.1:{proxy['metrics_port']}/metrics"
            data["hops"] = [
                {**h, "metrics": [url]} if isinstance(h, dict) and h.get("name") == proxy.get("service")
                and not h.get("metrics") and not h.get("selector") else h for h in data["hops"]
            ]  # fmt: skip
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Stack:
        names = [h.name for h in self.hops]
        if len(set(names)) != len(names):
            raise ValueError(f"hop names must be unique: {names}")
        configs = [c.name for c in self.configs]
        if len(set(configs)) != len(configs):
            raise ValueError(f"configuration names must be unique: {configs}")
        if (any(h.selector for h in self.hops) or (self.load and self.load.selector)) and not self.prometheus:
            raise ValueError("a selector (hops or load) needs stack.prometheus (the Prometheus to read it from)")
        procs = [p.name for p in self.processes]
        if len(set(procs)) != len(procs):
            raise ValueError(f"process names must be unique: {procs}")
        ports = [p.ready.port for p in self.processes if p.ready.port is not None]
        if len(set(ports)) != len(ports):
            raise ValueError(f"processes: two processes are ready on the same port: {sorted(ports)}")
        if self.proxy is not None:
            px = self.proxy
            if self.edge.address != px.address:
                raise ValueError(f"the edge is the proxy the runner starts: leave edge.address out or give "
                                 f"{px.address} (proxy.port), not {self.edge.address}")  # fmt: skip
            if px.service not in names:
                raise ValueError(f"proxy.service {px.service!r} names no hop ({', '.join(names)})")
            if px.port == px.metrics_port:
                raise ValueError(f"proxy.port and proxy.metrics_port are both {px.port}")
            if px.descriptor_set and px.proto:
                raise ValueError("proxy: give descriptor_set or proto, not both (neither = the service's reflection)")
            if px.proto_path and not px.proto:
                raise ValueError("proxy.proto_path applies to proxy.proto: give proto too")
        check_links(self.links, dict.fromkeys(names), None)  # a stack's replica counts are its own
        # a running link (`admin`) binds nothing of the runner's: only the links the runner starts need a port
        ports = [link.port for link in self.links if link.port is not None] + (
            [self.proxy.port, self.proxy.metrics_port] if self.proxy else [])
        if len(set(ports)) != len(ports):
            raise ValueError(f"stack.links and stack.proxy need a port each: {sorted(ports)}")
        return self
