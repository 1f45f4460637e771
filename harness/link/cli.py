"""`drill link`: a relay with toxics in front of one service or replica, or an empty one driven by its admin API.

`drill link --upstream HOST:PORT --port P` starts with one link (named `--name`, toxics from `--toxic JSON`);
`drill link --admin-port A` serves Toxiproxy's API (`harness.link.admin`), alone like `toxiproxy-server` or
beside the first link. Both bind 127.0.0.1 unless `--host` (the link) or `--admin-host` (the API, which has
no authentication) say otherwise; `--port 0` takes any free port, `--port-file` and `--ready-file` say which
as `drill proxy` does. `--seed` (else DRILL_FAULT_SEED / DRILL_FAULT_DRILL_ID) seeds the draws of
`toxicity`; the drill tenants are DRILL_FAULT_TENANTS' (default `tenant-drill`); `--max-faulted` caps the
connections toxics act on at once. The one-way stop (SIGUSR1, `drill stop PID`, the file named by
DRILL_FAULT_STOP_FILE) removes every toxic at once and refuses new ones for the life of the process.
Runs until SIGINT or SIGTERM, which delete its kernel-mode rules on the way out (and it deletes, at start,
those a relay killed outright left: `harness.link.kernel`).

With `--enable-faults` (off by default; DRILL_FAULT_ENABLED alone does not turn a relay into an injecting hop, and
its /metrics then publish no fault switch) its links also carry the drill's per-call faults (`harness.link.calls`):
the same settings as `drill proxy` and the interceptors (`settings_from_args`: DRILL_FAULT_* with `--service`,
`--seed`, `--instance-id` over them), each
method's kind from `--descriptor-set` or `--proto` (else every method is judged a bidi stream, as `drill proxy`
judges one it does not know), and the stop releases the calls they hold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal

from harness import protos
from harness.core import cliargs
from harness.core.errors import BadInput, RunFailed
from harness.core.faults import Kind
from harness.core.safety import PROCESS_STOP, install_stop_signal
from harness.core.settings import FaultSettings
from harness.demo.lifecycle import announce, check_free, serve_metrics, settings_from_args
from harness.link import kernel
from harness.link.admin import serve_admin
from harness.link.calls import LinkCalls
from harness.link.links import DEFAULT_MAX_FAULTED, LinkSet
from harness.link.toxics import ToxicError, parse_toxic

log = logging.getLogger("drill.link")
MAX_FAULTED = 100_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--upstream", type=cliargs.host_port, default=None,
                   help="the service the first link relays to, HOST:PORT (needs --port)")  # fmt: skip
    p.add_argument("--port", type=cliargs.port(0), default=None, help="the first link's port (0 = any free port)")
    p.add_argument("--name", default="link", help="the first link's name in the admin API and metrics")
    p.add_argument("--toxic", action="append", default=[], metavar="JSON",
                   help="a toxic on the first link, Toxiproxy's JSON (repeatable)")  # fmt: skip
    p.add_argument("--admin-port", type=cliargs.port(0), default=None,
                   help="serve Toxiproxy's admin API here (0 = any free port; Toxiproxy's is 8474)")  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="bind address of the first link (default 127.0.0.1)")
    p.add_argument("--admin-host", default="127.0.0.1",
                   help="bind address of the admin API, which has no authentication, as Toxiproxy's (default "
                   "127.0.0.1: keep it on loopback)")  # fmt: skip
    p.add_argument("--metrics-port", type=cliargs.integer(-1, 65535, "a port (0 = off, -1 = any free port)"),
                   default=0, help="Prometheus /metrics port (0 = off, the default; -1 = any free port)")  # fmt: skip
    p.add_argument("--seed", type=cliargs.seed, default=None,
                   help="seed of the toxicity draws (else DRILL_FAULT_SEED, DRILL_FAULT_DRILL_ID, 0)")  # fmt: skip
    p.add_argument("--max-faulted", type=cliargs.integer(1, MAX_FAULTED, "connections"), default=DEFAULT_MAX_FAULTED,
                   help="connections toxics act on at once; past it a connection passes untouched "
                   f"(default {DEFAULT_MAX_FAULTED})")  # fmt: skip
    p.add_argument("--event-loop", choices=("auto", "uvloop", "asyncio"), default="auto",
                   help="the event loop: uvloop (less CPU per call, docs/link.md) or asyncio's own; "
                   "auto (the default): uvloop where installed")  # fmt: skip
    p.add_argument("--enable-faults", action="store_true",
                   help="carry the drill's per-call faults (abort, delay, drop, @served, @after, @read) on every link, "
                   "decided as drill proxy decides them, with its DRILL_FAULT_* settings (off by default)")  # fmt: skip
    p.add_argument("--service", default=os.environ.get("DRILL_SERVICE", "drill"),
                   help="the upstream's service name for call faults (labels, x-fault-target)")  # fmt: skip
    p.add_argument("--instance-id", default=None, help="instance id (else DRILL_INSTANCE_ID or host:pid)")
    p.add_argument("--descriptor-set", default=None,
                   help="each method's kind for call faults (protoc --descriptor_set_out --include_imports)")
    p.add_argument("--proto", default=None, help="each method's kind for call faults, from a .proto")
    p.add_argument("--proto-path", action="append", default=[], help="import path for --proto (repeatable)")
    p.set_defaults(max_in_flight=None)  # `settings_from_args` reads it; a link bounds no calls in flight itself
    p.add_argument("--port-file", type=cliargs.new_file, default=None,
                   help="write the first link's port (else the admin port) here once serving")  # fmt: skip
    p.add_argument("--ready-file", type=cliargs.new_file, default=None,
                   help="write {host, port, link_port, admin_port, metrics_port, pid} (JSON) once serving")  # fmt: skip


def _toxics(args: argparse.Namespace) -> list:
    out = []
    for text in args.toxic:
        try:
            out.append(parse_toxic(json.loads(text)))
        except ValueError as exc:  # json's errors and ToxicError
            raise BadInput(f"link: --toxic {text}: {exc}") from None
    if len({t.name for t in out}) < len(out):
        raise BadInput("link: two --toxic share a name (name them: \"name\": …)")
    return out


def run(args: argparse.Namespace) -> int:
    if args.upstream is None and args.admin_port is None:
        raise BadInput("link: give --upstream HOST:PORT --port P, or --admin-port A (or both)")
    if (args.upstream is None) != (args.port is None):
        raise BadInput("link: --upstream and --port go together")
    if args.toxic and args.upstream is None:
        raise BadInput("link: --toxic applies to the first link: give --upstream and --port")
    toxics = _toxics(args)
    settings = settings_from_args(args, "link")
    kinds = _kinds(args)
    if kinds is not None:  # an injecting hop: its audit lines (INFO) on stderr, as `drill proxy` writes them
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return run_loop(args.event_loop, _link(args, settings, toxics, kinds))


def _kinds(args: argparse.Namespace) -> dict[str, Kind] | None:
    """Each method's kind for call faults (None: call faults off: no `--enable-faults`)."""
    given = args.descriptor_set or args.proto or args.proto_path
    if not args.enable_faults:
        if given:
            raise BadInput("link: --descriptor-set/--proto apply to call faults: give --enable-faults too")
        return None
    if args.descriptor_set and args.proto:
        raise BadInput("link: give --descriptor-set or --proto, not both")
    if args.proto_path and not args.proto:
        raise BadInput("link: --proto-path applies to --proto; give --proto too")
    if args.descriptor_set:
        with protos.from_descriptor_set(args.descriptor_set, option="link: --descriptor-set") as types:
            return types.kinds()
    if args.proto:
        with protos.from_proto(args.proto, args.proto_path, option="link: --proto") as types:
            return types.kinds()
    return {}


