"""Names the dashboards, Grafana's provisioning and the drill annotations share, importable without the Grafana SDK.

`drill run --grafana` posts annotations with the core install plus grafana-client; only building dashboards needs
grafana-foundation-sdk (the `dashboards` extra), so nothing a drill imports may pull it in.
"""

from __future__ import annotations

#: Fixed uid of the provisioned Prometheus datasource (compose/grafana/provisioning/datasources/).
DATASOURCE_UID = "drill-prometheus"
#: Tag every drill annotation carries, so every dashboard shows them.
DRILL_TAG = "drill"
