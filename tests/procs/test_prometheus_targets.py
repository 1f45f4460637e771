"""Targets handed to the run's Prometheus are scraped: the file_sd path, and the runner's hop relay.

A relative `--out` (the default `drill-out`) once put a relative file_sd path in the config, which
Prometheus reads relative to the config file's folder (no targets, ever). And every trial starts its hops
on new ports, which Prometheus discovers on a 5-s tick: the runner relays them at paths that outlive a
trial (`harness.drills.readings.relay`), so a new trial's hops are read without a new discovery.
"""

from __future__ import annotations

import os
import pathlib
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from harness.drills.readings.relay import relayed, serve
from harness.procs.prometheus import LocalPrometheus

pytestmark = pytest.mark.slow
#: A hang guard, not a timing: Prometheus 2.x hands discovered targets to its scrape manager on 5-s ticks
#: (discovery, then scrape reload), ~11 s to a first scrape on a quiet box; a box starved by a soak and two CPU
#: hogs once took over 30 s. The property is "scraped at all".
HANG_S = 120.0


def _up(prom: LocalPrometheus, n: int) -> list[dict]:
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        got = prom.query("up == 1")
        if len(got) >= n:
            return got
        time.sleep(0.25)
    raise AssertionError(f"fewer than {n} targets up after {HANG_S:.0f} s: {prom.query('up')}")


def _hop(name: str) -> tuple[str, object]:
    """A hop's /metrics on a port of its own, with an empty registry but for one counter naming it (the
    worker's default registry holds every earlier test's series: megabytes, too slow for a 900-ms scrape)."""
    reg = CollectorRegistry()
    Counter("relay_probe", "which server answered", ["served_by"], registry=reg).labels(name).inc()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=reg)
    return f"http://127.0.0.1:{server.server_port}/metrics", (server, thread)


def _stop(handles) -> None:
    for server, thread in handles:
        server.shutdown()
        thread.join()


def test_targets_written_under_a_relative_workdir_are_scraped(tmp_path, monkeypatch):
    hops = [_hop(f"hop{i}") for i in range(2)]
    monkeypatch.chdir(tmp_path)
    prom = LocalPrometheus(pathlib.Path("drill-out/prometheus")).start()  # relative, as `drill run` is given
    try:
        prom.set_targets([(f"hop{i}", url) for i, (url, _) in enumerate(hops)])
        assert {r["metric"]["service"] for r in _up(prom, 2)} == {"hop0", "hop1"}
    finally:
        prom.stop()
        _stop(h for _, h in hops)
    assert not os.path.isabs(str(prom.workdir))


def test_the_relay_keeps_targets_across_trials_and_names_each_replica(tmp_path):
    """Two replicas of one service are two instances (`gateway-0`, `gateway-1`), not one series twice; the
    next trial's servers are read through the same targets (the targets file is not rewritten) and the
    relay says when each was read; a name the trial lacks answers 503 (its target is down)."""
    base, relay = serve(CollectorRegistry())
    first = [_hop("first-0"), _hop("first-1")]
    second = [_hop("second-0"), _hop("second-1")]
    urls, targets = relayed(base, [("gateway", first[0][0]), ("gateway", first[1][0])])
    assert [t[2] for t in targets] == ["gateway-0", "gateway-1"]
    prom = LocalPrometheus(tmp_path / "prom").start()
    try:
        relay.set(urls)
        prom.set_targets(targets)
        assert relay.wait_served(urls, HANG_S)
        _up(prom, 2)
        written = prom.targets_file.read_text()
        again, _ = relayed(base, [("gateway", second[0][0]), ("gateway", second[1][0])])
        relay.set(again)  # the next trial: same names, new servers
        assert not relay.wait_served(again, 0.0), "served before anyone read the new servers"
        assert relay.wait_served(again, HANG_S)
        assert prom.targets_file.read_text() == written
        deadline = time.monotonic() + HANG_S
        while time.monotonic() < deadline:
            seen = {(r["metric"]["instance"], r["metric"]["served_by"]) for r in prom.query("relay_probe_total")}
            if {("gateway-0", "second-0"), ("gateway-1", "second-1")} <= seen:
                break
            time.sleep(0.25)
        assert {("gateway-0", "second-0"), ("gateway-1", "second-1")} <= seen
        relay.set({})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"{base}/hops/gateway-0", timeout=5)
        assert info.value.code == 503
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:  # the registry, as before
            assert r.status == 200
    finally:
        prom.stop()
        _stop(h for _, h in first + second)
