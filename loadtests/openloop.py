"""Open-loop arrivals for Locust users: a fixed schedule per user, request ids from the seed.

A closed-loop user waits for each response before its next call, so it sends
less exactly when the system slows down (coordinated omission): under a retry
storm the drill's own load collapses and the storm never builds. Here a user's
call n is *scheduled* at `start + offset + n / rate` and runs in its own
greenlet, so a call that takes up to the timeout never delays the next arrival.
In-flight calls per user are bounded (`inflight_bound`: rate × (timeout +
margin), what the schedule can need when every call takes the whole timeout);
if the bound is ever reached the schedule waits and the drill's load check
(`offered_rps`, `load_fell_behind` in results.json) reports it.

Request ids are `PLAN-SEED-USER-N-MIX` like the in-runner load's
(`harness.core.ids`: MIX hashes the seed, `--drill-config`, `--drill-trial`,
USER and N, so hits scatter as the ratio says), with USER unique across the
Locust processes of a run (`organic3`, `drill0`, `drill0.w1` on worker 1). A
drill user appends each id it sent with the directive to
`--drill-ids-dir/ids-PID.txt`; the runner keeps those for which
`harness.core.faults.is_hit` holds as the expected hits.

With drill phases, a schedule starts at the timeline's first whole second, sends
at most the phases' length × rate calls, and a call's phase is decided by its
scheduled time, as the in-runner load does. On a standalone process the users are
also offset as the in-runner load offsets the same users (`runner_offset`), so both
send the same ids at the same times of a trial and tag the same ones: the hit set
is the plan's, whichever drives it. Workers keep the golden-ratio spread (their
users are numbered per process).
"""

from __future__ import annotations

import itertools
import math
import os
import pathlib
import threading
import time
from collections.abc import Callable
from typing import IO

from harness.core import ids

#: Seconds beyond the timeout a call slot is provisioned for (completion hand-off, cancel timers).
INFLIGHT_MARGIN_S = 0.5
#: Spreads the users of a class over one period (golden-ratio offsets: no two users fire together).
_PHI = 0.6180339887498949


def inflight_bound(rate: float, timeout_s: float) -> int:
    """Calls one user can have in flight when each takes the whole timeout: ceil(rate × (timeout + margin))."""
    return max(1, math.ceil(rate * (timeout_s + INFLIGHT_MARGIN_S)))


def request_id(plan: str, seed: int, config: str, trial: int, user: str, n: int) -> str:
    """The in-runner load's id for the same call (`harness.core.ids.request_id`: one contract)."""
    return ids.request_id(plan, seed, config, trial, user, n)


class UserNames:
    """Per-process, per-class user numbering: `drill0`, `drill1` …, with `.wI` on Locust worker I."""

    def __init__(self) -> None:
        self._counters: dict[str, itertools.count] = {}
        self._lock = threading.Lock()

    def next(self, traffic: str, worker_index: int | None) -> tuple[str, int]:
        with self._lock:
            k = next(self._counters.setdefault(traffic, itertools.count()))
        suffix = "" if worker_index is None else f".w{worker_index}"
        return f"{traffic}{k}{suffix}", k + 1000 * (worker_index or 0)


class Schedule:
    """One user's arrival times: call n at `start + offset + n / rate` (never later because of a response).

    `offset` defaults to a golden-ratio spread by `spread_index`; `limit` bounds the calls (None: no bound);
    `anchor()` may give the unix time the schedule starts at (a drill's first whole second), read when the
    first call is due; without one the schedule starts then.
    """

    def __init__(
        self,
        rate: float,
        spread_index: int,
        *,
        offset: float | None = None,
        limit: int | None = None,
        anchor: Callable[[], float | None] | None = None,
    ) -> None:
        if rate <= 0:
            raise ValueError("an open-loop schedule needs a rate above 0")
        self.rate = rate
        # never on a whole second (phase edges), unless given
        self.offset = ((spread_index + 0.5) * _PHI) % 1.0 / rate if offset is None else offset
        self.limit = limit
        self._anchor = anchor
        self.start: float | None = None
        #: the unix time the schedule started at, when an anchor gave it
        self.start_unix: float | None = None
        self.n = 0

    def at(self, n: int) -> float:
        """Seconds after the start that call n is due (the in-runner load's `offset + n / rate`)."""
        return self.offset + n / self.rate

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.n >= self.limit

    def delay(self, now: float | None = None) -> float:
        """Seconds until call `n` is due (0 when it is due or late)."""
        now = time.monotonic() if now is None else now
        if self.start is None:
            unix = self._anchor() if self._anchor is not None else None
            self.start = now if unix is None else now + (unix - time.time())
            self.start_unix = unix
        return max(0.0, self.start + self.at(self.n) - now)

    def take(self) -> int:
        n, self.n = self.n, self.n + 1
        return n


def runner_offset(users: int, weights: dict[str, int], traffic: str, k: int, rate: float) -> float:
    """The offset the in-runner load gives user k of a class: its users are organic 0…O-1 then drill 0…D-1,
    user i of them first calls at i / (O + D) / rate (harness.drills.load.aio.AioLoad). O is the organic
    weight when the weights count the users (as `drill run` passes them), else the organic share of `users`."""
    wo, wd = weights.get("organic", 1), weights.get("drill", 1)
    organic = wo if wo + wd == users else round(users * wo / max(1, wo + wd))
    index = k if traffic == "organic" else organic + k
    return index / max(1, users) / max(rate, 1e-6)


class IdLog:
    """Appends the ids sent with the directive to `DIR/ids-PID.txt` (one per line, line-buffered)."""

    def __init__(self) -> None:
        self._fh: IO[str] | None = None
        self._dir: str | None = None
        self._lock = threading.Lock()

    def write(self, directory: str | None, request_id: str) -> None:
        if not directory:
            return
        with self._lock:
            if self._fh is None or self._dir != directory:
                path = pathlib.Path(directory)
                path.mkdir(parents=True, exist_ok=True)
                self._fh = open(path / f"ids-{os.getpid()}.txt", "a", buffering=1)
                self._dir = directory
            self._fh.write(request_id + "\n")

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


#: One numbering and one id log per Locust process.
NAMES = UserNames()
TAGGED_IDS = IdLog()
