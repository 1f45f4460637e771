"""`drill proxy`: the fault pipeline in front of a service in any language, forwarding every call to it.

`drill proxy --upstream HOST:PORT` serves every method the upstream serves
(`harness.proxy.forward`), with the same `FaultServerInterceptor` a Python service
installs: the same gates (tenant, `x-fault-target` = `--service`, drill secret), hit
formula, modes, mid-stream options, `@served` (the call is forwarded and the
upstream answers before the fault replaces its answer), marker, limits, one-way
stop (SIGUSR1, `drill stop`), metrics, spans and audit. Its options are `drill serve`'s where they apply.
With `--tap` it is a tap (contracts §17): injection off whatever the environment says, its metrics the hop's
readings (a proxy records its calls whether or not it injects). It forwards
only to its `--upstream`, never to an address a caller names, and binds
127.0.0.1 unless told otherwise. Each method's kind is read once at start
(`method_kinds`, through `harness.protos`); once serving it runs as `drill serve`
does, until SIGINT or SIGTERM (`harness.demo.lifecycle`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from grpc import aio

from harness.core import cliargs
from harness.core import limits as lim
from harness.core.errors import BadInput, RunFailed
from harness.core.settings import FaultSettings
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
from harness.interceptors import FaultServerInterceptor
from harness.protos import method_kinds
from harness.proxy.forward import CHANNEL_OPTIONS, SERVER_OPTIONS, ForwardAll, Forwarder

log = logging.getLogger("drill.proxy")
#: --workers at most: one process per core is the point, and each holds a connection pool to the upstream
MAX_WORKERS = 64


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--upstream", type=cliargs.host_port, required=True,
                   help="the service every call is forwarded to, HOST:PORT (the only address it calls)")  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=cliargs.port(0), default=50051, help="gRPC port (0 = any free port)")
    p.add_argument("--metrics-port", type=cliargs.integer(-1, lim.MAX_PORT, "a port (0 = off, -1 = any free port)"),
                   default=9464, help="Prometheus /metrics port (0 = off, -1 = any free port)")  # fmt: skip
    p.add_argument("--service", default=os.environ.get("DRILL_SERVICE", "drill"),
                   help="the upstream's service name (labels, x-fault-target)")  # fmt: skip
    p.add_argument("--enable-faults", action="store_true", help="turn the fault switch on (else DRILL_FAULT_ENABLED)")
    p.add_argument("--tap", action="store_true",
                   help="a tap: per-hop readings for a service that exports none of ours (the same metrics under "
                   "--service: calls, attempts, latency and codes by traffic); injection off whatever "
                   "DRILL_FAULT_ENABLED says, no drill secret needed")  # fmt: skip
    p.add_argument("--seed", type=cliargs.seed, default=None,
                   help="hit seed (else DRILL_FAULT_SEED / DRILL_FAULT_DRILL_ID)")  # fmt: skip
    p.add_argument("--descriptor-set", default=None,
                   help="the upstream's methods (protoc --descriptor_set_out --include_imports); "
                   "else its reflection")  # fmt: skip
    p.add_argument("--proto", default=None, help="the upstream's methods from a .proto (needs grpcio-tools)")
    p.add_argument("--proto-path", action="append", default=[],
                   help="import path for --proto (repeatable; default: the .proto's folder)")  # fmt: skip
    p.add_argument("--instance-id", default=None, help="instance id (else DRILL_INSTANCE_ID or host:pid)")
    p.add_argument("--port-file", type=cliargs.new_file, default=None,
                   help="write the bound gRPC port here once serving")  # fmt: skip
    p.add_argument("--ready-file", type=cliargs.new_file, default=None,
                   help="write {host, port, metrics_port, pid} (JSON) once serving")  # fmt: skip
    p.add_argument("--workers", type=cliargs.integer(1, MAX_WORKERS, f"a number of processes, 1-{MAX_WORKERS}"),
                   default=1, help="proxy processes sharing the port (SO_REUSEPORT), one core each; each serves "
                   "its own /metrics (--metrics-port + its index)")  # fmt: skip
    add_limit_arguments(p, f"{DEFAULT_MAX_IN_FLIGHT}; with --workers, each worker's", str(DEFAULT_MAX_BACKLOG))
    p.add_argument("--plane", choices=("aio", "link"), default="aio",
                   help="the data plane: aio (the default: grpc.aio handlers around the interceptors' pipeline) or "
                   "link (the same pipeline on drill link's frame relay: docs/proxy.md, Data planes)")  # fmt: skip
    p.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # a worker of --workers


async def start_proxy(upstream: str, *, host: str = "127.0.0.1", port: int = 0, settings: FaultSettings,
                      method_kinds: dict | None = None, metrics: bool = True, tracer=None,
                      reuse_port: bool = False, max_backlog: int | None = None):  # fmt: skip
    """Start a proxy in front of `upstream`; returns (server, bound port, channel). `reuse_port`: share the
    port with the other workers of `--workers` (else a port in use is refused, never shared by accident).
    Its limits: `settings.max_in_flight` (0: none) and `max_backlog` (None: grpc's own guard)."""
    channel = aio.insecure_channel(upstream, options=CHANNEL_OPTIONS)
    table = dict(method_kinds or {})
    fault = FaultServerInterceptor(settings, metrics=metrics, tracer=tracer)
    server = bounded_server(fault, interceptors=[fault], options=[("grpc.so_reuseport", int(reuse_port)),
                            *SERVER_OPTIONS], max_backlog=max_backlog)  # fmt: skip
    server.add_generic_rpc_handlers((ForwardAll(Forwarder(channel), table.get),))
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        await channel.close()
        raise OSError(f"could not bind {host}:{port}")
    await server.start()
    return server, bound, channel


async def _proxy(args: argparse.Namespace) -> int:
    # local inputs first (a missing --proto or a bad DRILL_* value is bad input whatever the port), then the port,
    # then the network
    local = bool(args.descriptor_set or args.proto or args.proto_path)
    table = method_kinds(args) if local else {}
    settings = settings_from_args(args, "proxy")
    if args.max_backlog is None:
        args.max_backlog = DEFAULT_MAX_BACKLOG
    if not args.reuse_port:
        check_free(args.host, args.port, "proxy")
    if not local:
        table = method_kinds(args)
    metrics_port = serve_metrics(args, "proxy")
    tracer = tracer_for(settings)
    try:
        server, port, channel = await start_proxy(args.upstream, host=args.host, port=args.port, settings=settings,
                                                  method_kinds=table, tracer=tracer,
                                                  reuse_port=args.reuse_port, max_backlog=args.max_backlog)  # fmt: skip
    except (OSError, RuntimeError) as exc:
        raise RunFailed(f"proxy: cannot listen on {args.host}:{args.port} (port in use or not allowed)") from exc
    log.warning("proxy %s on %s:%d → %s (faults %s, seed %d, %d methods known, at most %d in flight, backlog %d), "
                "metrics on :%s", settings.service, args.host, port, args.upstream, "ON" if settings.enabled else "off",
                settings.seed, len(table), settings.max_in_flight, args.max_backlog, metrics_port or "-")  # fmt: skip
    return await serve_until_signal(server, channel, ready=lambda: announce(args, port, {"metrics_port": metrics_port}))


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.tap:
        if args.enable_faults:
            raise BadInput("proxy: --tap injects nothing: drop --enable-faults (or --tap)")
        # off in the environment every settings read sees, its --workers' processes included (they inherit it)
        os.environ["DRILL_FAULT_ENABLED"] = "0"
    if args.workers > 1:
        if args.descriptor_set or args.proto:  # bad input (a missing file, both given) once, not per worker
            method_kinds(args)
        settings_from_args(args, "proxy")  # a bad DRILL_* value once, not per worker
        from harness.demo.workers import supervise

        return supervise(args)
    try:
        return asyncio.run(_proxy(args))
    except KeyboardInterrupt:
        return 0
