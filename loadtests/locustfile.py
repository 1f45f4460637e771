"""Drill profile locustfile: organic + drill gRPC users and the drill phase shape.

Run a profile from the repo root:
    locust --config loadtests/profiles/smoke.conf --host 127.0.0.1:50051
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # run from anywhere

from loadtests import hooks  # noqa: E402,F401  (--drill-* arguments, /metrics, phases)
from loadtests.shape import DrillShape  # noqa: E402,F401
from loadtests.users import DrillUser, OrganicUser  # noqa: E402,F401
