"""FaultGate: the three gates plus ratio, target, instance and token (DESIGN §2–§5).

Pure: takes the settings and a dict of drill metadata, returns a Decision. It
never raises; anything unexpected becomes a rejection with a reason. The
interceptors turn a Decision into grpc behaviour, metrics and audit lines.
"""

from __future__ import annotations

import dataclasses
import enum

from harness.core import headers as h
from harness.core import token
from harness.core.faults import (
    Directive,
    DirectiveError,
    Mode,
    RejectReason,
    instance_selected,
    is_hit,
    parse_directive,
    parse_percent,
)
from harness.core.settings import FaultSettings


class Outcome(str, enum.Enum):
    PASS = "pass"  # no directive at all: organic or untouched
    HIT = "hit"
    SKIPPED = "skipped"
    REJECTED = "rejected"


class SkipReason(str, enum.Enum):
    """The `reason` label of `drill_fault_skipped_total`."""

    SWITCH = "switch"
    TENANT = "tenant"
    RATIO = "ratio"
    INSTANCE = "instance"
    TARGET = "target"
    TOKEN = "token"


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    outcome: Outcome
    traffic: str  # "drill" | "organic"
    request_id: str
    tenant: str
    directive: Directive | None = None
    raw_directive: str = ""
    ratio: int = 100
    delay_ms: int = 0
    reason: str = ""
    #: Drill keys to forward to downstream calls (only when a target names a later hop).
    propagate: tuple[tuple[str, str], ...] = ()

    @property
    def mode(self) -> Mode:
        return self.directive.mode if self.outcome is Outcome.HIT and self.directive else Mode.NONE


_PASS_ORGANIC = Decision(Outcome.PASS, "organic", "", "")


class FaultGate:
    """Decides, per call, whether and how to inject. One per server; cheap and thread-safe."""

    def __init__(self, settings: FaultSettings) -> None:
        self.settings = settings

    def traffic_class(self, tenant: str | None) -> str:
        return h.traffic_of(tenant, self.settings.tenants)

    def decide(self, md: dict[str, str]) -> Decision:
        try:
            return self._decide(md)
        except Exception as exc:  # pragma: no cover - defensive: a gate bug must never fail a call
            return Decision(
                Outcome.REJECTED,
                "organic",
                md.get(h.REQUEST_ID, "")[:64],
                "",
                reason=f"internal:{type(exc).__name__}",
            )

    def _decide(self, md: dict[str, str]) -> Decision:
        raw = md.get(h.FAULT)
        tenant = md.get(h.TENANT, "")
        if raw is None:
            if not tenant:
                return _PASS_ORGANIC
            return Decision(Outcome.PASS, self.traffic_class(tenant), md.get(h.REQUEST_ID, ""), tenant)
        s = self.settings
        request_id = md.get(h.REQUEST_ID, "")
        traffic = self.traffic_class(tenant)
        base = dict(
            traffic=traffic, request_id=request_id[: h.MAX_VALUE_LEN], tenant=tenant[: h.MAX_VALUE_LEN]
        )
        if not s.enabled:
            return Decision(Outcome.SKIPPED, reason=SkipReason.SWITCH.value, raw_directive="", **base)
        if traffic != "drill":
            return Decision(Outcome.SKIPPED, reason=SkipReason.TENANT.value, raw_directive="", **base)
        if len(request_id) > h.MAX_VALUE_LEN or len(tenant) > h.MAX_VALUE_LEN:
            return Decision(
                Outcome.REJECTED, reason=RejectReason.OVERSIZE.value, raw_directive=raw[:64], **base
            )
        target = md.get(h.FAULT_TARGET, "")
        try:
            directive = parse_directive(raw, s.max_delay_ms)
            ratio = parse_percent(md.get(h.FAULT_RATIO), RejectReason.BAD_RATIO)
            instances = parse_percent(md.get(h.FAULT_INSTANCES), RejectReason.BAD_INSTANCES)
            if len(target) > h.MAX_VALUE_LEN:
                raise DirectiveError(RejectReason.OVERSIZE, "target")
        except DirectiveError as err:
            return Decision(Outcome.REJECTED, reason=err.reason.value, raw_directive=raw[:64], **base)
        base.update(directive=directive, raw_directive=raw, ratio=ratio)
        if target and target != s.service:
            # Not our hop: forward the drill keys downstream untouched.
            fwd = tuple((k, md[k]) for k in h.DRILL_KEYS if k in md)
            return Decision(Outcome.SKIPPED, reason=SkipReason.TARGET.value, propagate=fwd, **base)
        if s.secret is not None and not token.verify(
            s.secret,
            md.get(h.DRILL_TOKEN),
            request_id=request_id,
            tenant=tenant,
            directive=raw,
            ratio=ratio,
            target=target,
        ):
            return Decision(Outcome.SKIPPED, reason=SkipReason.TOKEN.value, **base)
        if not instance_selected(s.seed, s.instance_id, instances):
            return Decision(Outcome.SKIPPED, reason=SkipReason.INSTANCE.value, **base)
        if not is_hit(s.seed, request_id, raw, ratio):
            return Decision(Outcome.SKIPPED, reason=SkipReason.RATIO.value, **base)
        delay = directive.delay_ms(s.seed, request_id) if directive.mode is not Mode.ABORT else 0
        return Decision(Outcome.HIT, delay_ms=delay, **base)
