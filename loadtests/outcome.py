"""Whether a Locust run reached its target: the rule that makes a load whose calls all failed a failed run.

A run **reached its target** when at least one call was answered by it: OK, or failed with the
`x-drill-fault` marker (an injected fault: the service did what the drill asked). A run that sent calls
and got no such answer (every call failed on its own: the target down, unreachable, not serving the
method; or cancelled by the load itself) did not, and neither did a run that started and sent no call.
Such a run is a failed run: one line, exit 1, whatever `exit-code-on-error` says (which stays 0 in the
profiles: injected and collateral failures are what a drill is for).

Pure (no locust import): `hooks` counts Locust's stats into a `Tally` and asks `failure`.
"""

from __future__ import annotations

import collections
import dataclasses

#: What `grpc_user.GrpcStatusError` says of a failure the server marked as injected: `CODE (class, injected)`
INJECTED_MARK = ", injected)"


@dataclasses.dataclass
class Tally:
    """A run's calls as Locust counted them (the master's stats hold every worker's)."""

    sent: int = 0
    ok: int = 0
    injected: int = 0
    cancelled: int = 0
    #: failed calls by status name (`UNAVAILABLE`), injected or not
    failed: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    @property
    def answered(self) -> int:
        return self.ok + self.injected


def status_of(error: str) -> str:
    """`UNAVAILABLE` of `GrpcStatusError('UNAVAILABLE (server-fault, collateral)')` (Locust's repr of it on a
    worker's report) or of the plain message; the text itself when it is neither."""
    text = error.split("(", 1)[1] if error.startswith("GrpcStatusError(") else error
    return text.strip("'\" ").split(" ", 1)[0] or error


def failure(t: Tally) -> str | None:
    """The one line a run that did not reach its target ends with, or None when it did."""
    if t.answered:
        return None
    if not t.sent and not t.cancelled:
        return "no call was sent: the run reached no target"
    top = ", ".join(f"{n} {code}" for code, n in t.failed.most_common(3))
    more = " …" if len(t.failed) > 3 else ""
    cancelled = f", {t.cancelled} cancelled by the load" if t.cancelled else ""
    failed = sum(t.failed.values())
    return (f"no call reached the target: {t.sent + t.cancelled} calls, none OK and none failed by an injected "
            f"fault ({failed} failed: {top or 'none'}{more}{cancelled})")  # fmt: skip
