"""Open-loop arrivals (loadtests/openloop.py): fixed schedule, bounded in-flight, unique seed-derived ids."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time

import pytest

from harness.drills.load.locust import read_tagged_ids
from harness.drills.load.schedule import request_id as aio_request_id
from loadtests import openloop


def test_openloop_module_imports_neither_locust_nor_gevent():
    code = "import sys, loadtests.openloop; print(any(m.split('.')[0] in ('locust', 'gevent') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_arrivals_follow_the_schedule_whatever_the_responses_take():
    s = openloop.Schedule(rate=10.0, spread_index=0)
    t0 = 100.0
    assert s.delay(now=t0) == pytest.approx(s.offset)  # the first call is due at its offset
    s.take()
    # the first call took 1.9 s (a closed-loop user would send call 1 only now, at t0 + 1.9):
    # call 1 was due at offset + 0.1 s, so it goes at once, and so do calls 2 … 19
    assert s.delay(now=t0 + 1.9) == 0.0
    for _ in range(29):
        s.take()
    assert s.delay(now=t0 + 1.9) == pytest.approx(s.offset + 3.0 - 1.9)  # call 30 is due 3 s in, as planned


def test_users_of_a_class_are_spread_over_one_period_and_never_on_a_whole_second():
    offsets = [openloop.Schedule(rate=10.0, spread_index=k).offset for k in range(8)]
    assert len({round(o, 6) for o in offsets}) == 8
    assert all(0.0 < o < 0.1 for o in offsets)


def test_in_flight_bound_covers_calls_that_take_the_whole_timeout():
    assert openloop.inflight_bound(10.0, 2.0) == 25  # 10/s × (2 s + 0.5 s margin)
    assert openloop.inflight_bound(0.5, 1.0) == 1


def test_user_names_are_unique_per_class_and_across_worker_processes():
    names = openloop.UserNames()
    local = [names.next("drill", None)[0] for _ in range(2)] + [names.next("organic", None)[0]]
    assert local == ["drill0", "drill1", "organic0"]
    workers = [openloop.UserNames().next("drill", w)[0] for w in (0, 1)]
    assert workers == ["drill0.w0", "drill0.w1"]
    # the same id as the in-runner load's for the same call, so `drill hits` and the audit logs read both alike
    mix = hashlib.sha256(b"42/naive/2/drill0/7").hexdigest()[:16]
    assert openloop.request_id("p", 42, "naive", 2, "drill0", 7) == aio_request_id("p", 42, "naive", 2, "drill0", 7)
    assert openloop.request_id("p", 42, "naive", 2, "drill0", 7) == f"p-42-drill0-7-{mix}"


def test_tagged_ids_are_appended_per_process_and_read_back_by_the_runner(tmp_path):
    log = openloop.IdLog()
    for n in range(3):
        log.write(str(tmp_path), f"p-1-drill0-{n}")
    log.write(None, "not-logged")
    log.close()
    (tmp_path / "ids-999.txt").write_text("p-1-drill0.w1-0\n")
    assert sorted(read_tagged_ids(tmp_path)) == ["p-1-drill0-0", "p-1-drill0-1", "p-1-drill0-2", "p-1-drill0.w1-0"]


def test_a_drill_schedule_starts_at_the_timelines_first_second_and_stops_after_its_calls():
    # the shape's first second, 10 s from now: far enough that no stall of the box makes call 0 late (its delay
    # would then be 0 whatever the schedule said)
    start_unix = time.time() + 10.0
    s = openloop.Schedule(rate=10.0, spread_index=1, offset=0.05, limit=3, anchor=lambda: start_unix)
    now = time.monotonic()
    # call 0 is due at the timeline's start + its offset, whenever the user got here: the schedule reads the unix
    # clock once, inside delay(), so the delay is start + offset − that reading, which lies between the clock
    # read just before and just after the call (whatever stalled in between); 1 µs for float rounding
    before = time.time()
    delay = s.delay(now=now)
    after = time.time()
    assert start_unix + 0.05 - after - 1e-6 <= delay <= start_unix + 0.05 - before + 1e-6, (delay, before, after)
    assert s.start_unix == start_unix and s.at(2) == pytest.approx(0.25)
    for _ in range(3):
        assert not s.exhausted
        s.take()
    assert s.exhausted  # the phases' length × rate calls, as the in-runner load sends


def test_a_local_user_is_offset_as_the_in_runner_load_offsets_the_same_user():
    # AioLoad: organic 0…O-1 then drill 0…D-1, user k of them first at k / (O + D) / rate
    weights = {"organic": 3, "drill": 2}
    assert openloop.runner_offset(5, weights, "organic", 2, 10.0) == 2 / 5 / 10.0
    assert openloop.runner_offset(5, weights, "drill", 1, 4.0) == 4 / 5 / 4.0
    # weights that are not user counts: the organic share of the users comes first
    assert openloop.runner_offset(20, {"organic": 1, "drill": 1}, "drill", 0, 10.0) == 10 / 20 / 10.0
