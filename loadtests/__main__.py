"""`python -m loadtests ARGS`: Locust (`locust ARGS`) with the `--drill-*` options registered first.

Locust prints `--help` before it imports a locustfile (`locust.argument_parser.parse_locustfile_option`),
and the drill options are registered by that import (`loadtests.hooks`, on `init_command_line_parser`),
so `locust --help` cannot list them; `python -m loadtests --help` does. Anything else runs as `locust`
would: the locustfile's own import of `hooks` finds it imported already.
"""

from __future__ import annotations

import sys

from locust.main import main

from loadtests import hooks  # noqa: F401  (registers the --drill-* options before Locust parses)

if __name__ == "__main__":
    sys.argv[0] = "locust"
    sys.exit(main())
