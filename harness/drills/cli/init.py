"""`drill init`: a stack file written for you, from a service's own methods, then its dry run.

Two forms. `drill init --proxy --upstream HOST:PORT --out FILE` is for a service in any language:
the file puts `drill proxy` in front of it (`stack.proxy`, started by the runner per trial).
`drill init --target HOST:PORT --out FILE` is for a service with the interceptors installed: the
load calls it and its `/metrics` (`--metrics`) are the hop's series. Either way the methods come
from `--proto` (with `--proto-path`), `--descriptor-set`, or the service's server reflection
(`harness.protos`). The command checks what it can at once (every local input, then the service's
address: refused or silent is exit 1 within a few seconds, before reflection is asked), prints the
methods with their kinds and which is the edge, writes the file (`plan.starter` words it; an
existing file is kept unless `--force`), prints it, and runs `drill run FILE --dry-run` through the
same code (`cli.run.execute`): it exits as the dry run exits.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re

from harness import protos
from harness.core import cliargs
from harness.core.errors import BadInput, DrillError, RunFailed
from harness.drills.plan import starter
from harness.drills.plan.sections import HOP_NAME
from harness.drills.stack.edge import Reach, reach
from harness.drills.stack.targets import port_taken

#: The proxy's ports when none are given: docs/proxy.md's, or the next free ones after them
PROXY_PORT, PROXY_METRICS_PORT = 50151, 9565
#: How many ports after a default are tried when it is taken
PORT_TRIES = 100
#: docs/stacks.md's own-service example serves its /metrics on this port of the service's host
METRICS_PORT = 9464
#: Each step of reaching the service (connect; its first HTTP/2 frame) at most this long: 2 × 2 s < 5 s
REACH_S = 2.0
#: How long each question to the service's server reflection may take
REFLECTION_S = 5.0
#: The seed when none is given (the plan's default)
SEED = 42


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--proxy", action="store_true",
                   help="a service in any language, left unchanged: drill proxy in front of it (with --upstream)")
    p.add_argument("--upstream", type=cliargs.host_port, default=None, help="--proxy: the service, HOST:PORT")
    p.add_argument("--target", type=cliargs.host_port, default=None,
                   help="a service with the drill interceptors installed, HOST:PORT (the load calls it)")
    p.add_argument("--metrics", type=cliargs.http_url, default=None,
                   help=f"--target: its /metrics URL (default http://HOST:{METRICS_PORT}/metrics)")
    p.add_argument("--proto", default=None, help="the service's .proto (needs grpcio-tools); else its reflection")
    p.add_argument("--proto-path", action="append", default=[],
                   help="import path for --proto (repeatable; default: the .proto's folder)")
    p.add_argument("--descriptor-set", default=None,
                   help="the service's methods as a descriptor set (protoc --include_imports "
                   "--descriptor_set_out=FILE); else its reflection")
    p.add_argument("--method", default=None,
                   help="the edge: Service/Method or /pkg.Service/Method (default: the first unary method)")
    p.add_argument("--service", default=None,
                   help="the hop's name, what fault.target says (default: the proto service's name, lower-case)")
    p.add_argument("--port", type=cliargs.port(1), default=None,
                   help=f"--proxy: the proxy's gRPC port (default {PROXY_PORT}, or the next one free now)")
    p.add_argument("--metrics-port", type=cliargs.port(1), default=None,
                   help=f"--proxy: its /metrics port (default {PROXY_METRICS_PORT}, or the next one free now)")
    p.add_argument("--seed", type=cliargs.seed, default=SEED, help=f"the plan's seed (default {SEED})")
    p.add_argument("--out", required=True, help="the stack file to write (its folder must exist)")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.add_argument("--no-dry-run", action="store_true",
                   help="write the file only (with --proto or --descriptor-set the service need not be up)")


# --- local inputs -----------------------------------------------------------------------------------
def _mode(args: argparse.Namespace) -> str:
    """`proxy` or `target`, every option that belongs to the other refused."""
    proxy = args.proxy or args.upstream is not None
    if proxy and args.target:
        raise BadInput("init: give --proxy --upstream HOST:PORT (a service in any language) or --target "
                       "HOST:PORT (a service with the interceptors), not both")  # fmt: skip
    if not proxy and not args.target:
        raise BadInput("init: give --proxy --upstream HOST:PORT (a service in any language) or --target "
                       "HOST:PORT (a service with the interceptors)")  # fmt: skip
    if proxy and args.upstream is None:
        raise BadInput("init: --proxy needs --upstream HOST:PORT: the service the proxy forwards to")
    if proxy and args.metrics:
        raise BadInput("init: --metrics is for --target; the proxy serves its own /metrics (--metrics-port)")
    if not proxy and (args.port is not None or args.metrics_port is not None):
        raise BadInput("init: --port and --metrics-port are the proxy's (--proxy); --target names the service")
    return "proxy" if proxy else "target"


def _check_types(args: argparse.Namespace) -> None:
    if args.proto and args.descriptor_set:
        raise BadInput("init: give --proto or --descriptor-set, not both (neither = the service's reflection)")
    if args.proto_path and not args.proto:
        raise BadInput("init: --proto-path applies to --proto; give --proto too")


def _out(args: argparse.Namespace) -> pathlib.Path:
    out = pathlib.Path(args.out)
    if out.is_dir():
        raise BadInput(f"init: --out {args.out}: is a folder; name the stack file to write (e.g. {out / 'stack.yaml'})")
    folder = out.parent
    if not folder.is_dir():
        raise BadInput(f"init: --out {args.out}: no folder {str(folder)!r} to write it in")
    if not os.access(folder, os.W_OK):
        raise BadInput(f"init: --out {args.out}: folder {str(folder)!r} is not writable")
    if out.exists() and not args.force:
        raise BadInput(f"init: --out {args.out} exists; pass --force to overwrite it")
    return out


def pick_port(given: int | None, default: int, option: str, taken: tuple[int, ...] = ()) -> tuple[int, str]:
    """A port for the proxy and how it was chosen, in words: `given` if free now (else bad input), else `default`
    or the first free one after it."""
    if given is not None:
        if given in taken or port_taken(given) is not None:
            raise BadInput(f"init: {option} {given}: in use on 127.0.0.1 now; give a free one (or leave "
                           f"{option} out)")  # fmt: skip
        return given, f"{option} {given}, free now"
    for port in range(default, min(default + PORT_TRIES, 65536)):
        if port not in taken and port_taken(port) is None:
            why = "free now" if port == default else f"free now ({default} is taken)"
            return port, f"{port}, {why}; {option} picks another"
    raise BadInput(f"init: no free port in {default}-{default + PORT_TRIES - 1} on 127.0.0.1: give {option}")


# --- the service ------------------------------------------------------------------------------------
def reach_service(address: str, option: str) -> None:
    """The service at `address` accepts a connection and answers as a gRPC server, each within REACH_S (one
    connection, `edge.reach`): a refused or silent address is a failed run (exit 1), one that answers otherwise
    bad input (exit 2)."""
    how, detail = reach(address, REACH_S, REACH_S)
    if how is Reach.GRPC:
        return
    if how is Reach.NOT_GRPC:
        raise BadInput(f"init: {option} {address}: answered, but not as a gRPC server (gRPC over TLS is not "
                       "supported)")  # fmt: skip
    raise RunFailed({
        Reach.REFUSED: f"init: {option} {address}: connection refused; is the service running, listening there?",
        Reach.NO_CONNECTION: f"init: {option} {address}: no connection in {REACH_S:g} s (unreachable)",
        Reach.SILENT: f"init: {option} {address}: accepts a connection but answers nothing in {REACH_S:g} s (not a "
                      "gRPC server, or a stuck one)",
        Reach.UNRESOLVED: f"init: {option} {address}: cannot connect ({detail})",
        Reach.ERROR: f"init: {option} {address}: cannot connect ({detail})",
    }[how])  # fmt: skip


def methods_of(args: argparse.Namespace, address: str, option: str) -> tuple[list, str]:
    """The service's methods (`harness.protos.list_methods`) and where they came from, in words."""
    if args.proto:
        return protos.list_methods(proto=args.proto, include=args.proto_path, option="init: --proto"), args.proto
    if args.descriptor_set:
        return (protos.list_methods(descriptor_set=args.descriptor_set, option="init: --descriptor-set"),
                args.descriptor_set)  # fmt: skip
    try:
        return protos.list_methods(target=address, timeout_s=REFLECTION_S), f"reflection at {address}"
    except protos.ReflectionError as err:
        if err.code == "UNIMPLEMENTED":
            raise BadInput(f"init: {option} {address} offers no server reflection: pass --proto FILE (the "
                           "service's .proto) or --descriptor-set FILE (protoc --include_imports "
                           "--descriptor_set_out=FILE)") from None  # fmt: skip
        raise RunFailed(f"init: {option} {address}: its server reflection did not answer ({err.code})") from None