def wire_stop(links: LinkSet, settings: FaultSettings) -> asyncio.Event:
    """The process's one-way stop (SIGUSR1, `drill stop`, the stop file) wired to `links`, and the event SIGINT or
    SIGTERM sets: what `drill link` and `drill proxy --plane link` wait on before they close their links."""
    loop = asyncio.get_running_loop()
    install_stop_signal()
    PROCESS_STOP.on_trip(lambda: loop.call_soon_threadsafe(links.stop, PROCESS_STOP.reason))
    PROCESS_STOP.watch_file(settings.stop_file)
    done = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, done.set)
    return done


def run_loop(choice: str, main) -> int:
    """Run `main` on uvloop (`auto`: where it is installed) or on asyncio's own loop."""
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                main.close()
                raise BadInput("link: --event-loop uvloop: uvloop is not installed (pip install uvloop)") from None
        else:
            return uvloop.run(main)
    return asyncio.run(main)


async def _link(args: argparse.Namespace, settings: FaultSettings, toxics: list, kinds: dict | None) -> int:
    calls = None if kinds is None else LinkCalls(settings, kinds=kinds)  # the process's stop (PROCESS_STOP)
    links = LinkSet(seed=settings.seed, drill_tenants=settings.tenants, max_faulted=args.max_faulted, calls=calls)
    kernel.clean_stale()  # the tables of a relay killed outright (kernel mode), where this one may
    for host, port in ((args.host, args.port), (args.admin_host, args.admin_port)):
        if port:
            check_free(host, port, "link")
    metrics_port = serve_metrics(args, "link")
    port = admin_port = 0
    try:
        if args.upstream is not None:
            link = await links.add(args.name, f"{args.host}:{args.port}", args.upstream)
            for toxic in toxics:
                link.add_toxic(toxic)
            port = link.port
        admin = None
        if args.admin_port is not None:
            admin = await serve_admin(links, args.admin_host, args.admin_port)
            admin_port = admin.sockets[0].getsockname()[1]
    except ToxicError as exc:
        raise RunFailed(f"link: {exc}") from None
    except OSError as exc:
        raise RunFailed(f"link: cannot listen on {args.admin_host}:{args.admin_port}: {exc.strerror or exc}") from None
    done = wire_stop(links, settings)
    log.warning("link on %s: %s → %s, admin API on :%s, seed %d, at most %d faulted connections, call faults %s, "
                "metrics on :%s", args.host, port or "-", args.upstream or "-", admin_port or "-", settings.seed,
                args.max_faulted, f"ON for {settings.service} ({len(kinds)} methods known)" if calls else "off",
                metrics_port or "-")  # fmt: skip
    # the port file holds the first link's port, else (admin API alone) the API's
    files = argparse.Namespace(port_file=args.port_file, ready_file=args.ready_file, host=args.host)
    announce(files, port or admin_port, {"link_port": port, "admin_port": admin_port, "metrics_port": metrics_port})
    await done.wait()
    if admin is not None:
        admin.close()
    await links.close()
    return 0

