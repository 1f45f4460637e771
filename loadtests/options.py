"""The drill options of a Locust profile: the `--drill-*` arguments and their parsing.

This module owns the interface the drill runner drives (argument names, defaults,
`LOCUST_DRILL_*` environment variables) and turns parsed options into a
`DrillOptions` value. It imports neither locust nor gevent, so tests and the
runner can use it in a plain Python process.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from harness.core.faults import ABSOLUTE_MAX_DELAY_MS, DirectiveError, parse_directive
from harness.core.headers import DEFAULT_DRILL_TENANT

#: The phase whose name turns the directive on; any other phase sends none.
FAULT_PHASE = "fault"
#: Phase name exported while a shapeless run (empty `--drill-phases`) sends its directive.
STEADY_FAULT_PHASE = "fault"
#: Phase name exported while a shapeless run has no directive.
STEADY_PHASE = "steady"
#: Phase name exported once every phase has elapsed.
DONE_PHASE = "done"

TRAFFIC_CLASSES: tuple[str, ...] = ("organic", "drill")


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    seconds: float

    @property
    def fault(self) -> bool:
        return self.name == FAULT_PHASE


@dataclasses.dataclass(frozen=True)
class DrillOptions:
    """Everything a drill profile sets, already validated."""

    tenant: str = DEFAULT_DRILL_TENANT
    directive: str | None = None
    ratio: int = 100
    target: str | None = None
    instances: int | None = None
    #: `x-fault-scope`: request (every retry of a hit id is hit again) or attempt (one draw per attempt)
    scope: str = "request"
    #: `x-fault-attempts`: a hit id is faulted only on its first N attempts (None = all)
    attempts: int | None = None
    config: str = "none"
    plan: str = "adhoc"
    phases: tuple[Phase, ...] = ()
    users: int = 20
    weights: dict[str, int] = dataclasses.field(default_factory=lambda: {"organic": 1, "drill": 1})
    rate: float = 0.0
    #: requests/s per organic user; None = `rate` (one rate for every user)
    organic_rate: float | None = None
    timeout: float = 2.0
    cancel_ms: float | None = None
    cancel_share: int = 0
    #: client /metrics base port; None = off, 0 = a port each process binds itself (see `ports_dir`)
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    #: directory where each process writes the ports it bound (`ROLE[-INDEX].json`); empty = none
    ports_dir: str | None = None
    metrics_fixed: bool = False
    threadpool: int = 0
    #: seed in the request ids (`PLAN-SEED-USER-N-MIX`); the runner passes the plan's
    seed: int = 0
    #: directory where each process appends the ids it sent with the directive (empty = none)
    ids_dir: str | None = None
    #: the trial this run is (the `trial` label of drill_trial_phase_start_seconds)
    trial: int = 1
    #: the method users call, `pkg.Service/Method` (empty: the demo's `drill.v1.Demo/Call`)
    method: str | None = None
    #: its request as protobuf JSON text (an object; a list of objects for a client stream), or `@FILE`
    request: str = "{}"
    #: where its types come from: a .proto (compiled with grpcio-tools), a descriptor set, or reflection (neither)
    proto: str | None = None
    descriptor_set: str | None = None
    #: import path of `proto` (default: its folder)
    proto_path: tuple[str, ...] = ()
    #: messages/s within a client stream (None: as fast as the stream takes them)
    message_rate: float | None = None

    @property
    def total_seconds(self) -> float:
        return sum(p.seconds for p in self.phases)


def phase_at(phases: tuple[Phase, ...], t: float) -> str:
    """The phase at `t` s after the first one starts (`done` after the last), as the in-runner load decides
    a call's phase from its scheduled time (`harness.drills.plan.sections.Phases.at`: same sums, same comparisons)."""
    end = 0.0
    for phase in phases:
        end += phase.seconds
        if t < end:
            return phase.name
    return DONE_PHASE


def parse_phases(text: str | None) -> tuple[Phase, ...]:
    """`warmup=10,fault=20,recovery=20` -> phases in order. Empty -> no phases (no shape)."""
    out: list[Phase] = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"phase {part!r}: expected NAME=SECONDS")
        seconds = float(value)
        if seconds <= 0:
            raise ValueError(f"phase {part!r}: seconds must be > 0")
        out.append(Phase(name, seconds))
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate phase names in {text!r}")
    return tuple(out)


def parse_weights(text: str | None) -> dict[str, int]:
    """`organic=3,drill=1` -> {"organic": 3, "drill": 1}; a class left out keeps weight 1; 0 leaves it out."""
    weights = {"organic": 1, "drill": 1}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip().lower()
        if not sep or name not in weights:
            raise ValueError(f"weight {part!r}: expected organic=N or drill=N")
        n = int(value)
        if n < 0:
            raise ValueError(f"weight {part!r}: must be >= 0")
        weights[name] = n
    if not any(weights.values()):
        raise ValueError(f"weights {text!r}: at least one class needs a weight above 0")
    return weights


def _optional_int(value: Any) -> int | None:
    if value in (None, ""):
        return None
    return int(value)


