"""The overview's "Links" row: what `drill link`'s toxics did to connections (harness/link/metrics.py's series).

A link's series carry `link` (and `toxic`), never a hop's `service`: a running `drill link` is scraped on its
`--metrics-port` under whatever job its stack gives it (compose scrapes it as `ledger`), a plan's link runs in
the runner's process. So these panels filter on `$link` alone and sum over whoever scraped it; `$service`
would hide a link whose scrape names another service.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from harness.dashboards._common import label_variable, series

LINK = 'link=~"$link"'


def link_variable() -> db.QueryVariable:
    """Which links (every link that accepted a connection, or was created: its counter starts at 0)."""
    return label_variable("link", "Link", "label_values(drill_link_connections_total, link)")


#: (title, description, PromQL, legend, unit) of each panel, in order
PANELS = (
    ("Link connections accepted/s",
     "How many connections callers opened through each link (drill_link_connections_total): a caller that gives up "
     "on a silent connection and dials again shows here.",
     f"sum by (link) (rate(drill_link_connections_total{{{LINK}}}[$__rate_interval]))", "{{link}}", "cps"),
    ("Connections a toxic acted on (since the link started)",
     "How many connections each toxic began to act on, by link and toxic type (drill_link_connections_faulted_total, "
     "shown as the count: a blackhole acts on a handful, and a series born at its first connection has no rate). A "
     "step is the toxic reaching another connection.",
     f"sum by (link, toxic) (drill_link_connections_faulted_total{{{LINK}}})", "{{link}} · {{toxic}}", "short"),
    ("Drill streams reset/s (rst_stream)",
     "Streams carrying the drill tenant that an rst_stream toxic reset (drill_link_streams_reset_total); organic "
     "streams on the same connections are never reset.",
     f"sum by (link) (rate(drill_link_streams_reset_total{{{LINK}}}[$__rate_interval]))", "{{link}}", "reqps"),
    ("Bytes held by toxics now",
     "Bytes a link's latency, bandwidth or slicer toxics hold at this moment (drill_link_bytes_held): what callers "
     "are waiting for; back to 0 once the toxic is removed.",
     f"sum by (link) (drill_link_bytes_held{{{LINK}}})", "{{link}}", "bytes"),
    ("Connections the kernel drops now (kernel-mode blackhole)",
     "Connections whose packets nftables drops at this moment (drill_link_kernel_drops): a timeout toxic with mode "
     "kernel. 0 for a user-space blackhole, which still ACKs at the TCP level.",
     f"sum by (link) (drill_link_kernel_drops{{{LINK}}})", "{{link}}", "short"),
)  # fmt: skip


def with_links_row(d: db.Dashboard) -> db.Dashboard:
    """Append the "Links" row and its panels to `d` (the last one alone on its line, full width)."""
    d = d.with_row(db.Row("Links (drill link: toxics on connections)"))
    for i, (title, description, expr, legend, unit) in enumerate(PANELS):
        extra = {"w": 24} if i == len(PANELS) - 1 else {}
        d = d.with_panel(series(title, description, [(expr, legend)], unit=unit, **extra))
    return d
