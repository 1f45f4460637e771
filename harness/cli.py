"""The `drill` command. Each subcommand lives in its own module with `add_arguments` and `run`.

Modules are imported lazily per subcommand so `drill hits` never pays for
Locust, rich or the Grafana SDK.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: name -> (module, one-line help). A module provides add_arguments(parser) and run(args) -> int.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "harness.drills.cli_demo",
        "run the embedded demo drill (topology + load + MTTR report), no Docker",
    ),
    "run": ("harness.drills.cli_run", "run a drill plan (YAML) and write results.json and report.html"),
    "analyze": (
        "harness.drills.cli_analyze",
        "compute MTTR and the report from a Prometheus that watched a drill",
    ),
    "serve": ("harness.demo.serve", "serve one demo hop with the fault interceptor"),
    "hits": ("harness.drills.cli_hits", "preview which request ids (stdin) a directive would hit"),
    "client": ("harness.demo.client_cli", "send tagged and untagged calls to a service and summarise"),
    "probe": ("harness.demo.probe", "socket-level probes (half-open connections)"),
    "dashboards": ("harness.dashboards.cli", "build or push the Grafana dashboards"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or (with `only`) one that imports just that subcommand's module."""
    parser = argparse.ArgumentParser(
        prog="drill", description="Chaos drills for gRPC services, with measured MTTR."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module_name)
        if only is not None and name != only:
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            if exc.name and exc.name.startswith("harness"):
                p.set_defaults(_missing=str(exc))
                continue
            raise
        module.add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), "")
    parser = build_parser(only=command if command in COMMANDS else "")
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    if getattr(args, "_missing", None):
        print(f"drill {args.command}: not available in this build ({args._missing})", file=sys.stderr)
        return 2
    module = importlib.import_module(args._module)
    return int(module.run(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
