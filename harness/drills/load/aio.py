"""The in-runner load: grpc.aio users on the plan's open-loop schedule, to an edge method of any kind.

`AioLoad` is open loop (a user does not slow down when the system does, up to
`max_inflight` outstanding calls per user), bounded in count (rate × duration)
and in time (every call has a deadline; stop() cancels what is left). It calls a
method of any kind: a streaming call is one call like a unary one (one request
id, one tagging, one status for the SLO, one deadline for the whole stream); its
messages are counted apart (`drill_client_stream_messages_total`, results.json
`messages`). Its ids and tagging are `schedule`'s, the same as every driver's.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import grpc
from grpc import aio

from harness.core import headers as h
from harness.core import metrics as m
from harness.core.faults import Kind, is_hit
from harness.core.headers import has_fault_marker
from harness.core.snapshots import EdgeCounts, next_second
from harness.core.status import status_name
from harness.drills.load.schedule import calls_of, mark_trial, planned_rps, request_id, users
from harness.drills.plan.sections import Fault, Phases, Traffic
from harness.drills.stack.edge import EdgeCall
from harness.interceptors import DrillClientInterceptor, Tagging


class AioLoad:
    """In-runner grpc.aio load: organic and drill users on a fixed open-loop schedule.

    The schedule starts on a whole unix second (`start_unix`), so every phase boundary
    is a whole second, and the trial's phase times are exported when it starts
    (`drill_trial_phase_start_seconds`). Every finished call is filed in `counts`
    under the second it ended in (harness.core.snapshots): the runner and any
    Prometheus read the same per-second numbers. Every call's trailing metadata is
    read: the ids that came back with the `x-drill-fault` marker are the hits the
    services themselves reported (`observed_hits`).

    A streaming call opens the stream, sends the edge's messages (message i at
    i / `message_rate` s after the call starts) and half-closes, while its replies
    are read to the end; it is filed once, by its status, like a unary call. The
    messages each way are counted apart (`message_counts`).
    """

    name = "aio"

    def __init__(
        self,
        *,
        plan: str,
        seed: int,
        config_label: str,
        traffic: Traffic,
        fault: Fault,
        phases: Phases,
        edge_call: EdgeCall,
        counts: EdgeCounts,
        metrics_url: str | None = None,
        trial: int = 1,
    ) -> None:
        self.plan, self.seed, self.config_label = plan, seed, config_label
        self.traffic, self.fault, self.phases = traffic, fault, phases
        self.edge_call = edge_call
        self.counts = counts
        self.method_label = m.method_label(edge_call.method)
        self.metrics_url = metrics_url
        self.trial = trial
        self._tasks: list[asyncio.Task] = []
        self._calls: set[asyncio.Task] = set()
        self._channels: list[aio.Channel] = []
        self._tagged: list[str] = []
        self._marked: list[str] = []
        #: False once a guard tripped: no call carries the directive any more (`stop_tagging`)
        self.tagging = True
        #: tagged calls in flight, and those a guard cancelled (counted CANCELLED, not abandoned)
        self._tagged_calls: set[asyncio.Task] = set()
        self._guard_cancelled: set[asyncio.Task] = set()
        #: the unix second the schedule starts at (phase boundaries are whole seconds after it)
        self.start_unix: float | None = None
        self.t_start: float | None = None
        self.sent = 0
        #: messages of the streaming calls, by (traffic, direction): `message_counts`
        self._messages: Counter = Counter()
        self._message_metric = m.ChildCache(m.CLIENT_STREAM_MESSAGES)

    def metrics_endpoints(self) -> list[tuple[str | None, str]]:
        return [(None, self.metrics_url)] if self.metrics_url else []

    def exact_counts(self) -> EdgeCounts:
        """Every call this load made, filed under the second it ended in: the runner reads the edge from here."""
        return self.counts

    def edge_selector(self) -> None:
        return None

    async def start(self, edge: list[str]) -> None:
        """Schedule the users from the next whole unix second; returns at once (before it)."""
        self.start_unix = next_second()
        self.t_start = time.monotonic() + (self.start_unix - time.time())
        mark_trial(self.plan, self.config_label, self.trial, self.start_unix, self.phases)
        self.counts.declare(self.config_label, self.method_label)
        if self.edge_call.kind != Kind.UNARY:  # every series at 0 from the start: none is born inside a reader's window
            for traffic in ("organic", "drill"):
                for direction in m.STREAM_DIRECTIONS:
                    self._message_metric(self.counts.service, self.method_label, direction, traffic, self.config_label)
        tr = self.traffic
        for k, (user, kind, rate, offset) in enumerate(users(tr)):
            addr = edge[k % len(edge)]
            drill = kind == "drill"
            taggings = [Tagging(tenant=self.fault.tenant)] if drill else [Tagging()]
            if drill and self.fault.directive:
                taggings.append(self.fault.tagging())
            callables = []
            for tagging in taggings:  # one channel per tagging: no swap races at phase edges
                icpt = DrillClientInterceptor(
                    tagging,
                    service="loadgen",
                    config=self.config_label,
                    target=addr,
                    cancel_after_ms=tr.cancel_ms if drill else None,
                )
                channel = aio.insecure_channel(addr, interceptors=icpt.with_streams())
                self._channels.append(channel)
                callables.append(self.edge_call.multicallable(channel))
            modes = [t.fault_mode for t in taggings]
            self._tasks.append(asyncio.create_task(self._user(user, kind, rate, offset, callables, modes)))

    async def _user(self, user: str, traffic: str, rate: float, offset: float, callables: list, modes: list) -> None:
        slots = asyncio.Semaphore(self.traffic.max_inflight)
        for n in range(calls_of(self.phases, rate)):
            at = offset + n / rate
            delay = self.t_start + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            rid = request_id(self.plan, self.seed, self.config_label, self.trial, user, n)
            await slots.acquire()
            # the directive by the call's scheduled time (as `tagged_ids`), decided once its slot is free
            k = 1 if len(callables) > 1 and self.tagging and self.phases.at(at) == "fault" else 0
            if k:
                self._tagged.append(rid)
            task = asyncio.create_task(self._one(callables[k], rid, slots, traffic, modes[k]))
            self._calls.add(task)
            task.add_done_callback(self._calls.discard)
            if k:
                self._tagged_calls.add(task)
                task.add_done_callback(self._tagged_calls.discard)
            self.sent += 1

    async def _one(self, method, rid: str, slots: asyncio.Semaphore, traffic: str, mode: str) -> None:
        edge = self.edge_call
        trailers = first = None
        status, lost_deadline = "OK", False
        sent, received = [0 if edge.streams_in else 1], 0
        start = time.perf_counter()
        self.counts.start(self.config_label, self.method_label, traffic)
        try:
            # the request id travels in metadata: every message of a stream belongs to the call it names
            request = _paced(edge.messages(rid), edge.message_rate, sent) if edge.streams_in else edge.request(rid)
            call = method(request, timeout=self.traffic.timeout_s, metadata=((h.REQUEST_ID, rid),))
            first = FirstStatus(call) if edge.streams_in else None
            if edge.streams_out:
                async for _ in call:
                    received += 1
            else:
                await call
                received = 1
            trailers = await call.trailing_metadata()
        except aio.AioRpcError as err:
            status = status_name(err.code())
            trailers = err.trailing_metadata()
            lost_deadline = _lost_deadline(err, time.perf_counter() - start, self.traffic.timeout_s)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task.cancelling() and task not in self._guard_cancelled:  # stop(): abandoned, not counted
                slots.release()
                return
            # the client cancelled it: a guard's cancel, or `traffic.cancel_ms` on a stream (grpc.aio raises
            # CancelledError for a stream cancelled under a task that was not; a unary call's is an AioRpcError)
            status = "CANCELLED"
            trailers = first = None
        slots.release()
        if first is not None and first.code is not None:  # the status the server sent, not grpc.aio's INTERNAL
            status, trailers = status_name(first.code), first.trailers
        if lost_deadline and status == "INTERNAL":
            status = "DEADLINE_EXCEEDED"
        if edge.kind != Kind.UNARY:
            self._count_messages(traffic, sent[0], received)
        injected = trailers is not None and has_fault_marker(trailers)
        if injected:
            self._marked.append(rid)
        # filed under the second it ended in: the runner's and every reader's per-second counts
        self.counts.record(self.config_label, self.method_label, traffic, status, mode, injected,
                           time.perf_counter() - start)  # fmt: skip

    def _count_messages(self, traffic: str, sent: int, received: int) -> None:
        for direction, n in zip(m.STREAM_DIRECTIONS, (sent, received), strict=True):
            self._messages[traffic, direction] += n
            if n:
                self._message_metric(self.counts.service, self.method_label, direction, traffic,
                                     self.config_label).inc(n)  # fmt: skip

    def message_counts(self) -> dict | None:
        """The trial's stream messages for results.json (`messages`): sent and received in all and by traffic
        class, over every call that ended (None for a unary method: one message each way per call)."""
        if self.edge_call.kind == Kind.UNARY:
            return None
        by = {t: {d: self._messages[t, d] for d in m.STREAM_DIRECTIONS} for t in ("organic", "drill")}
        return {**{d: sum(v[d] for v in by.values()) for d in m.STREAM_DIRECTIONS}, "by_traffic": by}

    def expected_hits(self) -> list[str]:
        f = self.fault
        return [r for r in self._tagged if is_hit(self.seed, r, f.directive, f.ratio)]

    def stop_tagging(self) -> int:
        """A guard tripped: no later call carries the directive, and the tagged calls in flight are cancelled
        (each ends CANCELLED, which no error rate counts), so a held or retried call stops costing the stack
        capacity now. Returns how many were cancelled."""
        self.tagging = False
        live = [t for t in self._tagged_calls if not t.done()]
        self._guard_cancelled.update(live)
        for task in live:
            task.cancel()
        return len(live)

    def observed_hits(self) -> list[str]:
        """Request ids whose answer carried the `x-drill-fault` marker (set only by the hop that injected)."""
        return list(self._marked)

    def planned_rps(self) -> dict[str, float]:
        return planned_rps(self.traffic)

    async def wait(self, timeout_s: float) -> None:
        """Wait for the schedule to finish and outstanding calls to end (bounded)."""
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=timeout_s)
        if self._calls:
            await asyncio.wait(list(self._calls), timeout=self.traffic.timeout_s + 0.5)

    async def stop(self) -> None:
        for t in [*self._tasks, *self._calls]:
            t.cancel()
        await asyncio.gather(*self._tasks, *self._calls, return_exceptions=True)
        for c in self._channels:
            await c.close(grace=None)
        self._channels.clear()


class FirstStatus:
    """The status a client stream's call was given first (code and trailing metadata), read as it is set.

    grpc.aio replaces the status the server sent with INTERNAL "Internal error from Core" when one of the
    stream's writes was in flight as the server ended the call (grpc/grpc#36066, still so in 1.85): a server
    that aborts before reading the whole stream (an injected abort, `@read=N`) would often look like a real
    INTERNAL without its `x-drill-fault` marker. The call's done callbacks run once, when the first status
    is set, and there its status coroutines finish without waiting; this keeps what they say. None where
    they would wait (grpc's own status is then all there is).
    """

    __slots__ = ("code", "trailers")

    def __init__(self, call) -> None:
        self.code = self.trailers = None
        call.add_done_callback(self._set)

    def _set(self, call) -> None:
        self.code = _settled(call.code())
        self.trailers = _settled(call.trailing_metadata())


#: the details grpc.aio gives the INTERNAL it puts in place of a stream's real status (grpc/grpc#36066)
_CORE_INTERNAL = "Internal error from Core"


def _lost_deadline(err: aio.AioRpcError, elapsed_s: float, timeout_s: float) -> bool:
    """A client stream whose own deadline ended it while one of its writes was in flight: grpc.aio reports
    the INTERNAL of grpc/grpc#36066, with no status from the server (FirstStatus saw none it could read),
    at or after the deadline. That is the deadline's end, DEADLINE_EXCEEDED, not a failure of the service's."""
    return (err.code() is grpc.StatusCode.INTERNAL and (err.details() or "") == _CORE_INTERNAL
            and elapsed_s >= timeout_s)  # fmt: skip


def _settled(coro):
    """A coroutine's value if it completes without waiting; else None (and it is closed unrun)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    return None


async def _paced(messages: tuple[bytes, ...], rate: float | None, sent: list[int]):
    """A client stream's messages, message i at i / rate s after the first (at once without a rate), as the
    Locust user sends them; grpc.aio pulls them from its own task. `sent[0]` counts those handed over."""
    first = time.monotonic()
    for i, message in enumerate(messages):
        if rate and i:
            wait = first + i / rate - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        sent[0] = i + 1
        yield message
