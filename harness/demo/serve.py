"""`drill serve`: run one demo hop with the fault interceptor, health, reflection and metrics.

The drill runner starts each replica of each hop as its own `drill serve`
process: `--port 0 --metrics-port -1 --ready-file F` binds ports the kernel
picks and writes them (JSON) once serving; `--admission` makes every attempt pay
for capacity (see harness.demo.service); `--downstream A,B` lists the next hop's
replicas, each `HOST:PORT` or `@READY-FILE` (another `drill serve`'s ready file,
waited for): so a whole chain starts at once with every port bound by its own
server, and no port is picked by one process for another to bind
(harness.procs.ports says why). `--config NAME` is the resilience configuration
of its downstream calls and, leaf or not, the keepalive permit policy of its own
server (the configuration's `serverPermit`), so a chain run with one
configuration accepts its own callers' keepalive PINGs.

What `drill proxy` shares with it, from its port checked to its stop at SIGTERM, is in
harness.demo.lifecycle.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import socket
from collections.abc import Callable
from typing import Any

from grpc import aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from harness.core import cliargs
from harness.core import limits as lim
from harness.core.errors import BadInput, RunFailed
from harness.core.settings import FaultSettings
from harness.demo.conntrack import watch_port
from harness.demo.downstream import CHANNEL_OPTIONS, downstream_for
from harness.demo.lifecycle import (
    DEFAULT_MAX_BACKLOG,
    DEFAULT_MAX_IN_FLIGHT,
    add_limit_arguments,
    announce,
    bounded_server,
    check_free,
    serve_metrics,
    serve_until_signal,
    settings_from_args,
    tracer_for,
)
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.demo.service import AdmissionInterceptor, Capacity, DemoServicer, Downstream, plain_downstream
from harness.interceptors import DrillClientInterceptor, FaultServerInterceptor

log = logging.getLogger("drill.serve")


async def start_server(
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    settings: FaultSettings | None = None,
    capacity: Capacity | None = None,
    downstream: Downstream | None = None,
    metrics: bool = True,
    tracer=None,
    extra_interceptors=(),
    admission: bool = False,
    orphan_work: bool = False,
    server_options: tuple = (),
    max_backlog: int | None = None,
) -> tuple[aio.Server, int, health.aio.HealthServicer]:
    """Start a demo hop on `host:port` (0 = any free port); returns (server, bound port, health).

    `admission=True` enforces `capacity` per attempt, before the fault interceptor. The in-flight limit is
    `settings.max_in_flight` (0: none); `max_backlog` bounds the calls the gRPC core holds for the event loop
    (None: grpc's own guard, as in a test's process, whose loop also runs the callers).
    """
    settings = settings or FaultSettings.from_env()
    fault = FaultServerInterceptor(settings, metrics=metrics, tracer=tracer)
    interceptors = [*extra_interceptors, fault]
    admitter = None
    if admission:  # it admits unary calls itself, and the servicer asks it for each message of an Exchange
        admitter = AdmissionInterceptor(
            settings.service, capacity or Capacity(), orphan_work=orphan_work, tenants=settings.tenants
        )
        interceptors.insert(0, admitter)
        capacity = Capacity(concurrency=1_000_000, queue=0, work_ms=0.0)
    server = bounded_server(fault, interceptors=interceptors, options=[("grpc.so_reuseport", 0), *server_options],
                            max_backlog=max_backlog)  # fmt: skip
    servicer = DemoServicer(settings.service, settings.instance_id, capacity, downstream, admission=admitter)
    drill_pb2_grpc.add_DemoServicer_to_server(servicer, server)
    health_servicer = health.aio.HealthServicer()  # the aio flavour: the sync one cannot serve an aio server
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = (
        drill_pb2.DESCRIPTOR.services_by_name["Demo"].full_name,
        health.SERVICE_NAME,
        reflection.SERVICE_NAME,
    )
    reflection.enable_server_reflection(names, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"could not bind {host}:{port}")
    await server.start()
    if metrics:
        watch_port(bound)  # drill_tcp_connections{port=bound}
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    await health_servicer.set(names[0], health_pb2.HealthCheckResponse.SERVING)
    return server, bound, health_servicer


#: A gRPC `dns:` target: `dns:///NAME:PORT`, or `dns://RESOLVER/NAME:PORT` to ask a given DNS server.
_DNS_TARGET = re.compile(r"dns:(?://[^/\s]*)?/(\S+)")


def _downstream_ok(item: str) -> bool:
    if item.startswith("@"):
        return bool(item[1:])
    dns = _DNS_TARGET.fullmatch(item)
    return cliargs.split_host_port(dns.group(1) if dns else item) is not None


def _downstreams(text: str) -> str:
    """`--downstream`: comma-separated `HOST:PORT`, gRPC `dns:` targets or `@READY-FILE` items."""
    items = [item.strip() for item in text.split(",")]
    bad = [item for item in items if not _downstream_ok(item)]
    if bad:
        raise argparse.ArgumentTypeError(
            f"HOST:PORT, dns:///NAME:PORT or @READY-FILE, comma separated, got {', '.join(map(repr, bad))}"
        )
    return ",".join(items)


def add_arguments(p: argparse.ArgumentParser) -> None:
    ms = lim.MAX_DEADLINE_S * 1000
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=cliargs.port(0), default=50051, help="gRPC port (0 = any free port)")
    p.add_argument(
        "--metrics-port",
        type=cliargs.integer(-1, lim.MAX_PORT, "a port (0 = off, -1 = any free port)"),
        default=9464,
        help="Prometheus /metrics port (0 = off, -1 = any free port)",
    )
    p.add_argument(
        "--service",
        default=os.environ.get("DRILL_SERVICE", "drill"),
        help="service name (labels, x-fault-target)",
    )
    p.add_argument("--work-ms", type=cliargs.number(0, ms, "milliseconds"), default=0.0, help="work time per call")
    p.add_argument("--concurrency", type=cliargs.integer(1, lim.MAX_INFLIGHT, "handlers"), default=64,
                   help="max concurrent handlers")  # fmt: skip
    p.add_argument("--queue", type=cliargs.integer(0, lim.MAX_QUEUE, "calls"), default=256,
                   help="max queued calls before RESOURCE_EXHAUSTED")  # fmt: skip
    p.add_argument(
        "--downstream",
        type=_downstreams,
        default=None,
        help="the next hop's replicas, comma separated: HOST:PORT or a gRPC dns: target (dns:///NAME:PORT, "
        "dns://RESOLVER/NAME:PORT; a name with several addresses is balanced round robin over all of them), "
        "or @FILE = the --ready-file of another "
        "drill serve (waited for up to --downstream-wait seconds); omit for a leaf",
    )
    p.add_argument("--downstream-wait", type=cliargs.number(0, lim.MAX_WAIT_S, "seconds", above=True),
                   default=30.0, help="seconds to wait for @FILE downstreams")  # fmt: skip
    p.add_argument(
        "--downstream-timeout", type=cliargs.number(0, lim.MAX_DEADLINE_S, "seconds", above=True), default=None,
        help="timeout for downstream calls without --config, seconds",
    )  # fmt: skip
    p.add_argument("--config", default=None,
                   help="resilience configuration (name or YAML): its downstream calls (with --downstream) and "
                   "this server's keepalive permit policy (its keepalive serverPermit), leaf or not")  # fmt: skip
    p.add_argument(
        "--enable-faults", action="store_true", help="turn the fault switch on (else DRILL_FAULT_ENABLED)"
    )
    p.add_argument(
        "--seed", type=cliargs.seed, default=None, help="hit seed (else DRILL_FAULT_SEED / DRILL_FAULT_DRILL_ID)"
    )
    p.add_argument("--port-file", type=cliargs.new_file, default=None,
                   help="write the bound gRPC port here once serving")  # fmt: skip
    p.add_argument("--ready-file", type=cliargs.new_file, default=None,
                   help="write {port, metrics_port, pid} (JSON) once serving")  # fmt: skip
    p.add_argument(
        "--admission", action="store_true", help="every attempt pays capacity, even injected faults"
    )
    p.add_argument(
        "--orphan-work",
        action="store_true",
        help="with --admission: admitted work goes on after the caller is gone (thread-per-request server)",
    )
    p.add_argument("--shed-code", type=cliargs.error_status, default="RESOURCE_EXHAUSTED",
                   help="status of calls shed by capacity")  # fmt: skip
    p.add_argument("--instance-id", default=None, help="instance id (else DRILL_INSTANCE_ID or host:pid)")
    p.add_argument(
        "--keepalive-ms",
        type=cliargs.integer(1, lim.MAX_CHANNEL_MS, "milliseconds"),
        default=None,
        help="server keepalive ping interval (grpc.keepalive_time_ms)",
    )
    p.add_argument(
        "--max-connection-age-ms",
        type=cliargs.integer(1, lim.MAX_CHANNEL_MS, "milliseconds"),
        default=None,
        help="close each connection (GOAWAY) after about this long, so callers reconnect and resolve this "
        "service's name again: replicas added later get calls (grpc.max_connection_age_ms; calls in flight "
        "finish on the old connection)",
    )
    p.add_argument(
        "--max-idle-ms",
        type=cliargs.integer(1, lim.MAX_CHANNEL_MS, "milliseconds"),
        default=None,
        help="close idle connections after this (grpc.max_connection_idle_ms)",
    )
    add_limit_arguments(p, f"{DEFAULT_MAX_IN_FLIGHT}, or --concurrency + --queue + DRILL_FAULT_MAX_ACTIVE when more: "
                        "the hop's own capacity sheds first", f"{DEFAULT_MAX_BACKLOG}, or --concurrency + --queue "
                        "when more: a burst the hop's own queue would take reaches it")  # fmt: skip


def in_flight_default(args: argparse.Namespace) -> Callable[[FaultSettings], int]:
    """`drill serve`'s in-flight limit when none is given: DEFAULT_MAX_IN_FLIGHT, raised to what the hop itself
    may hold (its handlers, its queue, and the calls injected faults hold before it) so its own capacity, the
    thing a drill measures, sheds first."""
    return lambda settings: max(DEFAULT_MAX_IN_FLIGHT, args.concurrency + args.queue + settings.max_active)


def backlog_default(args: argparse.Namespace) -> int:
    """`drill serve`'s core backlog when none is given: DEFAULT_MAX_BACKLOG, raised to the hop's own handlers and
    queue, so a burst its modelled capacity would take (and shed with its own code) is not cut short before it."""
    return max(DEFAULT_MAX_BACKLOG, args.concurrency + args.queue)


def _check_args(args: argparse.Namespace) -> tuple[tuple[str, Any], ...]:
    """Flags that mean nothing without another are refused, not ignored; a host must resolve; a config load.
    Returns the server options `--config` sets (its keepalive permit policy: a leaf's callers PING it too)."""
    if args.downstream_timeout is not None and not args.downstream:
        raise BadInput("serve: --downstream-timeout applies to downstream calls; give --downstream too")
    if args.downstream_timeout is not None and args.config:
        raise BadInput("serve: --downstream-timeout is for calls without --config (the configuration sets the "
                       "deadlines); give one of them")  # fmt: skip
    if args.orphan_work and not args.admission:
        raise BadInput("serve: --orphan-work applies to admitted work; give --admission too")
    try:
        socket.getaddrinfo(args.host, None)
    except (OSError, UnicodeError) as exc:  # socket.gaierror: a name nothing resolves
        why = getattr(exc, "strerror", None) or exc
        raise BadInput(f"serve: --host {args.host!r} is not an address ({why})") from None
    if not args.config:
        return ()
    from harness.resilience import load

    # an unknown name or a bad file: one line (ConfigError) before anything is bound
    return load(args.config).server_options()


async def _serve(args: argparse.Namespace) -> int:
    permit = _check_args(args)
    check_free(args.host, args.port, "serve")
    settings = settings_from_args(args, "serve", in_flight_default(args))
    if args.max_backlog is None:
        args.max_backlog = backlog_default(args)
    downstream = None
    channel = None
    if args.downstream:
        args.downstream = await resolve_downstream(args.downstream, args.downstream_wait)
        downstream, channel = await _make_downstream(args, settings)
    metrics_port = serve_metrics(args, "serve")
    options: list[tuple[str, Any]] = [*permit]
    if args.keepalive_ms:
        options += [("grpc.keepalive_time_ms", args.keepalive_ms), ("grpc.keepalive_timeout_ms", 1000)]
    if args.max_idle_ms:
        options.append(("grpc.max_connection_idle_ms", args.max_idle_ms))
    if args.max_connection_age_ms:  # gRPC adds ±10 % jitter; its grace is unbounded unless set
        options.append(("grpc.max_connection_age_ms", args.max_connection_age_ms))
    tracer = tracer_for(settings)
    try:
        server, port, _ = await start_server(
            tracer=tracer,
            port=args.port,
            host=args.host,
            settings=settings,
            capacity=Capacity(args.concurrency, args.queue, args.work_ms, args.shed_code),
            downstream=downstream,
            admission=args.admission,
            orphan_work=args.orphan_work,
            server_options=tuple(options),
            max_backlog=args.max_backlog,
        )
    except (OSError, RuntimeError) as exc:  # grpc says "Failed to bind" as a RuntimeError
        raise RunFailed(f"serve: cannot listen on {args.host}:{args.port} (port in use or not allowed)") from exc
    log.warning(
        "serving %s on %s:%d (faults %s, seed %d, tenants %s, at most %d in flight, backlog %d), metrics on :%s",
        settings.service,
        args.host,
        port,
        "ON" if settings.enabled else "off",
        settings.seed,
        ",".join(sorted(settings.tenants)),
        settings.max_in_flight,
        args.max_backlog,
        metrics_port or "-",
    )
    return await serve_until_signal(server, channel, ready=lambda: announce(args, port, {"metrics_port": metrics_port}))


async def resolve_downstream(spec: str, wait_s: float) -> str:
    """`A,@FILE,…` → `A,HOST:PORT,…`: each `@FILE` is another server's ready file, read once it exists."""
    out = []
    deadline = asyncio.get_running_loop().time() + wait_s
    for item in (a.strip() for a in spec.split(",")):
        if not item.startswith("@"):
            out.append(item)
            continue
        path = item[1:]
        while True:
            try:
                with open(path) as fh:
                    info = json.load(fh)
                host = info.get("host") or "127.0.0.1"
                out.append(f"{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{int(info['port'])}")
                break
            except FileNotFoundError:
                pass
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise RunFailed(f"serve: downstream ready file {path}: {exc}") from None
            if asyncio.get_running_loop().time() > deadline:
                raise RunFailed(f"serve: downstream {path} not ready after {wait_s:g} s")
            await asyncio.sleep(0.02)
    return ",".join(out)


async def _make_downstream(args: argparse.Namespace, settings: FaultSettings):
    """Plain downstream, or the resilience layer's caller when a configuration is named."""
    if args.config:
        return await downstream_for(args.downstream, args.config, service=settings.service)
    channels = [
        aio.insecure_channel(
            addr,
            options=CHANNEL_OPTIONS,  # round robin over every address the name resolves to
            interceptors=[DrillClientInterceptor(service=settings.service, target=addr)],
        )
        for addr in args.downstream.split(",")
        if addr.strip()
    ]
    return plain_downstream(channels, args.downstream_timeout), _Closer(channels)


class _Closer:
    def __init__(self, channels) -> None:
        self.channels = channels

    async def close(self) -> None:
        for c in self.channels:
            await c.close()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return asyncio.run(_serve(args))
    except KeyboardInterrupt:
        return 0