def _optional_float(value: Any) -> float | None:
    if value in (None, ""):
        return None
    return float(value)


def _message_rate(value: Any) -> float | None:
    rate = _optional_float(value)
    if rate is not None and rate <= 0:
        raise ValueError("--drill-message-rate must be > 0 (empty = as fast as the stream takes them)")
    return rate


def _request(value: Any) -> str:
    """`--drill-request` as given (an empty one is refused when the method is resolved); unset = `{}`."""
    return "{}" if value is None else str(value).strip()


def from_namespace(ns: Any) -> DrillOptions:
    """Build DrillOptions from Locust's parsed options (any object with the `drill_*` attributes)."""
    ratio = int(getattr(ns, "drill_ratio", 100))
    if not 0 <= ratio <= 100:
        raise ValueError(f"--drill-ratio {ratio}: must be 0-100")
    cancel_ms = _optional_float(getattr(ns, "drill_cancel_ms", None))
    share = _optional_int(getattr(ns, "drill_cancel_share", None))
    if share is None:
        share = 100 if cancel_ms is not None else 0  # --drill-cancel-ms alone cancels every drill call
    if not 0 <= share <= 100:
        raise ValueError(f"--drill-cancel-share {share}: must be 0-100")
    instances = _optional_int(getattr(ns, "drill_instances", None))
    if instances is not None and not 0 <= instances <= 100:
        raise ValueError(f"--drill-instances {instances}: must be 0-100")
    scope = (getattr(ns, "drill_fault_scope", None) or "request").strip().lower()
    if scope not in ("request", "attempt"):
        raise ValueError(f"--drill-fault-scope {scope!r}: must be request or attempt")
    attempts = _optional_int(getattr(ns, "drill_fault_attempts", None))
    if attempts is not None and attempts < 1:
        raise ValueError(f"--drill-fault-attempts {attempts}: must be >= 1")
    timeout = float(getattr(ns, "drill_timeout", 2.0))
    if timeout <= 0:
        raise ValueError("--drill-timeout must be > 0")
    rate = float(getattr(ns, "drill_rate", 0.0) or 0.0)
    if rate < 0:
        raise ValueError("--drill-rate must be >= 0")
    organic_rate = _optional_float(getattr(ns, "drill_organic_rate", None))
    if organic_rate is not None and organic_rate < 0:
        raise ValueError("--drill-organic-rate must be >= 0")
    message_rate = _message_rate(getattr(ns, "drill_message_rate", None))
    proto = (getattr(ns, "drill_proto", "") or "").strip() or None
    descriptor_set = (getattr(ns, "drill_descriptor_set", "") or "").strip() or None
    if proto and descriptor_set:
        raise ValueError("give --drill-proto or --drill-descriptor-set, not both (neither = server reflection)")
    proto_path = tuple(p for p in (getattr(ns, "drill_proto_path", "") or "").split(os.pathsep) if p.strip())
    return DrillOptions(
        tenant=getattr(ns, "drill_tenant", None) or DEFAULT_DRILL_TENANT,
        directive=_directive(getattr(ns, "drill_directive", "")),
        ratio=ratio,
        target=(getattr(ns, "drill_target", "") or "").strip() or None,
        instances=instances,
        scope=scope,
        attempts=attempts,
        config=getattr(ns, "drill_config", None) or "none",
        plan=getattr(ns, "drill_plan", None) or "adhoc",
        phases=parse_phases(getattr(ns, "drill_phases", "")),
        users=int(getattr(ns, "drill_users", 20)),
        weights=parse_weights(getattr(ns, "drill_weights", "")),
        rate=rate,
        organic_rate=organic_rate,
        timeout=timeout,
        cancel_ms=cancel_ms,
        cancel_share=share,
        metrics_port=_optional_int(getattr(ns, "drill_metrics_port", None)),
        ports_dir=(getattr(ns, "drill_ports_dir", "") or "").strip() or None,
        metrics_host=getattr(ns, "drill_metrics_host", None) or "127.0.0.1",
        metrics_fixed=bool(getattr(ns, "drill_metrics_fixed", False)),
        threadpool=int(getattr(ns, "drill_threadpool", 0) or 0),
        seed=int(getattr(ns, "drill_seed", 0) or 0),
        ids_dir=(getattr(ns, "drill_ids_dir", "") or "").strip() or None,
        trial=int(getattr(ns, "drill_trial", 1) or 1),
        method=(getattr(ns, "drill_method", "") or "").strip() or None,
        request=_request(getattr(ns, "drill_request", None)),
        proto=proto,
        descriptor_set=descriptor_set,
        proto_path=proto_path,
        message_rate=message_rate,
    )


def _validated(parse: Any) -> Any:
    """An argparse `type` that checks a value with `parse` and keeps the text (bad input exits with usage)."""

    def check(text: str) -> str:
        try:
            parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return text

    check.__name__ = parse.__name__
    return check


def _percent(text: str) -> int:
    n = int(text)
    if not 0 <= n <= 100:
        raise argparse.ArgumentTypeError(f"{n}: must be 0-100")
    return n


def _optional_percent(text: str) -> str:
    if text not in (None, ""):
        _percent(text)
    return text