def _types(args: argparse.Namespace, out: pathlib.Path, said: str) -> starter.TypesFrom:
    """Where the file's types come from, paths relative to its folder."""
    here = out.parent.resolve()

    def rel(path: str) -> str:  # absolute when the two share nothing but the root
        full = pathlib.Path(path).resolve()
        return str(full) if os.path.commonpath([full, here]) == os.sep else os.path.relpath(full, here)

    if args.descriptor_set:
        return starter.TypesFrom(descriptor_set=rel(args.descriptor_set), said=said)
    if not args.proto:
        return starter.TypesFrom(said=said)
    return starter.TypesFrom(proto=rel(args.proto), proto_path=tuple(rel(d) for d in args.proto_path), said=said)


# --- the command ------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    mode = _mode(args)
    _check_types(args)
    if args.service is not None and not re.fullmatch(HOP_NAME, args.service):
        raise BadInput(f"init: --service {args.service!r}: a hop's name is lower-case letters, digits and '-', "
                       "starting with a letter")  # fmt: skip
    out = _out(args)
    address, option = (args.upstream, "--upstream") if mode == "proxy" else (args.target, "--target")
    if mode == "proxy":
        port, port_said = pick_port(args.port, PROXY_PORT, "--port")
        metrics_port, metrics_said = pick_port(args.metrics_port, PROXY_METRICS_PORT, "--metrics-port", (port,))
    methods, said, edge, why = _listing(args, address, option)
    service = starter.short(edge).rpartition("/")[0]
    hop = args.service or starter.hop_name(service)

    print(f"methods of {address} (from {said}):")
    print(starter.methods_table(methods, edge))
    print(f"the edge: {starter.short(edge)}" + (" (--method)" if why == "--method" else
                                                 f", {why}; --method NAME picks another"))  # fmt: skip
    print(f"the hop: {hop} (" + ("--service)" if args.service else
                                 f"from {service}; --service NAME names it otherwise)"))  # fmt: skip
    if mode == "proxy":
        print(f"the proxy: gRPC port {port_said}; /metrics port {metrics_said}")
        front: starter.ViaProxy | starter.Direct = starter.ViaProxy(address, port, metrics_port)
    else:
        host = cliargs.split_host_port(address)[0]
        front = starter.Direct(address, args.metrics or f"http://{f'[{host}]' if ':' in host else host}:"
                                                       f"{METRICS_PORT}/metrics")  # fmt: skip
        print(f"the hop's /metrics: {front.metrics}" + ("" if args.metrics else " (--metrics URL names another)"))
    types = _types(args, out, said)
    text = starter.stack_file(methods, edge, hop=hop, seed=args.seed, types=types, front=front,
                              run_as=f"drill run {args.out}")  # fmt: skip
    out.write_text(text)
    print(f"\nwrote {args.out}:\n\n{text}")
    if args.no_dry_run:
        print(f"no dry run (--no-dry-run): check it with `drill run {args.out} --dry-run`")
        return 0
    return _dry_run(args.out)


