"""A call started through `Completions.start` guards its state with a native condition (cheaper than gevent's
Python-level RLock); a greenlet that waits on it with a blocking `result()` must still let the others run.

A native `Condition.wait` that parked on a native lock would stop the whole hub until the call ended: the
other greenlets, and the event handling that ends the call (it runs in the hub), would stand still.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

PROBE = pathlib.Path(__file__).with_name("_native_wait_probe.py")


def test_a_blocking_result_on_a_natively_guarded_call_lets_other_greenlets_run(drill_server):
    out = subprocess.run(
        [sys.executable, str(PROBE), drill_server.host], capture_output=True, text=True, timeout=30, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["native"] is True  # the channel is polled natively
    assert got["native_lock"] is True  # so the call's condition sits on a native lock (not gevent's RLock)
    assert got["code"] == "OK"  # the delayed call ended, with its events handled in the hub
    # A 300-ms delay gives ~30 ticks of 10 ms; a blocked hub gives none (the ticker never runs before
    # `result()` returns). A starved machine stretches each tick, never to a tenth of the wait.
    assert got["ticks_during_wait"] >= 3, got
