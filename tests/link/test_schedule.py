"""Toxiproxy's byte toxics as timing stages (harness.link.schedule): each against its definition, exactly.

The stages are pure (times in, times out), so the definitions are checked to the float; the live tests
(test_relay.py) check that the relay runs them on time.
"""

from __future__ import annotations

import random

import pytest

from harness.link import schedule
from harness.link.toxics import parse_toxic


def stage(kind: str, **attributes):
    acts: list[tuple[float, str]] = []
    toxic = parse_toxic({"type": kind, "attributes": attributes})
    return schedule.STAGES[kind](toxic, lambda t, a: acts.append((t, a)), random.Random(7)), acts


def test_latency_delays_each_chunk_and_keeps_the_order():
    s, _ = stage("latency", latency=50)
    assert s.feed([(1.0, b"a"), (1.001, b"b")]) == [(1.05, b"a"), (1.051, b"b")]


def test_jitter_stays_within_gos_range_and_never_reorders():
    s, _ = stage("latency", latency=50, jitter=10)
    out = s.feed([(i / 1000, b"x") for i in range(2000)])
    delays = [due - i / 1000 for i, (due, _) in enumerate(out)]
    # Go's Int63n(2j) - j: from latency - jitter to latency + jitter - 1 ms; a chunk never leaves before the one
    # ahead of it, which can only lengthen a delay
    assert min(delays) >= 0.040 - 1e-9
    assert all(a[0] <= b[0] for a, b in zip(out, out[1:], strict=False))
    # held behind an earlier chunk (1 ms earlier, at most 59 ms): at most 58 ms, so its own draw bounds it
    assert max(delays) <= 0.059 + 1e-9


def test_bandwidth_paces_bytes_at_the_rate_in_100_ms_pieces():
    s, _ = stage("bandwidth", rate=1)  # 1 KB/s = 1,000 bytes/s
    out = s.feed([(0.0, b"x" * 1000)])
    assert [len(d) for _, d in out] == [100] * 10
    assert [round(t, 9) for t, _ in out] == [round(0.1 * (i + 1), 9) for i in range(10)]
    # the link stays busy: a chunk that comes while it is still sending waits its turn
    assert s.feed([(0.5, b"y" * 100)]) == [(pytest.approx(1.1), b"y" * 100)]


def test_bandwidth_zero_is_unlimited():
    s, _ = stage("bandwidth", rate=0)
    assert s.feed([(0.0, b"abc")]) == [(0.0, b"abc")]


def test_slicer_cuts_into_slices_delay_apart_and_loses_nothing():
    s, _ = stage("slicer", average_size=10, size_variation=3, delay=1000)
    data = bytes(range(200))
    out = s.feed([(0.0, data)])
    assert b"".join(d for _, d in out) == data
    assert all(1 <= len(d) <= 10 + 3 for _, d in out)  # a slice is split while larger than average + variation
    assert [t for t, _ in out] == pytest.approx([i * 0.001 for i in range(len(out))])


def test_limit_data_passes_exactly_its_bytes_then_closes():
    s, acts = stage("limit_data", bytes=10)
    assert s.feed([(0.0, b"12345678"), (0.1, b"abcdef")]) == [(0.0, b"12345678"), (0.1, b"ab")]
    assert acts == [(0.1, schedule.CLOSE)]
    assert s.feed([(0.2, b"more")]) == [] and acts == [(0.1, schedule.CLOSE)]  # closed once


def test_limit_data_zero_closes_at_the_first_chunk_as_toxiproxy_does():
    # Toxiproxy's LimitDataToxic cuts the first chunk to the 0 bytes left, sends nothing and closes (before: nothing
    # passed and the connection stayed open)
    s, acts = stage("limit_data", bytes=0)
    assert s.feed([(0.5, b"first")]) == [] and acts == [(0.5, schedule.CLOSE)]
    assert s.feed([(0.6, b"more")]) == [] and acts == [(0.5, schedule.CLOSE)]


def test_timeout_drops_data_and_closes_after_its_time():
    s, acts = stage("timeout", timeout=300)
    s.attach(2.0)
    assert s.feed([(2.1, b"lost")]) == []
    assert acts == [(2.3, schedule.CLOSE)]


def test_timeout_zero_is_a_blackhole_that_never_closes():
    s, acts = stage("timeout", timeout=0)
    s.attach(2.0)
    assert s.feed([(2.1, b"lost")]) == [] and acts == []


def test_reset_peer_resets_after_the_first_data_plus_its_timeout():
    s, acts = stage("reset_peer", timeout=100)
    s.attach(0.0)
    assert acts == []
    assert s.feed([(1.0, b"x")]) == []
    s.feed([(1.05, b"y")])
    assert acts == [(1.1, schedule.RESET)]


def test_slow_close_delays_the_end_of_the_stream():
    s, _ = stage("slow_close", delay=250)
    assert s.feed([(0.0, b"x")]) == [(0.0, b"x")]
    assert s.eof(1.0) == 1.25
