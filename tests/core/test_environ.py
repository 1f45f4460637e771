"""`environ_now`: a child's environment copied while another thread adds and removes a key, as pytest does with
PYTEST_CURRENT_TEST while `side_by_side` scenarios start their processes (a full run met the KeyError of
`dict(os.environ)` there, in `python_env`).

Forced here: the thread switch interval is 1 µs and a thread toggles one key without pause, so a copy is often
interrupted between listing the keys and reading them. `dict(os.environ)` raised KeyError in 1,190 of 28,695
copies over 1 s on this box; the bound of 20,000 copies or 2 s leaves it hundreds of chances.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from harness.core.environ import environ_now

KEY = "DRILL_TEST_ENVIRON_RACE"


def test_a_copy_never_fails_while_another_thread_adds_and_removes_a_key():
    interval = sys.getswitchinterval()
    stop = threading.Event()

    def toggle() -> None:
        while not stop.is_set():
            os.environ[KEY] = "1"
            os.environ.pop(KEY, None)

    thread = threading.Thread(target=toggle)
    sys.setswitchinterval(1e-6)
    thread.start()
    failed, copies, seen = 0, 0, 0
    try:
        end = time.monotonic() + 2.0
        while copies < 20_000 and time.monotonic() < end:
            try:
                env = environ_now(EXTRA="x")
            except KeyError:
                failed += 1
            else:
                seen += KEY in env
                assert env["EXTRA"] == "x" and env["PATH"] == os.environ["PATH"]
            copies += 1
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
        os.environ.pop(KEY, None)
    assert copies > 1000 and not failed, (copies, failed)
    assert 0 < seen < copies  # the copies did meet the key both present and absent
