"""FaultGate: the three gates plus ratio, target, instance and token (contracts §2–§5).

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
    ABSOLUTE_MAX_DELAY_MS,
    Directive,
    DirectiveError,
    Kind,
    Mode,
    RejectReason,
    Scope,
    instance_selected,
    is_hit_attempt,
    parse_attempt_number,
    parse_attempts,
    parse_directive,
    parse_percent,
    parse_scope,
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
    #: A hit request past its `x-fault-attempts` (it succeeds from then on).
    ATTEMPTS = "attempts"
    #: DRILL_FAULT_MAX_ACTIVE faults were in flight (decided at handler entry, not by the gate).
    MAX_ACTIVE = "max_active"


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
    #: Why a token was refused (missing, malformed, oversize, expired, lifetime, mismatch).
    detail: str = ""
    #: The refusal concerns a caller the server could authenticate (valid token); never rate-limited.
    authenticated: bool = False
    #: 0-based attempt number (`grpc-previous-rpc-attempts` / `x-drill-previous-rpc-attempts`).
    attempt: int = 0
    scope: str = Scope.REQUEST.value

    @property
    def mode(self) -> Mode:
        return self.directive.mode if self.outcome is Outcome.HIT and self.directive else Mode.NONE


_PASS_ORGANIC = Decision(Outcome.PASS, "organic", "", "")


class FaultGate:
    """Decides, per call, whether and how to inject. One per server; cheap and thread-safe.

    Order matters: the cheap gates (switch, tenant, size bounds) come first, then the
    token (with a secret), and only then is the directive parsed, so unauthenticated
    noise never reaches the parser or the audit log at full rate. A hop that is not the
    target checks shape and absolute bounds only and forwards; the target enforces its
    own limits (max delay).
    """

    def __init__(self, settings: FaultSettings) -> None:
        self.settings = settings

    def traffic_class(self, tenant: str | None) -> str:
        """Traffic class by tenant alone (no secret); with a secret, `decide` also needs a valid token."""
        return h.traffic_of(tenant, self.settings.tenants)

    def decide(self, md: dict[str, str], method: str = "", kind: Kind | None = None) -> Decision:
        """`kind`: the called method's kind, when known (a directive's options must fit it at the target)."""
        try:
            return self._decide(md, method, kind)
        except Exception as exc:  # pragma: no cover - defensive: a gate bug must never fail a call
            return Decision(
                Outcome.REJECTED,
                "organic",
                md.get(h.REQUEST_ID, "")[:64],
                "",
                reason=f"internal:{type(exc).__name__}",
            )

    def _token_problem(self, md: dict[str, str], tenant: str, request_id: str, target: str, method: str) -> str:
        s = self.settings
        return token.check(
            s.secret,
            md.get(h.DRILL_TOKEN),
            request_id=request_id,
            tenant=tenant,
            directive=md.get(h.FAULT, ""),
            ratio=md.get(h.FAULT_RATIO),
            target=target,
            instances=md.get(h.FAULT_INSTANCES),
            method=md.get(h.FAULT_METHOD) or method,
            scope=md.get(h.FAULT_SCOPE),
            attempts=md.get(h.FAULT_ATTEMPTS),
            max_ttl_s=s.token_max_ttl_s,
        )

    def _decide(self, md: dict[str, str], method: str, kind: Kind | None) -> Decision:
        raw = md.get(h.FAULT)
        tenant = md.get(h.TENANT, "")
        if raw is None and not tenant:
            bad_baggage = md.get(h.BAGGAGE_ERROR)
            if bad_baggage is not None:  # drill entries we cannot read: refused, counted and audited, never acted on
                request_id = md.get(h.REQUEST_ID, "")[: h.MAX_VALUE_LEN]
                reason = RejectReason.BAD_BAGGAGE.value
                return Decision(Outcome.REJECTED, "organic", request_id, "", reason=reason, detail=bad_baggage)
            return _PASS_ORGANIC
        s = self.settings
        request_id = md.get(h.REQUEST_ID, "")
        target = md.get(h.FAULT_TARGET, "")
        fault_method = md.get(h.FAULT_METHOD, "")
        traffic = self.traffic_class(tenant)
        base = dict(traffic=traffic, request_id=request_id[: h.MAX_VALUE_LEN], tenant=tenant[: h.MAX_VALUE_LEN])
        oversize = traffic == "drill" and (
            max(len(request_id), len(tenant), len(target), len(fault_method)) > h.MAX_VALUE_LEN
            or len(md.get(h.DRILL_TOKEN, "")) > token.MAX_TOKEN_LEN
        )
        if oversize:
            base["traffic"] = "organic" if s.secret is not None else traffic
            if raw is None:
                return Decision(Outcome.PASS, **base)
            return Decision(Outcome.REJECTED, reason=RejectReason.OVERSIZE.value, raw_directive=raw[:64], **base)
        ours = not target or target == s.service
        if traffic == "drill" and s.secret is not None:
            # The hop that injects binds the token to its own name; others check it against the target.
            problem = self._token_problem(md, tenant, request_id, s.service if ours else target, method)
            if problem:
                base["traffic"] = "organic"
                if raw is None:
                    return Decision(Outcome.PASS, **base)
                return Decision(
                    Outcome.SKIPPED, reason=SkipReason.TOKEN.value, raw_directive=raw[:64], detail=problem, **base
                )
            base["authenticated"] = True
        if raw is None:
            return Decision(Outcome.PASS, **base)
        if not s.enabled:
            return Decision(Outcome.SKIPPED, reason=SkipReason.SWITCH.value, raw_directive="", **base)
        if traffic != "drill":
            return Decision(Outcome.SKIPPED, reason=SkipReason.TENANT.value, raw_directive="", **base)
        try:
            # Shape and absolute bounds at every hop; this hop's own limits only if it is the target.
            directive = parse_directive(raw, ABSOLUTE_MAX_DELAY_MS)
            ratio = parse_percent(md.get(h.FAULT_RATIO), RejectReason.BAD_RATIO)
            instances = parse_percent(md.get(h.FAULT_INSTANCES), RejectReason.BAD_INSTANCES)
            fault_scope = parse_scope(md.get(h.FAULT_SCOPE))
            max_attempts = parse_attempts(md.get(h.FAULT_ATTEMPTS))
            attempt = 0
            if fault_scope is Scope.ATTEMPT or max_attempts is not None:
                attempt = parse_attempt_number(md.get(h.PREVIOUS_RPC_ATTEMPTS), md.get(h.DRILL_PREVIOUS_RPC_ATTEMPTS))
        except DirectiveError as err:
            return Decision(Outcome.REJECTED, reason=err.reason.value, raw_directive=raw[:64], **base)
        base.update(directive=directive, raw_directive=raw, ratio=ratio, attempt=attempt, scope=fault_scope.value)
        if not ours or (fault_method and method and fault_method != method):
            # Not our hop (or not our method): forward the drill keys downstream untouched.
            # The baggage goes too (its other entries as they came; the client sets its drill entries from these keys).
            fwd = tuple((k, md[k]) for k in h.DRILL_KEYS if k in md)
            if h.BAGGAGE in md:
                fwd += ((h.BAGGAGE, md[h.BAGGAGE]),)
            return Decision(Outcome.SKIPPED, reason=SkipReason.TARGET.value, propagate=fwd, **base)
        if directive.high_ms > min(s.max_delay_ms, ABSOLUTE_MAX_DELAY_MS):
            return Decision(Outcome.REJECTED, reason=RejectReason.OVER_MAX.value, **base)
        if kind is not None and directive.refusal_for(kind) is not None:
            detail = f"{directive.options} on a {kind.value} method"
            return Decision(Outcome.REJECTED, reason=RejectReason.WRONG_KIND.value, detail=detail, **base)
        if not instance_selected(s.seed, s.instance_id, instances):
            return Decision(Outcome.SKIPPED, reason=SkipReason.INSTANCE.value, **base)
        if not is_hit_attempt(s.seed, request_id, raw, ratio, attempt, fault_scope):
            return Decision(Outcome.SKIPPED, reason=SkipReason.RATIO.value, **base)
        if max_attempts is not None and attempt >= max_attempts:
            return Decision(Outcome.SKIPPED, reason=SkipReason.ATTEMPTS.value, **base)
        delay = directive.delay_ms(s.seed, request_id) if directive.mode is not Mode.ABORT else 0
        return Decision(Outcome.HIT, delay_ms=delay, **base)
