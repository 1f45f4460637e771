"""A real, short drill observed by a real Prometheus running the compose rules.

Topology: `drill serve` subprocesses with faults on, two callers sharing one leaf:
`gateway --config resilient` -> `leaf` (retries, a breaker quick enough to open and close
within the drill) and `edge --config budget` -> `leaf` (retries until the budget runs out, and
adaptive throttling over 1 s), and a `shed` hop with room for one call and no
queue (`--admission`: shed calls are counted), which sheds whenever two organic users' calls
overlap (its 200-ms work makes them overlap). Traffic comes from this process through `DrillClientInterceptor`
(service label `loadgen`): organic users, drill users whose directive changes with
the phase (`abort:UNAVAILABLE` aimed at the leaf during the fault), actively
cancelled calls, dropped calls behind a short deadline (deadline gaps), delayed
calls, a malformed directive (rejected) and a non-drill tenant (skipped). This
process also exports `drill_phase` / `drill_fault_active`, as the Locust master
does, and is scraped like a Locust worker.

A `drill link` process stands in front of the leaf with two links of its own users (live_links.py): a latency
and an rst_stream toxic on one, a blackhole on the other, so every `drill_link_*` panel has data.

Every `loadgen` client series is created at 0 before the first scrape, so a rate
over a window that holds the whole drill is the exact counter ratio.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import tempfile
import time

import grpc
import yaml
from grpc import aio
from prometheus_client import REGISTRY, start_http_server

from harness.core import metrics as m
from harness.core.faults import Mode
from harness.core.status import STATUS_NAMES
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import ORGANIC, DrillClientInterceptor, Tagging
from harness.procs.prometheus import LocalPrometheus
from harness.procs.spawn import ServeProcess, spawn_serve, stop_processes, wait_serving
from tests.observability.live_links import TOXICS, LinkOutcome, LiveLinks, spawn_link

ROOT = pathlib.Path(__file__).resolve().parents[2]
RULES = sorted((ROOT / "compose/prometheus/rules").glob("*.yml"))

SERVICE = "loadgen"
#: A config label no other test uses: the registry is process-wide and other suites
#: (the drill runner's own tests) leave `loadgen` series of their own behind.
CONFIG = "obs-live"
PLAN = "obs-test"
DRILL_TENANT = "tenant-drill"
METHOD = "drill.v1.Demo/Call"
#: (phase, seconds). Long enough for what the tests read: a warm-up second before the fault (the
#: fault-window panels' baseline), fault seconds whose 3-s windows hold both cancelled and failed
#: drill calls (three at least), and a recovery second after it.
PHASES = (("warmup", 2.0), ("fault", 3.0), ("recovery", 2.0))
PACE_S = 0.03


@dataclasses.dataclass
class DrillRun:
    prom: LocalPrometheus
    start: float  # epoch s, first call
    end: float  # epoch s, last call finished
    eval_at: float  # epoch s, rules have seen the final counts
    topology_metrics: list[str]
    links: LinkOutcome  # what the users behind `drill link` saw, and each toxic's record

    def client_counts(self, traffic: str | None = None) -> dict[str, float]:
        """Final `drill_client_calls_total` of loadgen by status (the runner's own numbers)."""
        return client_counts(traffic)


def client_counts(traffic: str | None = None) -> dict[str, float]:
    """`drill_client_calls_total` of loadgen by status, from this process's registry."""
    counts: dict[str, float] = {}
    for metric in REGISTRY.collect():
        for s in metric.samples:
            if s.name != "drill_client_calls_total" or s.labels.get("service") != SERVICE:
                continue
            if s.labels.get("config") != CONFIG:
                continue
            if traffic is not None and s.labels.get("traffic") != traffic:
                continue
            counts[s.labels["grpc_status"]] = counts.get(s.labels["grpc_status"], 0.0) + s.value
    return counts


def _method_label() -> str:
    from harness.core.metrics import method_label

    return method_label("/" + METHOD)


def _loadgen_series():
    method = _method_label()
    for status in sorted(STATUS_NAMES):
        for mode in Mode:
            for traffic in ("organic", "drill"):
                for injected in ("false", "true"):
                    yield (SERVICE, method, status, mode.value, traffic, CONFIG, injected)


def preinit_client_series() -> None:
    """Create every loadgen label set at 0 so no series is born mid-window."""
    for labels in _loadgen_series():
        m.CLIENT_CALLS.labels(*labels)


def _set_phase(phase: str | None) -> None:
    for name, _ in PHASES:
        m.PHASE.labels(PLAN, name).set(1 if name == phase else 0)
    m.FAULT_ACTIVE.labels(PLAN).set(1 if phase == "fault" else 0)


def _serve(workdir: pathlib.Path, service: str, *extra: str) -> ServeProcess:
    args = [
        "--port", "0", "--metrics-port", "-1",
        "--enable-faults", "--seed", "7", "--service", service, *extra,
    ]  # fmt: skip
    return spawn_serve(service, args, workdir)


async def _wait_serving(port: int, timeout_s: float = 20.0) -> None:
    """Until one plain (uninstrumented, so uncounted) Demo call succeeds."""
    deadline = time.monotonic() + timeout_s
    async with aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = drill_pb2_grpc.DemoStub(ch)
        while True:
            try:
                await stub.Call(drill_pb2.CallRequest(payload="ready"), timeout=1)
                return
            except aio.AioRpcError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"drill serve on {port} not serving")
            await asyncio.sleep(0.1)


