"""Switch commands for a compose stack run without the engine (tests/deploy/compose_local.py).

A drill's switch command runs in a process of its own, so the stack keeps its state (addresses,
PIDs, the compose shell's variables) in DIR/state.json and this command acts on it:

    python -m tests.deploy.compose_switch --state DIR up locust-master locust-worker -e LOCUST_WORKERS=2
    python -m tests.deploy.compose_switch --state DIR recreate -e DRILL_CONFIG=resilient   # as `up -d --wait`
    python -m tests.deploy.compose_switch --state DIR address gateway
    python -m tests.deploy.compose_switch --state DIR down
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from tests.conftest import ROOT
from tests.deploy.compose_local import ComposeError, ComposeLocal


def main(argv: list[str] | None = None) -> int:
    """For switch commands: `python -m tests.deploy.compose_switch --state DIR ACTION …`.

    up SERVICE… [-e K=V]    start the services (and their dependencies); returns once they started
                            and the healthchecks dependents wait for passed; state in DIR
    recreate [-e K=V]       like `K=V docker compose up -d --wait`: recreate what changed, wait healthy
    address SERVICE         print the service's first address
    down                    stop everything it started
    """
    p = argparse.ArgumentParser(prog="python -m tests.deploy.compose_switch", description=main.__doc__)
    p.add_argument("--state", required=True, type=pathlib.Path, help="working directory holding state.json")
    p.add_argument("--file", type=pathlib.Path, action="append", default=None,
                   help="a compose file (repeatable, merged in order; default compose/docker-compose.yml)")
    p.add_argument("action", choices=("up", "recreate", "address", "down"))
    p.add_argument("services", nargs="*")
    p.add_argument("-e", dest="env", action="append", default=[], help="KEY=VALUE of the compose shell")
    args = p.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    try:
        if args.action == "up":
            args.state.mkdir(parents=True, exist_ok=True)
            stack = ComposeLocal(args.file or [ROOT / "compose" / "docker-compose.yml"], args.state, args.services, env)
            stack.up()
            stack.save()
        elif args.action == "recreate":
            stack = ComposeLocal.load(args.state)
            print(" ".join(stack.recreate({**stack.env, **env})) or "nothing changed")
        elif args.action == "address":
            print(ComposeLocal.load(args.state).address(args.services[0]))
        else:
            ComposeLocal.load(args.state).down()
    except ComposeError as exc:
        print(f"compose_local: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
