"""Loading drill plans (YAML) into the typed model, with every error named by its key path.

A plan is data (see `harness.drills.plan.model.PlanFile` and docs/drills.md);
`load_plan` parses it, applies the `quick:` block when asked, resolves each
configuration or variant, and refuses anything it does not know before a single
process starts. Shipped plans live in harness/plans/NAME.yaml and can be named
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
guard: {stop_when: [{kind: error_rate, above: 0.2, for_s: 3}]}   # optional: stop conditions (plan/guards.py)
```

`variants:` (optional) replaces `configs:` when runs differ by more than the
configuration: each is `{name, config, fault: {...}, traffic: {...}, hops: {HOP: {...}}, probe: {...}}`,
merged over the plan's own values. The variant name is the run's `config` label.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib

import pydantic
import yaml

from harness.core.errors import BadInput
from harness.core.ids import check_plan_name
from harness.drills.plan.links import check_links
from harness.drills.plan.model import Plan, PlanFile, Variant
from harness.drills.plan.sections import Fault, HopSpec, Probe, Traffic
from harness.drills.plan.stack import EDGE_FORMS
from harness.resilience.config import NAMES as CONFIG_NAMES
from harness.resilience.config import ConfigError
from harness.resilience.config import load as load_config

_HARNESS = pathlib.Path(__file__).resolve().parents[2]
PLANS_DIR = _HARNESS / "plans"
#: beside the stage packages, where editors' settings have always found it
SCHEMA_PATH = _HARNESS / "drills" / "plan.schema.json"
PROFILES_DIR = _HARNESS.parent / "loadtests" / "profiles"


class PlanError(BadInput):
    """A plan that cannot run; the message names the file and the key path."""


def schema() -> dict:
    """JSON Schema of a plan file, for editors (kept in harness/drills/plan.schema.json)."""
    return PlanFile.model_json_schema()


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _errors(exc: pydantic.ValidationError, source: str, prefix: str = "") -> PlanError:
    """One line per problem: `FILE: key.path: message`."""
    lines = []
    for err in exc.errors():
        parts = [*(prefix.split(".") if prefix else []), *err["loc"]]
        loc = ".".join(str(p) for p in parts if p != "")
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "string_pattern_mismatch":
            # the regex is the schema's business: the user reads the form in words where we have them
            field = str(parts[-1]) if parts else ""
            words = EDGE_FORMS.get(field) if "edge" in parts else None
            msg = f"{err['input']!r}: {words}" if words else f"{err['input']!r}: {msg.lower()}"
        lines.append(f"{loc}: {msg}" if loc else msg)
    return PlanError(f"{source}: " + "; ".join(lines))


def _validate(model: type[pydantic.BaseModel], data: dict, where: str, key: str):
    """`model` from `data` (a variant's values merged over the plan's), or PlanError naming `key.field`."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise _errors(exc, where, key) from None


def _config_ref(config, base_dir: pathlib.Path, where: str) -> str | None:
    """None for no resilience layer; a shipped name as is; a `.yaml` path made absolute and checked."""
    if config in (None, "plain", "none"):
        return None
    config = str(config)
    if config.endswith((".yaml", ".yml", ".json")):
        path = pathlib.Path(config)
        path = path if path.is_absolute() else (base_dir / path).resolve()
        if not path.is_file():
            shipped = PLANS_DIR / path.name
            if not shipped.is_file():
                raise PlanError(f"{where}: no configuration file {config!r}")
            path = shipped
        try:
            load_config(str(path))
        except ConfigError as exc:
            raise PlanError(f"{where}: {exc}") from None
        return str(path)
    if config not in CONFIG_NAMES:
        raise PlanError(f"{where}: unknown configuration {config!r} (shipped: {', '.join(CONFIG_NAMES)}, plain)")
    return config


def locust_profile(name: str) -> pathlib.Path:
    return PROFILES_DIR / f"{name}.conf"


def _check_locust_profile(profile: str | None, where: str) -> None:
    """The Locust driver needs an existing profile (and Locust installed): say so before starting."""
    known = sorted(p.stem for p in PROFILES_DIR.glob("*.conf"))
    if not profile:
        raise PlanError(f"{where}: the locust driver needs a profile (--profile NAME; have {', '.join(known)})")
    if not locust_profile(profile).is_file():
        raise PlanError(f"{where}: no Locust profile {profile!r} in {PROFILES_DIR} (have {', '.join(known)})")
    import importlib.util

    if importlib.util.find_spec("locust") is None:
        raise PlanError(f"{where}: the locust driver needs Locust (pip install 'drill-harness[load]')")


def _label(config: str | None) -> str:
    if config is None:
        return "plain"
    if config.endswith((".yaml", ".yml", ".json")):
        return pathlib.Path(config).stem.removesuffix(".config")
    return config


