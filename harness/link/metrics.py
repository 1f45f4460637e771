"""The link's Prometheus series (prometheus-client, base units), declared once; each link keeps its children.

- drill_link_connections_total{link}: connections accepted.
- drill_link_connections_faulted_total{link,toxic}: connections a toxic began to act on (by its type).
- drill_link_streams_reset_total{link}: drill streams `rst_stream` reset.
- drill_link_bytes_held{link}: bytes toxics hold now (latency, bandwidth, slicer).
- drill_link_kernel_drops{link}: connections whose packets the kernel drops now (a kernel-mode `timeout`):
  the mode a blackhole acts in, as a series.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

CONNECTIONS = Counter("drill_link_connections_total", "Connections a link accepted", ["link"])
FAULTED = Counter("drill_link_connections_faulted_total", "Connections a toxic began to act on", ["link", "toxic"])
STREAMS_RESET = Counter("drill_link_streams_reset_total", "Drill streams a link reset (rst_stream)", ["link"])
BYTES_HELD = Gauge("drill_link_bytes_held", "Bytes a link's toxics hold now", ["link"])
KERNEL_DROPS = Gauge("drill_link_kernel_drops", "Connections whose packets the kernel drops now (kernel mode)",
                     ["link"])  # fmt: skip
#: every family above, for a /metrics that serves a chosen few (the runner's: harness.drills.trials.metrics_server)
FAMILIES = (CONNECTIONS, FAULTED, STREAMS_RESET, BYTES_HELD, KERNEL_DROPS)


class LinkMetrics:
    """One link's children (looked up once, as prometheus_client advises for hot paths)."""

    def __init__(self, link: str) -> None:
        self.link = link
        self.connections = CONNECTIONS.labels(link)
        self.streams_reset = STREAMS_RESET.labels(link)
        self._held = BYTES_HELD.labels(link)
        self._kernel = KERNEL_DROPS.labels(link)
        self._faulted: dict[str, object] = {}

    def held(self, delta: int) -> None:
        self._held.inc(delta)

    def kernel_drops(self, delta: int) -> None:
        self._kernel.inc(delta)

    def faulted(self, toxic_type: str) -> None:
        child = self._faulted.get(toxic_type)
        if child is None:
            child = self._faulted[toxic_type] = FAULTED.labels(self.link, toxic_type)
        child.inc()

    def count(self, what: str) -> None:
        if what == "stream_reset":
            self.streams_reset.inc()
