"""The steps of a fault: what a flavour does at the start of a call, and at a message boundary of a stream.

`START_STEPS` says, per mode, where a fault that acts at the start of a call sits
around the handler (RUN): an abort or a drop instead of it, a delay after it
(a single response is late) or before it (a response stream's first message is
late), with the response headers first for `@headers=sent`. `SERVED_STEPS` says
the same for `@served`: the handler runs first, whatever the kind, and the fault
acts on its answer (the one response, or the end of a response stream). A
`Tripwire` is a fault that acts inside a stream (`@after=N`, `@read=N`): the
flavours report the messages to it and perform what it answers. The flavours own
only how to wait, abort and send headers (`server_aio`, `server_sync`).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from harness.core.faults import Mode

if TYPE_CHECKING:
    from harness.core.safety import EmergencyStop
    from harness.interceptors._server_pipeline import CallPlan


class Step(enum.Enum):
    """What a flavour does next for a call: wait (`CallPlan.wait_s`), abort, send the response headers
    (`@headers=sent`; already sent is fine), or run the handler."""

    WAIT = "wait"
    ABORT = "abort"
    HEADERS = "headers"
    RUN = "run"


PASS_STEPS = (Step.RUN,)
#: (mode, headers first, response streaming) -> the steps of a fault that acts at the start of the call.
START_STEPS = {
    (Mode.ABORT, False, False): (Step.ABORT,),
    (Mode.ABORT, True, False): (Step.HEADERS, Step.ABORT),
    (Mode.DROP, False, False): (Step.WAIT, Step.ABORT),
    (Mode.DROP, True, False): (Step.HEADERS, Step.WAIT, Step.ABORT),
    # contracts §3: the handler runs (and reads its request stream, if any), the one response is late
    (Mode.DELAY, False, False): (Step.RUN, Step.WAIT),
    (Mode.DELAY, True, False): (Step.RUN, Step.HEADERS, Step.WAIT),
    # a response stream's first message is late: nothing is read or sent until the wait is over
    (Mode.DELAY, False, True): (Step.WAIT, Step.RUN),
    (Mode.DELAY, True, True): (Step.HEADERS, Step.WAIT, Step.RUN),
}
for (_mode, _headers, _), _steps in list(START_STEPS.items()):
    if _mode is not Mode.DELAY:
        START_STEPS[(_mode, _headers, True)] = _steps
#: (mode, headers first) -> the steps of an `@served` fault: the service works and answers (RUN), then the fault
#: replaces its answer: a single response is never sent, a response stream's status is; a delay holds either.
SERVED_STEPS = {
    (Mode.ABORT, False): (Step.RUN, Step.ABORT),
    (Mode.ABORT, True): (Step.RUN, Step.HEADERS, Step.ABORT),
    (Mode.DROP, False): (Step.RUN, Step.WAIT, Step.ABORT),
    (Mode.DROP, True): (Step.RUN, Step.HEADERS, Step.WAIT, Step.ABORT),
    (Mode.DELAY, False): (Step.RUN, Step.WAIT),
    (Mode.DELAY, True): (Step.RUN, Step.HEADERS, Step.WAIT),
}
#: mode -> what a tripwire does when it fires (the same without a RUN: the handler is running).
_TRIP_STEPS = {Mode.ABORT: (Step.ABORT,), Mode.DROP: (Step.WAIT, Step.ABORT), Mode.DELAY: (Step.WAIT,)}


class Tripwire:
    """A mid-stream fault of one call: counts the messages of one direction and fires once, at its point.

    `@after=N` counts response messages: it fires right after the server sent message N (the caller has
    received exactly N), without waiting for the handler's next one. `@read=N` counts request messages the
    handler got: it fires when the handler asks for message N+1 (so it acts whether or not the caller sends
    more). Firing answers the steps to perform there (empty when the emergency stop has tripped since the
    call began: a fault still to act never does then) and marks the plan `acted`. One direction is counted
    per call, by one thread or task at a time.
    """

    __slots__ = ("reads", "_count", "_seen", "_steps", "_plan", "_stop")

    def __init__(self, plan: CallPlan, stop: EmergencyStop) -> None:
        directive = plan.decision.directive
        self.reads = bool(directive.read)
        self._count = directive.read or directive.after
        self._seen = 0
        steps = _TRIP_STEPS[directive.mode]
        self._steps = (Step.HEADERS, *steps) if directive.headers_sent else steps
        self._plan = plan
        self._stop = stop

    def before_read(self) -> tuple[Step, ...]:
        """The handler asks for the next request message: the steps to perform before it is read."""
        if self.reads and self._seen == self._count:
            return self._fire()
        return ()

    def read(self) -> None:
        """A request message reached the handler."""
        if self.reads:
            self._seen += 1

    def sent(self) -> tuple[Step, ...]:
        """A response message went out: the steps to perform before the handler is asked for the next."""
        if self.reads:
            return ()
        self._seen += 1
        return self._fire() if self._seen == self._count else ()

    def _fire(self) -> tuple[Step, ...]:
        self._count = -1  # once
        if self._stop.check():
            return ()
        self._plan.acted = True
        return self._steps


def hold(plan: CallPlan, metadata) -> bool:
    """The handler sends its response headers: True when they are held (`CallPlan.hold_headers`; the first
    ones only, as grpc sends only the first), False when they go out now."""
    if not plan.hold_headers:
        return False
    if plan.held is None:
        plan.held = tuple(metadata or ())
    return True


def release(plan: CallPlan) -> tuple:
    """Stop holding the handler's response headers; the ones held (empty: none), for the caller to send or drop."""
    plan.hold_headers = False
    held, plan.held = plan.held or (), None
    return held


class HeadersContext:
    """A sync handler's context on a call whose fault may send the response headers (`@headers=sent`): the
    handler's own are skipped once they have gone (they cannot follow, and the call must not fail for it); or
    whose `@served` fault holds them (`hold`).
    Both flavours use it: the sync server's context and grpc.aio's adapter for a sync handler."""

    def __init__(self, context, plan: CallPlan) -> None:
        self._context = context
        self._plan = plan

    def __getattr__(self, name):
        return getattr(self._context, name)

    def send_initial_metadata(self, metadata) -> None:
        if not self._plan.headers_out and not hold(self._plan, metadata):
            self._context.send_initial_metadata(metadata)