def resolve(name_or_path: str) -> pathlib.Path:
    path = pathlib.Path(name_or_path)
    if path.is_file():
        return path
    shipped = PLANS_DIR / f"{name_or_path.removesuffix('.yaml')}.yaml"
    if shipped.is_file():
        return shipped
    raise PlanError(f"no plan {name_or_path!r} (not a file; shipped plans: {', '.join(shipped_plans())})")


def shipped_plans() -> list[str]:
    """Plan names in harness/plans (`*.config.yaml` there are resilience configurations plans use)."""
    return sorted(p.stem for p in PLANS_DIR.glob("*.yaml") if not p.name.endswith(".config.yaml"))


def read_yaml(path: pathlib.Path) -> dict:
    """A YAML mapping, or PlanError with the line and column of a syntax error."""
    try:
        data = yaml.safe_load(path.read_text())
    except UnicodeDecodeError:
        raise PlanError(f"{path}: not a plan (not UTF-8 text); a plan is a YAML file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlanError(f"{path}:{where}: YAML syntax error: {problem}") from None
    except OSError as exc:
        raise PlanError(f"{path}: {exc.strerror}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PlanError(f"{path}: a plan is a mapping of keys (name, fault, phases, ...)")
    return data


def load_plan(
    name_or_path: str, *, quick: bool = False, overrides: dict | None = None, only: list[str] | None = None
) -> Plan:
    """Load a plan; `quick` applies its `quick:` block; `only` keeps those configurations/variants."""
    path = resolve(name_or_path)
    data = read_yaml(path)
    if isinstance(data.get("quick"), dict):
        # validated whether or not --quick is given, so a typo in it shows up at once; the plan without it
        # first, so what is left to blame on the quick block is named as its key (quick.phases.fualt)
        if overrides:
            from_dict(_merge(data, overrides), source=str(path))
        else:
            from_dict(data, source=str(path))
        try:
            from_dict(_merge(data, data["quick"]), source=str(path))
        except PlanError as exc:
            raise PlanError(str(exc).replace(f"{path}: ", f"{path}: quick.", 1)) from None
        if quick:
            data = _merge(data, data["quick"])
    if overrides:
        data = _merge(data, overrides)
    plan = from_dict(data, source=str(path))
    if only:
        known = [v.name for v in plan.variants]
        if plan.variants and not data.get("variants"):
            # `configs:` plans: --config may name any configuration, not just the plan's own
            data = {**data, "configs": list(only)}
            return from_dict(data, source=str(path))
        missing = sorted(set(only) - set(known))
        if missing:
            raise PlanError(f"no variant {missing} in {path} (have {known})")
        plan = plan.model_copy(update={"variants": tuple(v for v in plan.variants if v.name in only)})
    return plan


def from_dict(data: dict, source: str = "") -> Plan:
    """Validate a plan mapping (unknown keys, types, ranges, configuration names) into a `Plan`."""
    where = source or "plan"
    try:
        spec = PlanFile.model_validate(data)
    except pydantic.ValidationError as exc:
        raise _errors(exc, where) from None
    base_dir = pathlib.Path(source).parent if source else pathlib.Path.cwd()
    if spec.stack is not None:
        return _stack_plan(spec, where, base_dir, source)
    hops = spec.topology.hops
    variants: list[Variant] = []
    raws = spec.variants or [None] * len(spec.configs)
    for i, raw in enumerate(raws):
        at = f"{where}: variants[{i}]" if spec.variants else f"{where}: configs[{i}]"
        config = _config_ref(raw.config if raw else spec.configs[i], base_dir, at)
        name = (raw.name if raw else None) or _label(config)
        key = f"variants.{i}"
        fault = _validate(Fault, {**spec.fault.model_dump(), **(raw.fault if raw else {})}, where, f"{key}.fault")
        traffic = _validate(Traffic, {**spec.traffic.model_dump(), **(raw.traffic if raw else {})}, where,
                            f"{key}.traffic")  # fmt: skip
        over = raw.hops if raw else {}
        unknown_hops = sorted(set(over) - {hop.name for hop in hops})
        if unknown_hops:
            raise PlanError(f"{at}.hops: no hop {unknown_hops} in the topology")
        v_hops = tuple(
            _validate(HopSpec, {**hop.model_dump(), **over.get(hop.name, {})}, where, f"{key}.hops.{hop.name}")
            for hop in hops
        )
        probe_raw = {**(spec.probe.model_dump() if spec.probe else {}), **((raw.probe or {}) if raw else {})}
        probe = _validate(Probe, probe_raw, where, f"{key}.probe") if probe_raw else None
        if fault.target and fault.target not in [hop.name for hop in hops]:
            raise PlanError(f"{at}.fault.target: {fault.target!r} is not a hop")
        _check_variant_links(spec, fault, v_hops, at)
        if traffic.driver == "locust":
            _check_locust_profile(traffic.profile, f"{at}.traffic.profile")
        variants.append(Variant(name=name, config=config, fault=fault, traffic=traffic, hops=v_hops, probe=probe))
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise PlanError(f"{where}: variant names must be unique: {names}")
    return Plan(
        name=_plan_name(spec, source, where),
        seed=spec.seed,
        hops=hops,
        timeout_s=spec.topology.timeout_s,
        traffic=spec.traffic,
        fault=spec.fault,
        phases=spec.phases,
        slo=spec.slo,
        variants=tuple(variants),
        trials=spec.trials,
        description=spec.description,
        probe=spec.probe,
        source=source,
        guard=spec.guard,
        topology_links=spec.topology.links,
    )


def _check_variant_links(spec: PlanFile, fault: Fault, hops: tuple[HopSpec, ...], at: str) -> None:
    """A variant's own fault names one of the topology's links, and its hops still have each link's replica."""
    links = spec.topology.links
    if fault.link is not None and fault.link.link not in [link.name for link in links]:
        raise PlanError(f"{at}.fault.link.link: {fault.link.link!r} is not a link ({[k.name for k in links]})")
    try:
        check_links(links, {hop.name: hop.replicas for hop in hops}, hops[0].name)
    except ValueError as exc:
        raise PlanError(f"{at}.hops: {exc}") from None


def _plan_name(spec: PlanFile, source: str, where: str) -> str:
    """The plan's name (`name`, else the file's stem), refused when its request ids could not carry it."""
    name = spec.name or (pathlib.Path(source).stem if source else "drill")
    try:
        check_plan_name(name)
    except BadInput as exc:
        raise PlanError(f"{where}: name: {exc}") from None
    return name


def _stack_plan(spec: PlanFile, where: str, base_dir: pathlib.Path, source: str) -> Plan:
    """A plan on a running stack: one variant per `stack.configs` entry (its switch command selects it).

    Every path of a stack file is read from the plan file's folder, as configuration files are: the proxy's and
    the edge's `.proto`/descriptor set (the proxy's first: an edge without its own took the proxy's, so a
    missing file is named under the key the user wrote it), their `proto_path`, and `stack.audit.files`
    globs. Absolute paths stay as they are."""
    stack = spec.stack
    if stack.proxy is not None:
        stack = stack.model_copy(update={"proxy": _files_of(stack.proxy, "stack.proxy", base_dir, where)})
    edge = _files_of(stack.edge, "stack.edge", base_dir, where)
    if stack.audit is not None and stack.audit.files:
        # globs, not files: joined to the folder, never normalised (`*/../x` stays the glob it was); whether
        # they match is the preflight's question, asked once the services run (they may create their logs then)
        folder = str(base_dir.resolve())
        files = [p if os.path.isabs(p) else os.path.join(folder, p) for p in stack.audit.files]
        stack = stack.model_copy(update={"audit": stack.audit.model_copy(update={"files": files})})
    if spec.traffic.driver == "locust":
        raise PlanError(f"{where}: traffic.driver: a stack is driven by the runner's aio load")
    variants = tuple(
        Variant(name=c.name, config=None, fault=spec.fault, traffic=spec.traffic, hops=()) for c in stack.configs
    )
    return Plan(
        name=_plan_name(spec, source, where),
        seed=spec.seed,
        hops=(),
        timeout_s=None,
        traffic=spec.traffic,
        fault=spec.fault,
        phases=spec.phases,
        slo=spec.slo,
        variants=variants,
        trials=spec.trials,
        description=spec.description,
        source=source,
        stack=stack.model_copy(update={"edge": edge}),
        guard=spec.guard,
    )


def _files_of(section, key: str, base_dir: pathlib.Path, where: str):
    """`section` (the edge or the proxy) with its `proto`/`descriptor_set` made absolute from `base_dir` and
    checked to exist, or PlanError naming `key.field`; its `proto_path` made absolute too."""
    section = section.model_copy(update={"proto_path": [str((base_dir / d).resolve()) for d in section.proto_path]})
    for field in ("proto", "descriptor_set"):
        value = getattr(section, field)
        if value and not pathlib.Path(value).is_absolute():
            section = section.model_copy(update={field: str((base_dir / value).resolve())})
        value = getattr(section, field)
        if value and not pathlib.Path(value).is_file():
            raise PlanError(f"{where}: {key}.{field}: no file {value!r}")
    return section


def write_schema(path: pathlib.Path = SCHEMA_PATH) -> None:
    path.write_text(json.dumps(schema(), indent=2, sort_keys=True) + "\n")
