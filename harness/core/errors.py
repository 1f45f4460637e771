"""The error types every `drill` subcommand's expected failures derive from, and their exit codes.

`harness.cli` prints any `DrillError` as one line, `drill: MESSAGE`, and exits
with its code (contracts §11): 2 bad input or usage, 1 the run failed, 3 a
`--fail-on` condition held. Library users catch the same types.
"""

from __future__ import annotations


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
