"""The error types every `drill` subcommand's expected failures derive from, and their exit codes.

`harness.cli` prints any `DrillError` as one line, `drill: MESSAGE`, and exits
with its code (contracts §11): 2 bad input or usage, 1 the run failed, 3 a
`--fail-on` condition held, 4 the drill's fault did not land as planned, 5 a guard stopped a trial.
Library users catch the same types.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class DrillError(Exception):
    """An expected failure with a one-line message for the user."""

    exit_code = 1


class BadInput(DrillError, ValueError):
    """The user's input cannot work: a plan, a configuration, a flag, a setting (exit 2)."""

    exit_code = 2


class RunFailed(DrillError, RuntimeError):
    """Started but could not finish: a port in use, a service that died, a server unreachable (exit 1)."""

    exit_code = 1


class ConditionFailed(DrillError):
    """A `--fail-on` condition held (exit 3)."""

    exit_code = 3


class FaultNotLanded(DrillError):
    """The drill ran but its fault did not land as planned (exit 4): no predicted hit landed, or ids the seed
    does not predict were hit, or the target refused drill calls. A run's `--fail-on` is not judged then (a
    gate over a drill that never tested its fault would pass for nothing); a failed run (exit 1) comes first."""

    exit_code = 4


class GuardTripped(DrillError):
    """A plan's guard stopped a trial's fault while it ran (exit 5): the run finished, users were hurt beyond
    what the plan allows. Outranks exits 3 and 4 (it names why), not 1 (a run that failed)."""

    exit_code = 5


def need_extra(module: str, extra: str, feature: str) -> ModuleType:
    """Import `module` for `feature`, or refuse with one line naming the extra that brings it.

    The core install (`pip install drill-harness`) runs every drill; optional extras (`dashboards`, `load`) are
    imported only where a feature uses them, through this function, so a missing one is a clear line, not a crash.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise BadInput(f"{feature} needs the {extra!r} extra: pip install 'drill-harness[{extra}]'") from None
