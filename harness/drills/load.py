"""Load drivers behind one small interface: the in-runner aio driver and Locust (headless subprocess).

A driver sends organic and drill users' calls to the edge on a fixed schedule
for the plan's phases and exposes client-side metrics (`drill_client_*`) on a
`/metrics` URL the scraper reads. Request ids are derived from the seed
(`PLAN-SEED-USER-N`) and the drill tagging is chosen from each call's
*scheduled* time, so two runs with the same seed send the same ids and the
same ids carry the directive: the hit set is a pure function of the plan.

`AioLoad` is open loop (a user does not slow down when the system does, up to
`max_inflight` outstanding calls per user), bounded in count (rate × duration)
and in time (every call has a deadline; stop() cancels what is left). It calls a
method of any kind: a streaming call is one call like a unary one (one request
id, one tagging, one status for the SLO, one deadline for the whole stream); its
messages are counted apart (`drill_client_stream_messages_total`, results.json
`messages`).
`LocustLoad` is open loop too (loadtests/openloop.py): its users keep the same
per-user rates and send ids of the same form, and each Locust process logs the
ids it sent with the directive, so both drivers know their expected hits.
Both say what they planned to offer (`planned_rps`); the analysis checks it
against what the edge client actually sent (`offered_rps`, `load_fell_behind`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pathlib
import shutil
import signal
import sys
import time
import urllib.request
from collections import Counter
from typing import Protocol

from grpc import aio

from harness.core import headers as h
from harness.core import metrics as m
from harness.core.errors import RunFailed
from harness.core.faults import is_hit
from harness.core.headers import has_fault_marker
from harness.core.snapshots import EdgeCounts, next_second
from harness.core.status import status_name
from harness.drills.edge import UNARY, EdgeCall
from harness.drills.model import Fault, Phases, Traffic
from harness.drills.plan import locust_profile
from harness.interceptors import DrillClientInterceptor, Tagging
from harness.procs.ports import private_loopback
from harness.procs.spawn import kill_group, last_line


class LoadDriver(Protocol):
    """What the runner needs from a load generator."""

    name: str

    async def start(self, edge: list[str]) -> None: ...

    def metrics_endpoints(self) -> list[tuple[str | None, str]]: ...

    async def stop(self) -> None: ...

    def expected_hits(self) -> list[str]: ...

    def planned_rps(self) -> dict[str, float]: ...

    def stop_tagging(self) -> int | None: ...


def planned_rps(traffic: Traffic) -> dict[str, float]:
    """Requests/s the plan offers per traffic class (users × per-user rate)."""
    return {
        "organic": traffic.organic_users * traffic.organic_rate,
        "drill": traffic.drill_users * traffic.drill_rate,
    }


def request_id(plan: str, seed: int, user: str, n: int) -> str:
    return f"{plan}-{seed}-{user}-{n}"


def users(traffic: Traffic) -> list[tuple[str, str, float, float]]:
    """The aio load's users in order: (user name, traffic class, calls/s, offset of its first call in s).

    User k of K sends call n at `offset + n / rate` after the schedule's start, offset = k / K / rate: the
    users of a trial spread over one period, never two on the same instant."""
    everyone = [("organic", i, traffic.organic_rate) for i in range(traffic.organic_users)]
    everyone += [("drill", i, traffic.drill_rate) for i in range(traffic.drill_users)]
    return [(f"{kind}{i}", kind, rate, k / max(1, len(everyone)) / max(rate, 1e-6))
            for k, (kind, i, rate) in enumerate(everyone)]  # fmt: skip


def calls_of(phases: Phases, rate: float) -> int:
    """How many calls one user sends over the trial (its schedule is bounded in count)."""
    return int(phases.total * rate)


def tagged_ids(plan: str, seed: int, traffic: Traffic, fault: Fault, phases: Phases) -> list[str]:
    """Every id the aio load sends with the directive: the drill users' calls scheduled in the fault phase.

    A pure function of the plan: what a trial tags unless a guard stops the directive early (the dry run
    predicts a trial's hits from it, as `drill hits` would for these ids)."""
    if not fault.directive:
        return []
    return [request_id(plan, seed, user, n) for user, kind, rate, offset in users(traffic) if kind == "drill"
            for n in range(calls_of(phases, rate)) if phases.at(offset + n / rate) == "fault"]  # fmt: skip


def ids_digest(ids) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:16]


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

    async def start(self, edge: list[str]) -> None:
        """Schedule the users from the next whole unix second; returns at once (before it)."""
        self.start_unix = next_second()
        self.t_start = time.monotonic() + (self.start_unix - time.time())
        mark_trial(self.plan, self.config_label, self.trial, self.start_unix, self.phases)
        self.counts.declare(self.config_label, self.method_label)
        if self.edge_call.kind != UNARY:  # every series at 0 from the start: none is born inside a reader's window
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
            rid = request_id(self.plan, self.seed, user, n)
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
        status = "OK"
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
        if edge.kind != UNARY:
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
        if self.edge_call.kind == UNARY:
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


