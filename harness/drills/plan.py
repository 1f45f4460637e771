"""Drill plans (YAML): topology, traffic, fault, phases, SLO and the configurations to compare.

A plan is data; `load_plan` validates it and applies the `quick:` overrides
when asked. Shipped plans live in harness/plans/NAME.yaml and can be named
without a path (`drill run retry-storm`).

```yaml
name: retry-storm
seed: 42
topology:
  hops: [{name: gateway, replicas: 1, work_ms: 2, concurrency: 32, queue: 64}, ...]
  timeout_s: 1.0          # downstream timeout when no configuration is named
traffic: {organic_users: 4, organic_rate: 10, drill_users: 1, drill_rate: 10, timeout_s: 2}
fault: {directive: "abort:UNAVAILABLE", ratio: 100, target: ledger, instances: 100}
phases: {warmup: 8, fault: 15, recovery: 15}
slo: {max_error_rate: 0.05, hold_s: 3, traffic: all}
configs: [naive, budget, resilient]
quick: {phases: {...}, configs: [...]}   # deep-merged over the plan by --quick
probe: {kind: half-open, connections: 50, timeout_s: 3}   # optional, see runner
```
"""

from __future__ import annotations

import copy
import dataclasses
import pathlib

import yaml

from harness.drills.analysis import Slo
from harness.drills.load import Fault, Phases, Traffic
from harness.drills.topology import HopSpec

PLANS_DIR = pathlib.Path(__file__).resolve().parents[1] / "plans"

DEFAULT_HOPS = ("gateway", "order", "account", "ledger")


class PlanError(ValueError):
    pass


@dataclasses.dataclass
class Plan:
    name: str
    seed: int
    hops: list[HopSpec]
    timeout_s: float | None
    traffic: Traffic
    fault: Fault
    phases: Phases
    slo: Slo
    configs: list[str | None]
    description: str = ""
    probe: dict | None = None
    source: str = ""

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "seed": self.seed,
            "description": self.description,
            "hops": [dataclasses.asdict(h) for h in self.hops],
            "traffic": dataclasses.asdict(self.traffic),
            "fault": dataclasses.asdict(self.fault),
            "phases": dataclasses.asdict(self.phases),
            "slo": dataclasses.asdict(self.slo),
            "configs": [c or "plain" for c in self.configs],
        }


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def resolve(name_or_path: str) -> pathlib.Path:
    path = pathlib.Path(name_or_path)
    if path.exists():
        return path
    shipped = PLANS_DIR / f"{name_or_path.removesuffix('.yaml')}.yaml"
    if shipped.exists():
        return shipped
    raise PlanError(f"no plan {name_or_path!r} (not a file, not in {PLANS_DIR})")


def shipped_plans() -> list[str]:
    return sorted(p.stem for p in PLANS_DIR.glob("*.yaml"))


def load_plan(name_or_path: str, *, quick: bool = False, overrides: dict | None = None) -> Plan:
    path = resolve(name_or_path)
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise PlanError(f"{path}: a plan is a mapping")
    if quick and isinstance(data.get("quick"), dict):
        data = _merge(data, data["quick"])
    if overrides:
        data = _merge(data, overrides)
    return from_dict(data, source=str(path))


def from_dict(data: dict, source: str = "") -> Plan:
    try:
        topo = data.get("topology") or {}
        hops_raw = topo.get("hops") or [{"name": n} for n in DEFAULT_HOPS]
        hops = [HopSpec.from_dict(h) for h in hops_raw]
        fault_raw = data.get("fault") or {}
        if "directive" not in fault_raw:
            raise PlanError("fault.directive is required")
        fault = Fault(**fault_raw)
        ph = data.get("phases") or {}
        phases = Phases(float(ph.get("warmup", 8)), float(ph.get("fault", 15)), float(ph.get("recovery", 15)))
        configs = data.get("configs") or [None]
        configs = [None if c in (None, "plain", "none") else str(c) for c in configs]
        if fault.target and fault.target not in [h.name for h in hops]:
            raise PlanError(f"fault.target {fault.target!r} is not a hop ({[h.name for h in hops]})")
        return Plan(
            name=str(data.get("name") or pathlib.Path(source).stem or "drill"),
            seed=int(data.get("seed", 42)),
            hops=hops,
            timeout_s=topo.get("timeout_s"),
            traffic=Traffic.from_dict(data.get("traffic")),
            fault=fault,
            phases=phases,
            slo=Slo.from_dict(data.get("slo")),
            configs=configs,
            description=str(data.get("description", "")),
            probe=data.get("probe"),
            source=source,
        )
    except PlanError:
        raise
    except (TypeError, ValueError, KeyError) as exc:
        raise PlanError(f"{source or 'plan'}: {exc}") from exc