async def _user(stub, stop: asyncio.Event, timeout: float) -> None:
    req = drill_pb2.CallRequest(payload="x")
    while not stop.is_set():
        try:
            await stub.Call(req, timeout=timeout)
        except aio.AioRpcError:
            pass
        await asyncio.sleep(PACE_S)


async def _drive(gateway: str, edge: str, shed: str, links: LiveLinks) -> tuple[float, float]:
    """Run the phases against `gateway`, `edge` and `shed`, and the links' users throughout (live_links.py);
    returns (start, end) epoch seconds."""
    drill_idle = Tagging(tenant=DRILL_TENANT)
    drill_fault = Tagging(tenant=DRILL_TENANT, directive="abort:UNAVAILABLE", target="leaf")

    def channel(tagging: Tagging, to: str = gateway, **kw) -> tuple[aio.Channel, DrillClientInterceptor]:
        ic = DrillClientInterceptor(tagging, service=SERVICE, config=CONFIG, **kw)
        return aio.insecure_channel(to, interceptors=[ic]), ic

    # gateway (resilient: breaker): drill users outnumber organic ones 3:1, so once the leaf
    # aborts every drill call the breaker's failure rate is far above its 50% threshold.
    organic, _ = channel(ORGANIC)
    drill, drill_ic = channel(drill_idle)
    # edge (budget, no breaker): retries until the budget runs out, and every directive
    # consumed by the first hop. Six drill users there, each failed call asking for three retries, ask
    # for several times the 10 % budget whatever the box's speed (both sides scale with it), so the
    # warm-up's credit is spent within the first fault second and the exhaustion counter exists.
    edge_organic, _ = channel(ORGANIC, edge)
    edge_drill, edge_drill_ic = channel(drill_idle, edge)
    # Actively cancelled: the edge holds the reply 300 ms, the client cancels after 40 ms.
    cancelled, _ = channel(Tagging(tenant=DRILL_TENANT, directive="delay:300"), edge, cancel_after_ms=40)
    dropped, _ = channel(Tagging(tenant=DRILL_TENANT, directive="drop:400"), edge)
    delayed, _ = channel(Tagging(tenant=DRILL_TENANT, directive="delay:30"), edge)
    rejected, _ = channel(Tagging(tenant=DRILL_TENANT, directive="delay:abc"), edge)
    skipped, _ = channel(Tagging(tenant="tenant-other", directive="abort:INTERNAL"), edge)
    shed_organic, _ = channel(ORGANIC, shed)
    channels = [organic, drill, edge_organic, edge_drill, cancelled, dropped, delayed, rejected, skipped, shed_organic]
    stub = {ch: drill_pb2_grpc.DemoStub(ch) for ch in channels}

    always = asyncio.Event()
    users = [(organic, 2), (drill, 6), (edge_organic, 2), (edge_drill, 6), (cancelled, 6), (rejected, 1), (skipped, 1),
             (shed_organic, 2)]  # fmt: skip
    tasks = [asyncio.create_task(_user(stub[ch], always, 1.0)) for ch, n in users for _ in range(n)]
    tasks.append(asyncio.create_task(links.drive(always)))
    start = time.time()
    fault_stop = asyncio.Event()
    for phase, seconds in PHASES:
        _set_phase(phase)
        if phase == "fault":
            drill_ic.tagging = edge_drill_ic.tagging = drill_fault
            fault_tasks = [
                asyncio.create_task(_user(stub[dropped], fault_stop, 0.15)),
                asyncio.create_task(_user(stub[delayed], fault_stop, 1.0)),
            ]
        await asyncio.sleep(seconds)
        if phase == "fault":
            drill_ic.tagging = edge_drill_ic.tagging = drill_idle
            fault_stop.set()
            await asyncio.gather(*fault_tasks)
    always.set()
    await asyncio.gather(*tasks)
    end = time.time()
    _set_phase(None)
    for ch in channels:
        await ch.close()
    return start, end


