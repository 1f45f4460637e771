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
configs: [naive, budget, resilient]      # names, `plain` (no resilience layer) or YAML paths
quick: {phases: {...}, configs: [...]}   # deep-merged over the plan by --quick
probe: {kind: half-open, count: 200, timeout_s: 8}   # optional: run `drill probe` at fault-on
```

`variants:` (optional) replaces `configs:` when runs differ by more than the
configuration: each is `{name, config, fault: {...}, traffic: {...}, hops: {HOP: {...}}, probe: {...}}`,
merged over the plan's own values. The variant name is the run's `config` label.
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
class Variant:
    """One run of a plan: a name (the `config` label), the resilience config, and what differs."""

    name: str
    config: str | None
    fault: Fault
    traffic: Traffic
    hops: list[HopSpec]
    probe: dict | None = None


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
    variants: list[Variant] = dataclasses.field(default_factory=list)

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
            "variants": [v.name for v in self.variants],
            "probe": self.probe,
        }


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _config_ref(config, base_dir: pathlib.Path) -> str | None:
    """None for no resilience layer; a shipped name as is; a `.yaml` path made absolute."""
    if config in (None, "plain", "none"):
        return None
    config = str(config)
    if config.endswith((".yaml", ".yml")):
        path = pathlib.Path(config)
        return str(path if path.is_absolute() else (base_dir / path).resolve())
    return config


def _label(config: str | None) -> str:
    if config is None:
        return "plain"
    if config.endswith((".yaml", ".yml")):
        return pathlib.Path(config).stem.removesuffix(".config")
    return config


def resolve(name_or_path: str) -> pathlib.Path:
    path = pathlib.Path(name_or_path)
    if path.exists():
        return path
    shipped = PLANS_DIR / f"{name_or_path.removesuffix('.yaml')}.yaml"
    if shipped.exists():
        return shipped
    raise PlanError(f"no plan {name_or_path!r} (not a file, not in {PLANS_DIR})")


def shipped_plans() -> list[str]:
    """Plan names in harness/plans (`*.config.yaml` there are resilience configurations plans use)."""
    return sorted(p.stem for p in PLANS_DIR.glob("*.yaml") if not p.name.endswith(".config.yaml"))


def load_plan(
    name_or_path: str, *, quick: bool = False, overrides: dict | None = None, only: list[str] | None = None
) -> Plan:
    """Load a plan; `quick` applies its `quick:` block; `only` keeps those configurations/variants."""
    path = resolve(name_or_path)
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise PlanError(f"{path}: a plan is a mapping")
    if quick and isinstance(data.get("quick"), dict):
        data = _merge(data, data["quick"])
    if overrides:
        data = _merge(data, overrides)
    if only:
        if data.get("variants"):
            known = [v.get("name") or _label(_config_ref(v.get("config"), path.parent)) for v in data["variants"]]
            missing = set(only) - set(known)
            if missing:
                raise PlanError(f"no variant {sorted(missing)} in {path} (have {known})")
            data["variants"] = [v for v, n in zip(data["variants"], known, strict=True) if n in only]
        else:
            data["configs"] = list(only)
    return from_dict(data, source=str(path))


def from_dict(data: dict, source: str = "") -> Plan:
    try:
        topo = data.get("topology") or {}
        hops_raw = topo.get("hops") or [{"name": n} for n in DEFAULT_HOPS]
        hops = [HopSpec.from_dict(h) for h in hops_raw]
        fault = Fault(**(data.get("fault") or {"directive": ""}))
        ph = data.get("phases") or {}
        phases = Phases(float(ph.get("warmup", 8)), float(ph.get("fault", 15)), float(ph.get("recovery", 15)))
        base_dir = pathlib.Path(source).parent if source else pathlib.Path.cwd()
        configs = data.get("configs") or [None]
        configs = [_config_ref(c, base_dir) for c in configs]
        traffic = Traffic.from_dict(data.get("traffic"))
        variants = []
        for raw in data.get("variants") or [{"config": c} for c in configs]:
            raw = dict(raw)
            config = _config_ref(raw.pop("config", None), base_dir)
            name = str(raw.pop("name", None) or _label(config))
            v_fault = Fault(**{**dataclasses.asdict(fault), **(raw.pop("fault", None) or {})})
            v_traffic = Traffic.from_dict({**dataclasses.asdict(traffic), **(raw.pop("traffic", None) or {})})
            over = raw.pop("hops", None) or {}
            v_probe = {**(data.get("probe") or {}), **(raw.pop("probe", None) or {})} or None
            if raw:
                raise PlanError(f"unknown variant keys: {sorted(raw)}")
            v_hops = [HopSpec.from_dict({**dataclasses.asdict(h), **over.get(h.name, {})}) for h in hops]
            variants.append(Variant(name, config, v_fault, v_traffic, v_hops, v_probe))
        names = [v.name for v in variants]
        if len(set(names)) != len(names):
            raise PlanError(f"variant names must be unique: {names}")
        for v in variants:
            if v.fault.target and v.fault.target not in [h.name for h in hops]:
                raise PlanError(f"fault.target {v.fault.target!r} is not a hop ({[h.name for h in hops]})")
        return Plan(
            name=str(data.get("name") or pathlib.Path(source).stem or "drill"),
            seed=int(data.get("seed", 42)),
            hops=hops,
            timeout_s=topo.get("timeout_s"),
            traffic=traffic,
            fault=fault,
            phases=phases,
            slo=Slo.from_dict(data.get("slo")),
            configs=configs,
            description=str(data.get("description", "")),
            probe=data.get("probe"),
            source=source,
            variants=variants,
        )
    except PlanError:
        raise
    except (TypeError, ValueError, KeyError) as exc:
        raise PlanError(f"{source or 'plan'}: {exc}") from exc
