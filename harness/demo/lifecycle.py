"""What `drill serve` and `drill proxy` share as serving processes, from start to stop.

Before serving: the port refused at once if someone holds it (the line names the
command), the fault settings from the environment under the command's flags (and a
service left on the default name told to pass `--service`), /metrics, a tracer, and
the server's two limits (`--max-in-flight`, `--max-backlog`: `bounded_server`), so
past its capacity the process sheds calls instead of queueing them.
Once serving: `serve_until_signal` installs the one-way stop (SIGUSR1, `drill
stop`), starts the audit writer, freezes the startup heap, catches SIGINT and
SIGTERM, then writes the ready file (`announce`: a parent may signal as soon as it
sees it), and at the signal stops the server with grace, closes its channels and
flushes the audit lines.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import signal
import socket
from collections.abc import Callable, Sequence

from grpc import aio
from prometheus_client import start_http_server

from harness.core import audit, cliargs
from harness.core import limits as lim
from harness.core.errors import BadInput, RunFailed
from harness.core.safety import install_stop_signal
from harness.core.settings import FaultSettings
from harness.interceptors import FaultServerInterceptor, backlog_options, channelz_server_ids, watch_backlog


def check_free(host: str, port: int, command: str) -> None:
    """Refuse a port someone holds before grpc tries it (grpc would log a C-core error line first); the error
    line starts with the `command` that wanted it (`serve`, `proxy`)."""
    if port <= 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        # as grpc binds: SO_REUSEADDR, so a restart on the same port is not refused for the old
        # connections' TIME_WAIT, while a live listener still is
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise RunFailed(f"{command}: cannot listen on {host}:{port}: {exc.strerror}") from None


#: `--max-in-flight` of `drill proxy` (and the least of `drill serve`'s): docs/proxy.md, "When it is overloaded",
#: sizes it by Little's law from benchmarks/proxy_overload.py's capacity.
DEFAULT_MAX_IN_FLIGHT = 1000
#: `--max-backlog` of `drill proxy` (and the least of `drill serve`'s): calls the gRPC core may hold for the event
#: loop. A call waits about this many calls' turn (at ~2,000 calls/s, 16 ms); a burst larger than it, beyond what
#: the loop takes meanwhile, is refused (docs/proxy.md, "When it is overloaded").
DEFAULT_MAX_BACKLOG = 32
#: `--max-backlog` at most: a backlog is a queue, and at this size it is seconds of one process's calls.
MAX_BACKLOG = 10_000


def add_limit_arguments(p: argparse.ArgumentParser, in_flight_default: str, backlog_default: str) -> None:
    """`--max-in-flight` and `--max-backlog`, the two bounds of a serving process (`bounded_server`); each
    defaults to None, which the command resolves (`settings_from_args`, its own backlog rule) and its help says."""
    p.add_argument("--max-in-flight", type=cliargs.integer(1, lim.MAX_INFLIGHT, "calls"), default=None,
                   help=f"calls served at once; past it a call is refused at once with RESOURCE_EXHAUSTED, never "
                   f"faulted or queued (health and reflection calls excepted; default: DRILL_MAX_IN_FLIGHT, else "
                   f"{in_flight_default})")  # fmt: skip
    p.add_argument("--max-backlog", type=cliargs.integer(1, MAX_BACKLOG, "calls"), default=None,
                   help="calls the gRPC core may hold while the event loop is busy; past it the core refuses at "
                   f"once (callers see CANCELLED) (default {backlog_default})")  # fmt: skip


def settings_from_args(args: argparse.Namespace, command: str,
                       in_flight_default: Callable[[FaultSettings], int] = lambda s: DEFAULT_MAX_IN_FLIGHT,
                       ) -> FaultSettings:  # fmt: skip
    """The fault settings of `drill serve` and `drill proxy`: the environment's, with their flags over it.

    With injection on and the service on the default name, the warning says the command's own option
    (`pass --service NAME`), not the environment variable a library user sets. The in-flight limit is
    `--max-in-flight`, else DRILL_MAX_IN_FLIGHT, else `in_flight_default(settings)`: never none (0 is a
    library's own server's choice; these processes always bound their calls)."""
    overrides = {"service": args.service}
    if args.enable_faults:
        overrides["enabled"] = True
    if args.seed is not None:
        overrides["seed"] = args.seed
    if args.instance_id:
        overrides["instance_id"] = args.instance_id
    settings = FaultSettings.from_env(who=f"drill {command}", fix="pass --service NAME", **overrides)
    if args.max_in_flight is not None:
        limit = args.max_in_flight
    elif os.environ.get("DRILL_MAX_IN_FLIGHT", "").strip():
        limit = settings.max_in_flight
        if not limit:
            raise BadInput(f"{command}: DRILL_MAX_IN_FLIGHT=0 (no limit) is for a library's own server; drill "
                           f"{command} always bounds its calls in flight: give 1-{lim.MAX_INFLIGHT}")  # fmt: skip
    else:
        limit = in_flight_default(settings)
    return dataclasses.replace(settings, max_in_flight=limit)


def bounded_server(fault: FaultServerInterceptor, *, interceptors: Sequence = (), options: Sequence = (),
                   max_backlog: int | None) -> aio.Server:  # fmt: skip
    """An aio server (`interceptors`, ending with `fault`, the FaultServerInterceptor that holds the in-flight
    limit) whose core holds at most `max_backlog` + 1 calls for its event loop (None: grpc's own guard), and
    whose core refuses past it are counted (`drill_server_backlog_refused_total`, from channelz) when `fault`
    exports metrics."""
    before = channelz_server_ids() if max_backlog is not None else set()
    extra = backlog_options(max_backlog) if max_backlog is not None else ()
    server = aio.server(interceptors=[*interceptors], options=[*options, *extra])
    if max_backlog is not None and fault.core.metrics:
        new = channelz_server_ids() - before
        watch_backlog(next(iter(new)) if len(new) == 1 else None, fault.core.service, fault.core.flight)
    return server


def serve_metrics(args: argparse.Namespace, command: str) -> int:
    """/metrics on `--metrics-port` (0: none, -1: any free port); the port bound, or 0."""
    if not args.metrics_port:
        return 0
    try:
        http, _thread = start_http_server(max(0, args.metrics_port), addr=args.host)
    except OSError as exc:
        where = f"{args.host} (any free port)" if args.metrics_port < 0 else f"{args.host}:{args.metrics_port}"
        raise RunFailed(f"{command}: cannot serve metrics on {where}: {exc.strerror}") from None
    return http.server_port


def tracer_for(settings: FaultSettings):
    """A tracer when OTEL_TRACES_EXPORTER names an exporter (the standard OTEL_* variables), else None."""
    if os.environ.get("OTEL_TRACES_EXPORTER", "none").lower() == "none":
        return None
    from harness.core.tracing import setup_tracing

    return setup_tracing(settings.service)


def announce(args: argparse.Namespace, port: int, extra: dict) -> None:
    """`--port-file` (the port) and `--ready-file` ({host, port, pid, …extra}, replaced whole, so a reader
    never sees half of it): what a parent waits for once this process serves."""
    if args.port_file:
        with open(args.port_file, "w") as fh:
            fh.write(str(port))
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"host": args.host, "port": port, **extra, "pid": os.getpid()}, fh)
        os.replace(tmp, args.ready_file)


#: How long calls in flight may finish once SIGINT/SIGTERM came, and how long the audit lines left may take
STOP_GRACE_S = 1.0
AUDIT_FLUSH_S = 2.0


async def serve_until_signal(server: aio.Server, *closing, ready: Callable[[], None] = lambda: None) -> int:
    """What `drill serve` and `drill proxy` do once serving: the one-way stop (SIGUSR1, `drill stop`), the audit
    writer, the startup heap frozen, SIGINT and SIGTERM caught; then `ready()` (the ready file: a parent that
    signals as soon as it sees it is heard); at SIGINT or SIGTERM, the server stopped (calls in flight get
    STOP_GRACE_S), each of `closing` closed (channels; None is skipped) and the audit lines flushed. 0."""
    install_stop_signal()  # SIGUSR1 (`drill stop`): injection off for the life of this process
    audit.start_writer()  # audit lines leave through a bounded queue: a slow log sink never blocks a call
    freeze_startup_heap()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    ready()
    await stop.wait()
    await server.stop(grace=STOP_GRACE_S)
    for resource in closing:
        if resource is not None:
            await resource.close()
    audit.flush(AUDIT_FLUSH_S)
    return 0


def freeze_startup_heap() -> None:
    """Once serving: collect, then keep every object alive now out of later collections (`gc.freeze`).

    Calls held by a delay keep their objects alive through the collector's young
    generations, so a drill of delayed calls brings full collections every few
    seconds; each would scan the whole startup heap (grpc, protobuf, OpenTelemetry)
    while every delayed call due meanwhile waits. Frozen, a full collection scans
    only what came after (benchmarks/delay_accuracy.py).
    """
    gc.collect()
    gc.freeze()
