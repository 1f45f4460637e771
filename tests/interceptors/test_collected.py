"""A call the garbage collector closes records nothing, so it never waits on a metric lock its thread holds.

The failure this guards against hung a whole test worker: a grpc.aio server's loop ended with a call in its handler;
much later, while another server's loop thread was inside `labels()` creating a histogram child (holding that
metric's lock), the allocation started a collection, which closed the abandoned call's coroutine; its `finally`
recorded the call and asked for the same lock. prometheus_client's locks are not reentrant: the thread waited for
itself, and every later call that touched the metric waited behind it (each ended DEADLINE_EXCEEDED at its caller).

The scenario runs in a program of its own (tests/interceptors/collected_calls.py), since a thread that waits for
itself would hang this one: three calls left in their handlers (organic and drill on the server, one through the
aio client interceptor), the loop stopped, and the collection run by a thread holding every metric's lock.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def test_calls_closed_by_the_collector_record_nothing_and_take_no_metric_lock():
    done = subprocess.run([sys.executable, "-m", "tests.interceptors.collected_calls"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert lines, done.stderr[-2000:]
    out = json.loads(lines[-1])
    assert out["locks"] > 20  # every labelled metric of harness.core.metrics was held
    assert (out["finished"], done.returncode) == (True, 0)  # a thread waiting for itself never finishes (10 s)
    assert out["recorded"] == {"server": [], "client": []}  # their loop is gone: nothing is recorded for them
    assert out["scope_kept"]  # the call the collection interrupted is still the drill's (or organic) call it was