def _listing(args: argparse.Namespace, address: str, option: str) -> tuple[list, str, protos.Method, str]:
    """The methods, where they came from, the edge and why. A file's types are read and the edge picked before
    the service is reached (bad input first, whatever the network); reflection asks the service itself."""
    from_file = bool(args.proto or args.descriptor_set)
    if from_file:
        methods, said = methods_of(args, address, option)
        edge, why = starter.pick_edge(methods, args.method)
    if not (args.no_dry_run and from_file):  # the service is asked (reflection) or the dry run needs it up
        reach_service(address, option)
    if not from_file:
        methods, said = methods_of(args, address, option)
        edge, why = starter.pick_edge(methods, args.method)
    return methods, said, edge, why


def _dry_run(path: str) -> int:
    """`drill run PATH --dry-run`, through the code that command runs; its verdict in one line after it."""
    from harness.drills.cli import run as run_command

    parser = argparse.ArgumentParser(prog="drill run")
    run_command.add_arguments(parser)
    args = parser.parse_args([path, "--dry-run"])
    print("", flush=True)
    try:
        code = run_command.execute(path, args, command=f"drill run {path}")
    except DrillError:
        print(f"\ndry run failed: {path} is written; fix what the line below says, then "
              f"`drill run {path} --dry-run`", flush=True)  # fmt: skip
        raise
    print(f"\ndry run passed: `drill run {path}` runs this drill", flush=True)
    return code