def _optional_attempts(text: str) -> str:
    if text not in (None, "") and int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be >= 1")
    return text


def add_arguments(parser: Any) -> None:
    """Declare the `--drill-*` arguments on Locust's parser (each also LOCUST_DRILL_*)."""

    def arg(name: str, **kw: Any) -> None:
        env = "LOCUST_" + name.lstrip("-").upper().replace("-", "_")
        parser.add_argument(name, env_var=env, **kw)

    arg("--drill-tenant", default=DEFAULT_DRILL_TENANT, help="x-tenant-id of drill users")
    arg("--drill-directive", default="", help="x-fault of drill users, e.g. abort:UNAVAILABLE (empty = none)")
    arg("--drill-ratio", type=_percent, default=100, help="x-fault-ratio, 0-100")
    arg("--drill-target", default="", help="x-fault-target service name (empty = first hop)")
    arg("--drill-instances", type=_optional_percent, default="", help="x-fault-instances, 0-100 (empty = all)")
    arg(
        "--drill-fault-scope",
        choices=("request", "attempt"),
        default="request",
        help="x-fault-scope: request (retries of a hit id are hit again) or attempt (one draw per attempt)",
    )
    arg("--drill-fault-attempts", type=_optional_attempts, default="", help="x-fault-attempts N (empty = all)")
    arg("--drill-config", default="none", help="value of the `config` label on client metrics")
    arg("--drill-plan", default="adhoc", help="plan name, the `plan` label of drill_phase/drill_fault_active")
    phases_help = "e.g. warmup=10,fault=20,recovery=20 (empty = obey -u/-r/-t)"
    arg("--drill-phases", type=_validated(parse_phases), default="", help=phases_help)
    arg("--drill-users", type=int, default=20, help="total users while phases run")
    weights_help = "user class weights, e.g. organic=3,drill=1 (0 leaves a class out)"
    arg("--drill-weights", type=_validated(parse_weights), default="organic=1,drill=1", help=weights_help)
    arg("--drill-rate", type=float, default=0.0, help="requests/s per user, open loop (0 = closed loop, flat out)")
    arg("--drill-organic-rate", default="", help="requests/s per organic user (default: --drill-rate)")
    arg("--drill-timeout", type=float, default=2.0, help="per-call timeout, seconds")
    arg("--drill-cancel-ms", default="", help="actively cancel a share of drill calls after N ms")
    arg(
        "--drill-cancel-share",
        type=_optional_percent,
        default="",
        help="share of drill calls to cancel, 0-100 (100 if only --drill-cancel-ms)",
    )
    arg(
        "--drill-metrics-port",
        default="",
        help="client /metrics base port (master base, worker i base+1+i); 0 = each process binds a port the "
        "kernel picks and writes it to --drill-ports-dir; empty = no /metrics",
    )
    arg(
        "--drill-ports-dir",
        default="",
        help="each process writes the ports it bound to DIR/ROLE[-INDEX].json (metrics_port, master_port)",
    )
    arg("--drill-metrics-host", default="127.0.0.1", help="bind address of client /metrics")
    arg(
        "--drill-metrics-fixed",
        action="store_true",
        default=False,
        help="every process binds the base port (one Locust process per container)",
    )
    arg("--drill-threadpool", type=int, default=0, help="gevent hub threadpool size (0 = gevent's default, 10)")
    arg("--drill-seed", type=int, default=0, help="seed in the request ids PLAN-SEED-USER-N-MIX")
    arg("--drill-ids-dir", default="", help="append the ids sent with the directive to DIR/ids-PID.txt")
    arg("--drill-trial", type=int, default=1, help="trial number, exported with the phase times (1)")
    arg(
        "--drill-method",
        default="",
        help="full method the users call, pkg.Service/Method, any kind (empty = the demo's drill.v1.Demo/Call)",
    )
    arg(
        "--drill-request",
        default="{}",
        help="its request as protobuf JSON: an object, a list of objects for a client stream, or @FILE",
    )
    arg("--drill-proto", default="", help="the method's types from this .proto (needs grpcio-tools)")
    arg("--drill-descriptor-set", default="", help="... or from this descriptor set (default: server reflection)")
    arg("--drill-proto-path", default="", help=f"import path of --drill-proto, {os.pathsep}-separated (its folder)")
    arg(
        "--drill-message-rate",
        type=_validated(_message_rate),
        default="",
        help="messages/s within a client stream (empty = as fast as the stream takes them)",
    )


def _directive(raw: str | None) -> str | None:
    """The drill users' `x-fault` value, checked as the servers will check it; empty: no directive.

    Checked here so a typo is one line before the first call, not a run whose every drill call the
    servers refuse; the value is sent exactly as given (the hit formula hashes it as sent), so a blank
    around it is refused, as `drill hits` and plan validation refuse it. The delay bound is the
    absolute one: each server applies its own, lower one."""
    if raw is None or raw == "":
        return None
    try:
        parse_directive(raw, ABSOLUTE_MAX_DELAY_MS)
    except DirectiveError as err:
        raise ValueError(f"--drill-directive {raw!r}: {err}") from None
    return raw
