"""Deadline propagation: turn the incoming deadline into outgoing ones, minus a per-hop margin.

Python gRPC has no automatic deadline propagation, and `time_remaining()` is None
when the caller set no deadline: that must never be passed on as a timeout (nor
any absurdly large value). `outgoing_timeout` is the server-side helper; the
`DeadlinePolicy` adds the early give-up: when less than `min_remaining_s` is left
after the margin, answer DEADLINE_EXCEEDED without calling downstream.
"""

from __future__ import annotations

import dataclasses

#: Remaining times above this are treated as "no deadline" (grpc reports some unbounded deadlines as huge).
UNBOUNDED_S = 10 * 365 * 24 * 3600.0


class EarlyGiveUp(Exception):
    """Too little time left to call downstream usefully."""

    def __init__(self, remaining: float) -> None:
        super().__init__(f"deadline too close to call downstream ({remaining * 1000:.1f} ms left)")
        self.remaining = remaining


def bounded(remaining: float | None) -> float | None:
    """`remaining` when it is a real, finite deadline; None for "no deadline"."""
    if remaining is None or remaining != remaining or remaining >= UNBOUNDED_S:
        return None
    return remaining


def outgoing_timeout(
    remaining: float | None, margin_s: float = 0.0, min_remaining_s: float = 0.0, cap_s: float | None = None
) -> float | None:
    """Timeout for a downstream call from the incoming `time_remaining()`.

    None in, None out (or `cap_s`): an unbounded deadline is never passed on.
    Raises EarlyGiveUp when less than `min_remaining_s` would be left.
    """
    left = bounded(remaining)
    if left is None:
        return cap_s
    left -= margin_s
    if left < max(min_remaining_s, 0.0) or left <= 0:
        raise EarlyGiveUp(left)
    return left if cap_s is None else min(left, cap_s)


@dataclasses.dataclass(frozen=True)
class DeadlinePolicy:
    """How one hop derives the deadline of a logical downstream call (covering all its attempts)."""

    propagate: bool = False
    hop_margin_s: float = 0.01
    min_remaining_s: float = 0.005
    #: Deadline of a logical call when none is inherited (None = unbounded).
    total_s: float | None = None

    def call_budget(self, incoming_remaining: float | None, explicit_s: float | None = None) -> float | None:
        """Seconds the logical call may take: min of explicit, total and (if propagating) inherited."""
        candidates = [s for s in (explicit_s, self.total_s) if s is not None]
        if self.propagate:
            inherited = outgoing_timeout(incoming_remaining, self.hop_margin_s, self.min_remaining_s)
            if inherited is not None:
                candidates.append(inherited)
        return min(candidates) if candidates else None
