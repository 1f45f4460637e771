"""Locust load profiles for drills: organic and drill traffic, drill phases, client-side metrics.

Importable machinery lives in modules (`grpc_user`, `users`, `method_target`, `shape`,
`hooks`, `client_metrics`, `phase`, `options`); locustfiles stay short and profiles are
Locust config files under `loadtests/profiles/`. Importing this package imports
neither locust nor gevent: only `options` and `phase` are safe in plain processes.
"""

import pathlib

#: Directory of the profile config files.
PROFILES_DIR = pathlib.Path(__file__).resolve().parent / "profiles"
#: The locustfile every profile points at.
LOCUSTFILE = pathlib.Path(__file__).resolve().parent / "locustfile.py"
