"""`EdgeCounts`: a second, once exported, never changes — whatever the recording thread was doing.

A reader (Prometheus through the runner's /metrics, or the runner itself) exports the counts of every second
that has ended, stamped with it. If a recording thread read the clock, was paused, and only then took the
lock, its call could land in a second already exported without it: the stamp's value would change after it
was read, and the read-back would disagree with the runner by a second (a CI rehearsal beside two CPU hogs
saw TTR 1 s against 0 s with every second scraped). A fake clock and a lock that lets the "scrape" run at
the very moment the recorder waits for it make the pause certain.
"""

from __future__ import annotations

import threading
import types

import pytest

from harness.core import snapshots
from harness.core.snapshots import EdgeCounts


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


class _PausingLock:
    """A lock that runs `pause` once, in the thread about to acquire it, before acquiring it."""

    def __init__(self, pause) -> None:
        self._lock = threading.Lock()
        self._pause = pause

    def __enter__(self):
        pause, self._pause = self._pause, None
        if pause is not None:
            pause()
        return self._lock.__enter__()

    def __exit__(self, *exc):
        return self._lock.__exit__(*exc)


def _value(families, name: str, **labels) -> float:
    return sum(s.value for f in families for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))  # fmt: skip


@pytest.mark.parametrize("what", ["record", "start"])
def test_a_call_recorded_while_a_second_is_exported_is_filed_after_it(monkeypatch, what):
    clock = _Clock(100.99)  # the recorder's moment: second 101 has not ended yet
    monkeypatch.setattr(snapshots, "time", types.SimpleNamespace(time=clock.time))
    counts = EdgeCounts("loadgen")
    counts.declare("plain", "Demo/Call")
    exported = {}

    def scrape_meanwhile() -> None:  # the recorder is paused here; the clock moves on and a reader exports
        clock.now = 101.2
        exported["families"] = list(counts.collect())

    counts._lock = _PausingLock(scrape_meanwhile)
    if what == "record":
        counts.record("plain", "Demo/Call", "organic", "OK", "none", False, 0.01)
        name = "drill_client_calls_total"
    else:
        counts.start("plain", "Demo/Call", "organic")
        name = "drill_client_started_total"
    first = exported["families"]
    assert {s.timestamp for f in first for s in f.samples} == {101.0}
    # the value stamped 101 is what every later reader of second 101 gets: the call is not in it
    assert _value(counts.families(101), name, traffic="organic") == _value(first, name, traffic="organic") == 0
    assert _value(counts.families(102), name, traffic="organic") == 1
