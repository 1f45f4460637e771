"""The drill plan the generated rules and dashboards default to (contracts §10: one answer everywhere).

The recorded rate window, the SLO budget of the burn-rate alerts and the MTTR
board's template-variable defaults all come from one shipped plan
(`harness/plans/retry-storm.yaml`), read here as plain YAML (the dashboards
layer does not import the drill runner). Scrapes are 1 s apart, so a PromQL
range of `window_s + 1` seconds holds `window_s` seconds of increments: the
runner's "error rate over the `window_s` seconds ending at t".
"""

from __future__ import annotations

import dataclasses
import pathlib

import yaml

PLANS_DIR = pathlib.Path(__file__).resolve().parents[1] / "plans"
DEFAULT_PLAN = "retry-storm"
#: The edge callers (in-runner load and Locust): the `service` of the client series the SLO reads.
EDGE_SERVICES = "loadgen|locust"
#: Scrape interval of the runner's Prometheus and the compose stack (s).
SCRAPE_S = 1


@dataclasses.dataclass(frozen=True)
class PlanDefaults:
    plan: str
    #: SLO error budget: the plan's `slo.max_error_rate`
    budget: float
    #: the plan's `slo.window_s`
    window_s: int
    #: the plan's `slo.traffic` (organic | drill | all)
    traffic: str

    @property
    def window(self) -> str:
        """The PromQL range that holds `window_s` seconds of increments at 1 s scrapes."""
        return f"{self.window_s + SCRAPE_S}s"

    @property
    def traffic_matcher(self) -> str:
        return "" if self.traffic == "all" else f'traffic="{self.traffic}"'


def load(plan: str = DEFAULT_PLAN) -> PlanDefaults:
    data = yaml.safe_load((PLANS_DIR / f"{plan}.yaml").read_text(encoding="utf-8"))
    slo = data.get("slo") or {}
    return PlanDefaults(
        plan=data.get("name", plan),
        budget=float(slo.get("max_error_rate", 0.05)),
        window_s=int(slo.get("window_s", 1)),
        traffic=str(slo.get("traffic", "all")),
    )