def mark_trial(plan: str, config: str, trial: int, start_unix: float, phases: Phases) -> None:
    """Export when each phase of this trial starts (`drill_trial_phase_start_seconds`), for any reader."""
    at = start_unix
    for phase, seconds in zip(m.TRIAL_PHASES, (phases.warmup, phases.fault, phases.recovery, 0.0), strict=True):
        m.TRIAL_PHASE_START.labels(plan, config, str(trial), phase).set(at)
        at += seconds


class LocustLoad:
    """Locust headless as a subprocess, from a profile in loadtests/profiles, with the drill flags.

    Locust runs the phases itself (`--drill-phases`); its client metrics are on
    `--drill-metrics-port`. Its users are open loop at the plan's per-user rates
    and send `PLAN-SEED-USER-N` ids; each Locust process appends the ids it sent
    with the directive to `WORKDIR/ids-PID.txt`, and the expected hits
    are those `is_hit` says are hit.
    """

    name = "locust"

    def __init__(
        self, *, plan: str, seed: int, config_label: str, traffic: Traffic, fault: Fault, phases: Phases,
        workdir: pathlib.Path, trial: int = 1,
    ) -> None:  # fmt: skip
        self.trial = trial
        self.plan, self.seed, self.config_label = plan, seed, config_label
        self.traffic, self.fault, self.phases = traffic, fault, phases
        self.workdir = workdir
        self.ids_dir = workdir  # ids-PID.txt beside the services' logs
        self.ports_dir = workdir / "locust-ports"  # each Locust process binds its own port and writes it here
        self.port = 0
        self.proc = None
        self.start_unix: float | None = None

    def metrics_endpoints(self) -> list[tuple[str | None, str]]:
        """Every Locust process's /metrics, as each announced it (one standalone, or a master and its workers)."""
        urls = []
        for path in sorted(self.ports_dir.glob("*.json")) if self.ports_dir.exists() else []:
            try:
                port = json.loads(path.read_text()).get("metrics_port")
            except (OSError, ValueError):
                continue
            if port:
                urls.append(("loadgen", f"http://127.0.0.1:{port}/metrics"))
        return urls

    async def start(self, edge: list[str]) -> None:
        from harness.procs.spawn import python_env, spawn

        tr, f, ph = self.traffic, self.fault, self.phases
        users = tr.organic_users + tr.drill_users
        argv = [
            _venv_locust() or shutil.which("locust") or "locust",
            "--config", str(locust_profile(tr.profile or "")), "--host", edge[0], "--headless",
            "-u", str(users), "-r", str(users), "-t", f"{int(ph.total + 2)}s", "--stop-timeout", "2",
            "--drill-tenant", f.tenant, "--drill-directive", f.directive, "--drill-ratio", str(f.ratio),
            "--drill-config", self.config_label, "--drill-plan", self.plan,
            "--drill-phases", f"warmup={ph.warmup:g},fault={ph.fault:g},recovery={ph.recovery:g}",
            "--drill-users", str(users), "--drill-weights", f"organic={tr.organic_users},drill={tr.drill_users}",
            "--drill-rate", f"{tr.drill_rate:g}", "--drill-organic-rate", f"{tr.organic_rate:g}",
            "--drill-timeout", f"{tr.timeout_s:g}",
            "--drill-metrics-port", "0", "--drill-ports-dir", str(self.ports_dir),
            "--drill-seed", str(self.seed), "--drill-ids-dir", str(self.ids_dir), "--drill-trial", str(self.trial),
        ]  # fmt: skip
        if tr.workers > 1:  # Locust's own distributed mode on this machine: a master and N worker processes
            # its master binds a fixed port (5557) before the forked workers connect: on an address of our own
            here = private_loopback()
            argv += ["--processes", str(tr.workers), "--master-host", here, "--master-bind-host", here]
        if f.target:
            argv += ["--drill-target", f.target]
        if f.instances is not None:
            argv += ["--drill-instances", str(f.instances)]
        # per-attempt faults reach Locust as they reach the in-runner load (through Fault.tagging)
        argv += ["--drill-fault-scope", f.scope, "--drill-fault-attempts", str(f.attempts or "")]
        # the plan decides cancels, not the profile (smoke cancels 10 % of drill calls after 1 ms)
        if tr.cancel_ms:
            argv += ["--drill-cancel-ms", f"{tr.cancel_ms:g}", "--drill-cancel-share", "100"]
        else:
            argv += ["--drill-cancel-ms", "", "--drill-cancel-share", "0"]
        env = python_env({"DRILL_FAULT_SEED": str(self.seed)})
        shutil.rmtree(self.ports_dir, ignore_errors=True)
        self.proc = spawn(argv, self.workdir / "locust.log", env)
        # Locust's phase clock starts with its /metrics (same init): wait for it, so the runner's
        # scrapes cover Locust's whole recovery phase rather than starting seconds early
        first = self.ports_dir / ("master.json" if tr.workers > 1 else "local.json")  # the one that runs the phases
        self.port = await asyncio.to_thread(_wait_announced, first, LOCUST_START_S, self.proc)
        if self.port:  # its phases start on the whole second it exports (drill_trial_phase_start_seconds)
            self.start_unix = await asyncio.to_thread(self._phase_start, LOCUST_START_S)
        if not self.port or self.start_unix is None:
            raise RunFailed(
                f"locust did not start: {last_line(self.workdir / 'locust.log')} (log: {self.workdir / 'locust.log'})"
            )

    def _phase_start(self, timeout_s: float) -> float | None:
        """The unix second Locust's timeline starts at, read from the phase times it exports."""
        from prometheus_client.parser import text_string_to_metric_families

        name = m.sample_name(m.TRIAL_PHASE_START)
        url = f"http://127.0.0.1:{self.port}/metrics"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                text = ""
            want = {"phase": "warmup", "trial": str(self.trial), "config": self.config_label}
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name == name and all(sample.labels.get(k) == v for k, v in want.items()):
                        return sample.value
            time.sleep(0.1)
        return None

    def expected_hits(self) -> list[str]:
        f = self.fault
        return [r for r in read_tagged_ids(self.ids_dir) if is_hit(self.seed, r, f.directive, f.ratio)]

    def stop_tagging(self) -> None:
        """Locust's users decide their directive in their own processes: nothing here reaches them (None)."""
        return None

    def planned_rps(self) -> dict[str, float]:
        return planned_rps(self.traffic)

    async def stop(self) -> None:
        from harness.procs.spawn import stop_processes

        if self.proc is not None:
            stop_processes([self.proc])