#: The gateway's breaker judges a 2-s window from 10 calls on and stays open 1 s, so 3 s of fault on
#: 6 drill users of 8 open it (and half-open closes it after): the shipped one needs 100 calls in 10 s.
BREAKER = {"breaker": {"failureRate": 0.5, "minCalls": 10, "window": {"kind": "time", "duration": "2s"},
                       "openDuration": "1s", "halfOpenProbes": 10, "per": "backend"}}  # fmt: skip
#: The edge throttles adaptively over 1 s with K = 1.1: about half of its calls fail at the leaf in the fault, so
#: p = (requests − 1.1·accepts) / (requests + 1) ≈ 0.45 and it rejects locally; with the shipped K = 2 it rejects
#: only while accepts stay under half, which this mix straddles (a CI run saw none). Over 10 s the warm-up's
#: successes would hide it.
THROTTLE = {"adaptiveThrottling": {"k": 1.1, "window": "1s"}}


def _config(workdir: pathlib.Path, base: str, override: dict) -> str:
    """A shipped resilience configuration with `override`'s keys replaced, as a file `drill serve --config` loads."""
    raw = yaml.safe_load((ROOT / f"harness/configs/{base}.yaml").read_text()) | override
    raw["name"] = f"live-{base}"
    path = workdir / f"live-{base}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@dataclasses.dataclass
