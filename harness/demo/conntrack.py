"""TCP connection states per local port: the `drill_tcp_connections{port,state}` gauge.

Interceptors never see a connection that is half-open or stuck in CLOSE_WAIT;
the kernel does. This collector reads /proc/net/tcp{,6} at scrape time (Linux
only; elsewhere it yields nothing) and counts sockets on the watched local ports.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from harness.core.metrics import TCP_CONNECTIONS_NAME

#: Kernel state codes (include/net/tcp_states.h).
TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
}


def count_states(ports: Iterable[int], tables: Iterable[str] = ("/proc/net/tcp", "/proc/net/tcp6")) -> dict:
    """{(port, state): count} for sockets whose local port is watched."""
    watched = set(ports)
    counts: collections.Counter = collections.Counter()
    for table in tables:
        try:
            with open(table) as fh:
                next(fh, None)
                for line in fh:
                    parts = line.split()
                    if len(parts) < 4:
                        continue
                    port = int(parts[1].rsplit(":", 1)[1], 16)
                    if port in watched:
                        counts[(port, TCP_STATES.get(parts[3], parts[3]))] += 1
        except OSError:
            continue
    return dict(counts)


class TcpStateCollector(Collector):
    """Collects `drill_tcp_connections` for a set of local ports (the server's listening ports)."""

    def __init__(self, ports: Iterable[int] = ()) -> None:
        self.ports: set[int] = set(ports)

    def watch(self, port: int) -> None:
        self.ports.add(port)

    def collect(self):
        family = GaugeMetricFamily(
            TCP_CONNECTIONS_NAME,
            "TCP sockets on the server's ports by kernel state.",
            labels=["port", "state"],
        )
        for (port, state), n in sorted(count_states(self.ports).items()):
            family.add_metric([str(port), state], n)
        yield family


_collector: TcpStateCollector | None = None


def watch_port(port: int) -> TcpStateCollector:
    """Watch `port` on the process-wide collector (registered on first use)."""
    global _collector
    if _collector is None:
        _collector = TcpStateCollector()
        REGISTRY.register(_collector)
    _collector.watch(port)
    return _collector
