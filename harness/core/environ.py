"""This process's environment, copied so that another thread's change cannot break the copy.

`dict(os.environ)` lists the keys and then reads each one: a key another thread removes between the two raises
KeyError. A test runner does exactly that (pytest sets and deletes PYTEST_CURRENT_TEST at each phase of a test)
while a drill, a stack or a scenario run side by side starts its processes in threads of its own; so can any
program that embeds the harness. One place for it, used wherever a child's environment is built.
"""

from __future__ import annotations

import os


def environ_now(**extra: str) -> dict[str, str]:
    """A copy of `os.environ` as it is now (a key removed while it is copied is left out), with `extra` over it."""
    env = {}
    for key in list(os.environ):  # one snapshot of the keys (a C-level copy, atomic under the GIL)
        value = os.environ.get(key)  # None: removed since
        if value is not None:
            env[key] = value
    env.update(extra)
    return env