class LiveDrill:
    """Owns the processes of one run; `stop()` ends each by its PID."""

    procs: list[ServeProcess] = dataclasses.field(default_factory=list)
    link_proc: ServeProcess | None = None
    prom: LocalPrometheus | None = None
    metrics_server: object = None

    def run(self) -> DrillRun:
        workdir = pathlib.Path(tempfile.mkdtemp(prefix="drill-live-"))
        leaf_proc = _serve(workdir, "leaf")
        self.procs.append(leaf_proc)
        for name, config in (
            ("gateway", _config(workdir, "resilient", BREAKER)),
            ("edge", _config(workdir, "budget", THROTTLE)),
        ):
            # every process binds its own ports; the callers read the leaf's from its ready file
            self.procs.append(_serve(workdir, name, "--downstream", f"@{leaf_proc.ready_file}", "--config", config))
        shed_args = ("--admission", "--concurrency", "1", "--queue", "0", "--work-ms", "200")
        self.procs.append(_serve(workdir, "shed", *shed_args))
        self.link_proc = spawn_link(workdir)
        wait_serving([*self.procs, self.link_proc])
        leaf, gw, edge, shed = self.procs
        leaf_port, gw_port, edge_port, shed_port = leaf.port, gw.port, edge.port, shed.port
        links = LiveLinks(self.link_proc, f"127.0.0.1:{leaf_port}")
        preinit_client_series()
        _set_phase(None)
        # only this drill's series: the process-wide registry holds every other test's too (MBs late in a run)
        self.metrics_server = start_http_server(0, addr="127.0.0.1", registry=_own_series_registry())
        own_metrics = self.metrics_server[0].server_port
        topology = [f"127.0.0.1:{proc.metrics_port}" for proc in (gw, edge, leaf, shed)]
        self.prom = LocalPrometheus(targets={"loadgen": [f"127.0.0.1:{own_metrics}"]}, rule_files=RULES).start()
        # the hops through file_sd with their `service` label, as the runner does (fd and TCP panels filter on it)
        names = ("gateway", "edge", "leaf", "shed")
        hops = [(name, f"http://{addr}/metrics") for name, addr in zip(names, topology, strict=True)]
        # the link under the service it fronts, as compose scrapes its link as `ledger` (live_links.py)
        self.prom.set_targets([*hops, ("leaf", f"http://127.0.0.1:{self.link_proc.metrics_port}/metrics")])

        async def main() -> tuple[float, float]:
            await _wait_serving(leaf_port)
            await _wait_serving(gw_port)
            await _wait_serving(edge_port)
            await _wait_serving(shed_port)
            return await _drive(*(f"127.0.0.1:{p}" for p in (gw_port, edge_port, shed_port)), links)

        self.prom.wait_for_up(2 + len(names), timeout_s=60)
        self._wait_until_zeros_scraped()
        start, end = asyncio.run(main())
        links.read_records()
        return DrillRun(self.prom, start, end, self._wait_until_recorded(), topology, links.outcome)

    def _wait_until_zeros_scraped(self, timeout_s: float = 60.0) -> None:
        """Until Prometheus holds every pre-created loadgen series and each link's counters (all at 0): no series
        is born mid-window."""
        created = sum(1 for _ in _loadgen_series())
        wanted = {
            f'count(drill_client_calls_total{{service="{SERVICE}",config="{CONFIG}"}})': created,
            "count(drill_link_streams_reset_total)": len(TOXICS),  # each link's counters, at 0 before any call
        }
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            got = {q: self.prom.query(q) for q in wanted}
            if all(got[q] and float(got[q][0]["value"][1]) >= n for q, n in wanted.items()):
                return
            time.sleep(0.25)
        raise AssertionError(f"Prometheus never scraped the {created} zeroed loadgen series and the links' zeros")

    def _wait_until_recorded(self, timeout_s: float = 60.0) -> float:
        """Poll until Prometheus holds the final client counts and a rule evaluation has seen them.

        A fixed sleep is not enough on a loaded machine: a late scrape or rule evaluation
        would compare the panel with counts it has not seen yet.
        """
        total = sum(client_counts().values())
        deadline = time.time() + timeout_s
        seen_at = None
        while time.time() < deadline:
            got = self.prom.query(f'sum(drill_client_calls_total{{service="{SERVICE}",config="{CONFIG}"}})')
            if got and float(got[0]["value"][1]) >= total:
                seen_at = time.time()
                break
            time.sleep(0.25)
        assert seen_at is not None, f"Prometheus never scraped the final {total:.0f} client calls"
        while time.time() < deadline:
            got = self.prom.query(f'timestamp(drill:client_calls:rate3s{{service="{SERVICE}",config="{CONFIG}"}})')
            if got and min(float(s["value"][1]) for s in got) > seen_at:
                return time.time()
            time.sleep(0.25)
        raise AssertionError("no rule evaluation after the final scrape")

    def stop(self) -> None:
        if self.prom is not None:
            self.prom.stop()
        stop_processes([p.proc for p in (*self.procs, self.link_proc) if p is not None])
        server = self.metrics_server
        if isinstance(server, tuple):
            server[0].shutdown()
            server[0].server_close()


class _OwnSeries:
    """This drill's client series (service loadgen, config CONFIG) and the timeline gauges, nothing else."""

    def collect(self):
        from prometheus_client.core import Metric

        for family in (m.CLIENT_CALLS, m.CLIENT_LATENCY):
            for metric in family.collect():
                mine = Metric(metric.name, metric.documentation, metric.type, metric.unit)
                mine.samples = [s for s in metric.samples
                                if s.labels.get("service") == SERVICE and s.labels.get("config") == CONFIG]  # fmt: skip
                yield mine
        yield from m.PHASE.collect()
        yield from m.FAULT_ACTIVE.collect()


def _own_series_registry():
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_OwnSeries())
    return registry


def grpc_status_names() -> list[str]:
    return [c.name for c in grpc.StatusCode]
