"""Client-side Prometheus endpoint of every Locust process (contracts §7).

Each process serves the default registry on its own port: a standalone process
or the master on the base port (the master has no users; it exports
`drill_phase` / `drill_fault_active`), worker N (Locust's 0-based worker index)
on base + 1 + N, or every process on the base port with `--drill-metrics-fixed`
(one Locust process per container). With base 0 every process binds a port the
kernel picks (nothing can take it between choice and bind: harness.procs.ports)
and writes it to `--drill-ports-dir` as `ROLE[-INDEX].json`, with the master's
worker port beside it. The counters themselves
(`drill_client_calls_total`, `drill_client_latency_seconds`) are recorded by the
harness client interceptor on every call.
"""

from __future__ import annotations

import json
import logging
import os

import gevent
from prometheus_client import start_http_server

from loadtests.options import DrillOptions

log = logging.getLogger("drill.loadtests")

#: Seconds a worker waits for its index from the master before it gives up on /metrics.
INDEX_WAIT_S = 60.0

_started: dict[str, int] = {}


def port_for(opts: DrillOptions, role: str, worker_index: int = -1) -> int | None:
    """The /metrics port of a process: `role` is local, master or worker."""
    base = opts.metrics_port
    if base is None:
        return None
    if role != "worker" or opts.metrics_fixed or base == 0:
        return base
    return base + 1 + worker_index


def announce(opts: DrillOptions, role: str, worker_index: int = -1, **ports: int | None) -> None:
    """Write this process's bound ports to `--drill-ports-dir` (atomically: a reader never sees half)."""
    if not opts.ports_dir:
        return
    os.makedirs(opts.ports_dir, exist_ok=True)
    name = role if worker_index < 0 else f"{role}-{worker_index}"
    path = os.path.join(opts.ports_dir, f"{name}.json")
    with open(path + ".tmp", "w") as fh:
        json.dump({"role": role, "index": worker_index, "pid": os.getpid(), **ports}, fh)
    os.replace(path + ".tmp", path)


def serve(opts: DrillOptions, role: str, worker_index: int = -1, master_port: int | None = None) -> int | None:
    """Start this process's /metrics server once; returns the port (None when disabled)."""
    if "port" in _started:
        return _started["port"]
    port = port_for(opts, role, worker_index)
    if port is None:
        announce(opts, role, worker_index, metrics_port=None, master_port=master_port)
        return None
    server, _thread = start_http_server(port, addr=opts.metrics_host)
    port = server.server_port
    _started["port"] = port
    announce(opts, role, worker_index, metrics_port=port, master_port=master_port)
    log.info("client metrics (%s %s) on http://%s:%d/metrics", role, worker_index, opts.metrics_host, port)
    return port


def serve_when_indexed(opts: DrillOptions, runner) -> None:
    """On a worker: wait (in a greenlet) for the master's ack carrying the index, then serve."""

    def wait_then_serve() -> None:
        waited = 0.0
        while getattr(runner, "worker_index", -1) < 0 and waited < INDEX_WAIT_S:
            gevent.sleep(0.05)
            waited += 0.05
        if runner.worker_index < 0:
            log.error("no worker index from the master after %.0f s: client metrics not served", INDEX_WAIT_S)
            return
        serve(opts, "worker", runner.worker_index)

    gevent.spawn(wait_then_serve)
