"""The `drill` command. Each subcommand lives in its own module with `add_arguments` and `run`.

Modules are imported lazily per subcommand so `drill hits` never pays for
Locust, rich or the Grafana SDK. Every expected failure ends here as one line
on stderr, `drill: MESSAGE`, with its exit code (`harness.core.errors`): 2 bad
input or usage, 1 the run failed, 3 a `--fail-on` condition held, 4 a fault phase
that expected hits saw none land, 5 a guard stopped injection. Set
`DRILL_DEBUG=1` to see the traceback of an unexpected error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

#: name -> (module, one-line help). A module provides add_arguments(parser) and run(args) -> int.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "harness.drills.cli.demo",
        "run the embedded demo drill (topology + load + MTTR report), no Docker",
    ),
    "init": (
        "harness.drills.cli.init",
        "write a stack file for your service from its methods (through drill proxy, or its interceptors), "
        "then dry-run it",
    ),
    "run": ("harness.drills.cli.run", "run a drill plan (YAML) and write results.json and report.html"),
    "sweep": (
        "harness.drills.cli.sweep",
        "find where each configuration stops recovering: a trigger bisected, with confidence",
    ),
    "analyze": (
        "harness.drills.cli.analyze",
        "compute MTTR and the report from a Prometheus that watched a drill",
    ),
    "serve": ("harness.demo.serve", "serve one demo hop with the fault interceptor"),
    "proxy": ("harness.proxy.cli", "forward every call to a service in any language, with the fault interceptor"),
    "link": ("harness.link.cli", "relay connections to a service with network and HTTP/2 faults (Toxiproxy's API)"),
    "hits": ("harness.drills.cli.hits", "preview which request ids (stdin) a directive would hit"),
    "client": ("harness.demo.client_cli", "send tagged and untagged calls to a service and summarise"),
    "probe": ("harness.demo.probe", "socket-level probes (half-open connections)"),
    "stop": ("harness.demo.stop", "emergency stop: turn fault injection off for good in running servers (SIGUSR1)"),
    "dashboards": ("harness.dashboards.cli", "build or push the Grafana dashboards"),
}

#: `drill proxy --plane`: the module that runs a proxy on each data plane other than its own (grpc.aio). The choice
#: is made here, above both: `harness.proxy` and `harness.link` are siblings that import neither the other.
PLANES: dict[tuple[str, str], str] = {("proxy", "link"): "harness.link.plane"}


class _Parser(argparse.ArgumentParser):
    """argparse with the house error style: one line `drill: …`, exit 2 (no usage dump)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        sub = self.prog.removeprefix("drill").strip()
        print(f"drill: {sub + ': ' if sub else ''}{message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or (with `only`) one that imports just that subcommand's module."""
    parser = _Parser(prog="drill", description="Chaos drills for gRPC services, with measured MTTR.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    parser.subcommands = {}
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        parser.subcommands[name] = p
        p.set_defaults(_module=module_name)
        if only is not None and name != only:
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            if exc.name and exc.name.startswith("harness"):
                raise
            p.set_defaults(_missing=str(exc))
            continue
        module.add_arguments(p)
    return parser


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    first, _, rest = text.partition("\n")
    return first + (" (…)" if rest.strip() else "")


def main(argv: list[str] | None = None) -> int:
    # gRPC's fork handlers print "skipping fork() handlers" on every subprocess a drill starts
    # while channels are busy; the children exec at once, so the handlers are not needed.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), "")
    parser = build_parser(only=command if command in COMMANDS else "")
    args, extra = parser.parse_known_args(argv)
    if extra:  # name the subcommand whose --help lists what it takes (`drill run --help`)
        where = parser.subcommands.get(getattr(args, "command", None) or "", parser)
        where.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    if getattr(args, "_missing", None):
        print(f"drill: {args.command}: needs an optional dependency ({args._missing})", file=sys.stderr)
        return 2
    from harness.core.errors import DrillError

    try:
        module = importlib.import_module(PLANES.get((args.command, getattr(args, "plane", None)), args._module))
        return int(module.run(args) or 0)
    except DrillError as exc:
        print(f"drill: {_one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("drill: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `drill hits | head`
        return 0
    except Exception as exc:  # noqa: BLE001 - the promise: never a traceback
        if os.environ.get("DRILL_DEBUG"):
            raise
        print(f"drill: internal error: {type(exc).__name__}: {_one_line(exc)} (DRILL_DEBUG=1 shows where)",
              file=sys.stderr)  # fmt: skip
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