#: Seconds Locust may take to start (imports, gevent) before the drill fails
LOCUST_START_S = 30.0


def _wait_announced(path: pathlib.Path, timeout_s: float, proc) -> int:
    """The metrics port a Locust process announced in `path` (0 when it exited or time ran out)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            port = int(json.loads(path.read_text())["metrics_port"] or 0)
        except (OSError, ValueError, KeyError, TypeError):
            time.sleep(0.05)
            continue
        if port:  # the server answers as soon as it is announced: it was bound before the file was written
            return port
        time.sleep(0.05)
    return 0



def read_tagged_ids(directory: pathlib.Path) -> list[str]:
    """Every id the Locust processes of a run sent with the directive (`--drill-ids-dir`)."""
    ids: list[str] = []
    for path in sorted(directory.glob("ids-*.txt")):
        ids += [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return ids


def _venv_locust() -> str | None:
    cand = pathlib.Path(sys.executable).with_name("locust")
    return str(cand) if cand.exists() else None


class CommandLoad:
    """A load the stack file starts for every trial with a command (`stack.load`): typically a Locust master.

    The trial travels in the environment as the `LOCUST_DRILL_*` variables Locust reads for each
    `--drill-*` option, so the same profile runs here, in compose or in a cluster; so does the stack's
    edge (method, JSON request, type source), so the Locust user calls the stack's method without the
    stack file repeating it. The trial starts
    when the load says so: its timeline exports the phase times (`drill_trial_phase_start_seconds`),
    read from its /metrics or from the stack's Prometheus. Its client counters are scraped each second
    (`metrics`) or read from Prometheus after the trial (`selector`). Which ids it tagged stays in its
    own processes, so the expected hits are not known here (the services' audit lines still are).
    """

    name = "external"

    def __init__(
        self, *, plan: str, seed: int, config_label: str, traffic: Traffic, fault: Fault, phases: Phases,
        spec, prometheus: str | None, workdir: pathlib.Path, trial: int = 1, edge=None,
    ) -> None:  # fmt: skip
        self.plan, self.seed, self.config_label, self.trial = plan, seed, config_label, trial
        self.traffic, self.fault, self.phases = traffic, fault, phases
        self.spec, self.prometheus, self.workdir = spec, prometheus, workdir
        #: the stack's edge (`stack.edge`): its method and request reach the load as the Locust user's options
        self.edge = edge
        self.proc: asyncio.subprocess.Process | None = None
        self.start_unix: float | None = None

    def environment(self) -> dict[str, str]:
        """What Locust reads for this trial (each `--drill-*` option's variable)."""
        tr, f, ph = self.traffic, self.fault, self.phases
        values = {
            "PLAN": self.plan, "CONFIG": self.config_label, "TRIAL": str(self.trial), "SEED": str(self.seed),
            "PHASES": f"warmup={ph.warmup:g},fault={ph.fault:g},recovery={ph.recovery:g}",
            "USERS": str(tr.organic_users + tr.drill_users),
            "WEIGHTS": f"organic={tr.organic_users},drill={tr.drill_users}",
            "RATE": f"{tr.drill_rate:g}", "ORGANIC_RATE": f"{tr.organic_rate:g}", "TIMEOUT": f"{tr.timeout_s:g}",
            "TENANT": f.tenant, "DIRECTIVE": f.directive, "RATIO": str(f.ratio), "TARGET": f.target or "",
            "INSTANCES": "" if f.instances is None else str(f.instances), "FAULT_SCOPE": f.scope,
            "FAULT_ATTEMPTS": str(f.attempts or ""), "CANCEL_MS": f"{tr.cancel_ms:g}" if tr.cancel_ms else "",
            "CANCEL_SHARE": "100" if tr.cancel_ms else "0",
        }  # fmt: skip
        if self.edge is not None:  # what to call: the Locust user for any service reads these (loadtests/)
            e = self.edge
            rate = getattr(e, "message_rate", None)
            values.update({
                "METHOD": e.method, "REQUEST": json.dumps(e.request), "PROTO": e.proto or "",
                "DESCRIPTOR_SET": e.descriptor_set or "", "PROTO_PATH": os.pathsep.join(e.proto_path),
                "MESSAGE_RATE": f"{rate:g}" if rate else "",
            })  # fmt: skip
        env = {f"LOCUST_DRILL_{k}": v for k, v in values.items()}
        return {**os.environ, **env, "DRILL_CONFIG": self.config_label, "DRILL_TRIAL": str(self.trial)}

    def metrics_endpoints(self) -> list[tuple[str | None, str]]:
        return [("loadgen", url) for url in self.spec.metrics]

    async def start(self, edge: list[str]) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / "load.log"
        with open(log, "ab") as out:
            self.proc = await asyncio.create_subprocess_shell(
                self.spec.command, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
                env=self.environment(), start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + self.spec.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.returncode not in (None, 0):
                raise RunFailed(f"load command failed (exit {self.proc.returncode}): {last_line(log)} (log: {log})")
            self.start_unix = await asyncio.to_thread(self._phase_start)
            if self.start_unix is not None:
                return
            await asyncio.sleep(0.5)
        raise RunFailed(f"the load exported no phase times for {self.config_label} trial {self.trial} within "
                        f"{self.spec.start_timeout_s:g} s: {last_line(log)} (log: {log})")  # fmt: skip

    def _phase_start(self) -> float | None:
        from prometheus_client.parser import text_string_to_metric_families

        name = m.sample_name(m.TRIAL_PHASE_START)
        want = {"phase": "warmup", "trial": str(self.trial), "config": self.config_label}
        if self.spec.selector:
            from harness.drills.prom import PrometheusError, latest

            matchers = ", ".join(f'{k}="{v}"' for k, v in want.items())
            try:
                return latest(self.prometheus, f"{name}{self.spec.selector[:-1].rstrip(', ')}, {matchers}}}")
            except PrometheusError:
                return None
        for url in self.spec.metrics:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                continue
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name == name and all(sample.labels.get(k) == v for k, v in want.items()):
                        return sample.value
        return None

    def expected_hits(self) -> list[str] | None:
        return None  # the ids it tagged stay in its own processes

    def stop_tagging(self) -> None:
        """The load's own processes decide its directive: nothing here reaches them (None)."""
        return None

    def planned_rps(self) -> dict[str, float]:
        return planned_rps(self.traffic)

    async def stop(self) -> None:
        if self.spec.stop:
            done = await asyncio.create_subprocess_shell(
                self.spec.stop, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL, env=self.environment(), start_new_session=True,
            )  # fmt: skip
            try:
                await asyncio.wait_for(done.wait(), 60)
            except (TimeoutError, asyncio.TimeoutError):
                kill_group(done.pid)
        if self.proc is not None and self.proc.returncode is None:
            kill_group(self.proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except (TimeoutError, asyncio.TimeoutError):
                kill_group(self.proc.pid)

