"""What the aio and sync client interceptors share: the tags to send and the call record.

`Tagging` says what a drill client puts on the wire (contracts §2); `ClientRecorder`
counts a finished call in the client-side metrics (contracts §7). The resilience
layer, which owns retries above the interceptor, uses the same recorder so a
logical call is counted once however many attempts it took.
"""

from __future__ import annotations

import dataclasses
import time
import uuid

from harness.core import baggage, scope, token
from harness.core import headers as h
from harness.core import metrics as m
from harness.core.faults import Mode
from harness.core.status import STATUS_NAMES, status_name

#: (traffic, fault_mode) pairs a call can carry: organic calls never carry a fault.
_TRAFFIC_MODES = (("organic", Mode.NONE.value), *(("drill", mode.value) for mode in Mode))


@dataclasses.dataclass(frozen=True)
class Tagging:
    """What a drill client sends. `tenant=None` sends no tenant (organic traffic)."""

    tenant: str | None = None
    directive: str | None = None
    ratio: int | None = None
    target: str | None = None
    instances: int | None = None
    #: Drill secret: when set, each tagged call carries an `x-drill-token` binding its request id,
    #: tenant, directive, ratio, target, instance share and method (`x-fault-method`).
    secret: str | None = None
    token_ttl_s: float = 300.0
    #: Method (`pkg.Service/Method`) at the target that injects; default: the method called.
    #: Sent as `x-fault-method` when given or when signing.
    method: str | None = None
    #: `x-fault-scope`: `request` (default, not sent: every retry of a hit request is hit again) or
    #: `attempt` (each attempt is its own reproducible draw; transient loss).
    scope: str = "request"
    #: `x-fault-attempts`: a hit request is faulted only on its first N attempts (None = all).
    attempts: int | None = None

    def __post_init__(self) -> None:
        if self.scope not in ("request", "attempt"):
            raise ValueError(f"scope must be 'request' or 'attempt', got {self.scope!r}")
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")

    @property
    def fault_mode(self) -> str:
        """The requested mode, for the client-side `fault_mode` label (none when untagged or malformed)."""
        if not self.directive:
            return Mode.NONE.value
        head = self.directive.partition(":")[0].strip().lower()
        return head if head in ("delay", "abort", "drop") else Mode.NONE.value


ORGANIC = Tagging()

#: The `injected` label of `drill_client_calls_total`, by whether the marker trailer was present.
INJECTED = {True: "true", False: "false"}


#: Wall clock of tagging (origin deadline, token expiry); a test may pin it to compare two paths.
wall_clock = time.time


def _tag_pairs(t: Tagging, present: set[str], method: str) -> list[tuple[str, str]]:
    """The tagging's own keys that are not `present` yet, in the order they go on the wire."""
    out: list[tuple[str, str]] = []
    if t.tenant is not None and h.TENANT not in present:
        out.append((h.TENANT, t.tenant))
    if t.directive is not None and h.FAULT not in present:
        out.append((h.FAULT, t.directive))
        if t.ratio is not None:
            out.append((h.FAULT_RATIO, str(t.ratio)))
        if t.target is not None:
            out.append((h.FAULT_TARGET, t.target))
        if t.instances is not None:
            out.append((h.FAULT_INSTANCES, str(t.instances)))
        if t.scope != "request" and h.FAULT_SCOPE not in present:
            out.append((h.FAULT_SCOPE, t.scope))
        if t.attempts is not None and h.FAULT_ATTEMPTS not in present:
            out.append((h.FAULT_ATTEMPTS, str(t.attempts)))
    fault_method = t.method or method
    if t.tenant is not None and (t.method is not None or t.secret is not None) and h.FAULT_METHOD not in present:
        if fault_method:
            out.append((h.FAULT_METHOD, fault_method))
    return out


def _signs(t: Tagging, present: set[str]) -> bool:
    return t.tenant is not None and t.secret is not None and h.DRILL_TOKEN not in present


def _token(t: Tagging, sent: dict[str, str], request_id: str, now: float) -> tuple[str, str]:
    """`(x-drill-token, TOKEN)` over exactly what the server reads (`sent`: first value of each key)."""
    return (
        h.DRILL_TOKEN,
        token.sign(
            t.secret,
            request_id=request_id,
            tenant=sent.get(h.TENANT, ""),
            directive=sent.get(h.FAULT, ""),
            ratio=sent.get(h.FAULT_RATIO),
            target=sent.get(h.FAULT_TARGET, ""),
            instances=sent.get(h.FAULT_INSTANCES),
            method=sent.get(h.FAULT_METHOD, ""),
            scope=sent.get(h.FAULT_SCOPE),
            attempts=sent.get(h.FAULT_ATTEMPTS),
            ttl_s=t.token_ttl_s,
            now=now,
        ),
    )


def _first_values(md) -> dict[str, str]:
    sent: dict[str, str] = {}
    for k, v in md:
        sent.setdefault(k, v)
    return sent


#: The longest value a server accepts per drill key (longer ones are refused as oversize), where not MAX_VALUE_LEN.
_BAGGAGE_VALUE_MAX = {h.DRILL_TOKEN: token.MAX_TOKEN_LEN}


def with_baggage(md: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`md` with its drill keys also as W3C baggage entries (contracts "Baggage"), so they cross hops that forward
    only baggage (any OpenTelemetry-instrumented service).

    The entries are the first value of each x-* drill key on the call, merged into the caller's own `baggage`
    (its other members kept as they came; one `baggage` header goes out). A call that carries no x-* drill key
    gets no drill entry, and any the caller's baggage had are removed: a hop never sends drill baggage on a call
    that is not part of the drill. If the merged header would pass the W3C limits, the drill goes by x-* keys alone.
    """
    present = {k for k, _ in md}
    drill = not h.X_DRILL_KEYS.isdisjoint(present)
    existing = next((v for k, v in md if k == h.BAGGAGE), None)
    if not drill and (existing is None or h.BAGGAGE_PREFIX not in existing):
        return md
    entries: dict[str, str] = {}
    if drill:
        first = _first_values(md)
        entries = {name: first[key] for key, name in h.BAGGAGE_NAMES.items() if key in first}
        if any(len(v) > _BAGGAGE_VALUE_MAX.get(k, h.MAX_VALUE_LEN) for k, v in first.items() if k in h.BAGGAGE_NAMES):
            return md  # a value every server refuses as oversize: not copied (the call would pass grpc's limit)
    try:
        header = baggage.with_entries(existing, h.BAGGAGE_PREFIX, entries)
    except (baggage.BaggageError, UnicodeError):  # past the limits, or a value no header can carry: x-* keys alone
        return md
    out = [(k, v) for k, v in md if k != h.BAGGAGE]
    if header:
        out.append((h.BAGGAGE, header))
    return out


def outgoing_metadata(
    existing,
    tagging: Tagging,
    timeout: float | None,
    *,
    method: str = "",
    drill_tenants: frozenset[str] = frozenset({h.DEFAULT_DRILL_TENANT}),
) -> tuple[list[tuple[str, str]], str, str | None]:
    """Metadata for one call: the caller's own keys win, then propagated scope, then tagging.

    Returns (metadata, request_id, tenant). One request id per logical call: a
    caller that retries passes the same `x-request-id` back in and it is kept.
    `method` is the called method's label (`pkg.Service/Method`), signed by the token.
    The origin deadline is sent for drill traffic only: organic calls neither
    originate nor forward it.
    """
    md: list[tuple[str, str]] = list(existing or ())
    present = {k for k, _ in md}
    cur = scope.current()
    if cur is not None:
        for k, v in cur.propagate:
            if k not in present:
                md.append((k, v))
                present.add(k)
        if cur.traffic == "drill" and cur.origin_deadline is not None and h.ORIGIN_DEADLINE not in present:
            md.append((h.ORIGIN_DEADLINE, f"{cur.origin_deadline:.3f}"))
            present.add(h.ORIGIN_DEADLINE)
    if h.REQUEST_ID in present:
        request_id = next(v for k, v in md if k == h.REQUEST_ID)
    else:
        request_id = str(uuid.uuid4())
        md.append((h.REQUEST_ID, request_id))
    t = tagging
    signs = _signs(t, present)
    md.extend(_tag_pairs(t, present, method))
    now = wall_clock()
    if signs:
        md.append(_token(t, _first_values(md), request_id, now))
    tenant = next((v for k, v in md if k == h.TENANT), None)
    if h.ORIGIN_DEADLINE not in present and timeout is not None and tenant and tenant in drill_tenants:
        md.append((h.ORIGIN_DEADLINE, f"{now + timeout:.3f}"))
    return with_baggage(md), request_id, tenant


class CallTags:
    """`outgoing_metadata` for one tagging and method, computed once for callers that send nothing but a
    request id and run outside any served call (a load generator such as the Locust user).

    Per call only the request id, the token (with a secret) and the origin deadline are
    built; the result equals `outgoing_metadata(((x-request-id, ID),), tagging, timeout, ...)`
    key by key, value by value and in order, and `tenant`/`traffic`/`fault_mode` are what the
    interceptor records the call under.
    """

    __slots__ = (
        "tagging", "method", "tenant", "traffic", "fault_mode", "_drill_tenants", "_pairs", "_signs", "_origin",
        "_baggage", "_bag_prefix",
    )  # fmt: skip

    def __init__(
        self, tagging: Tagging, method: str, drill_tenants: frozenset[str] = frozenset({h.DEFAULT_DRILL_TENANT})
    ) -> None:
        present = {h.REQUEST_ID}
        self.tagging = tagging
        self.method = method
        self._drill_tenants = drill_tenants
        self._pairs = tuple(_tag_pairs(tagging, present, method))
        self._signs = _signs(tagging, present)
        self.tenant = next((v for k, v in self._pairs if k == h.TENANT), None)
        self.traffic = h.traffic_of(self.tenant, drill_tenants)
        self.fault_mode = tagging.fault_mode
        self._origin = bool(self.tenant and self.tenant in drill_tenants)
        self._baggage = not h.X_DRILL_KEYS.isdisjoint(k for k, _ in self._pairs)
        # The baggage's fixed entries, once: per call only the request id and the token are appended (they come
        # last in BAGGAGE_NAMES' order, so the header equals what with_baggage builds).
        fixed = dict(self._pairs)
        self._bag_prefix = ",".join(
            f"{name}={baggage.encode_value(fixed[key])}"
            for key, name in h.BAGGAGE_NAMES.items()
            if key in fixed and key not in (h.REQUEST_ID, h.DRILL_TOKEN)
        )
        if self._baggage and (
            not self._bag_prefix or any(len(v) > _BAGGAGE_VALUE_MAX.get(k, h.MAX_VALUE_LEN) for k, v in self._pairs)
        ):
            self._bag_prefix = ""  # the general path decides (an oversize value goes by x-* keys alone)

    def metadata(self, request_id: str, timeout: float | None) -> tuple[tuple[str, str], ...]:
        """The call's metadata; falls back to `outgoing_metadata` inside a served call (scope to propagate)."""
        if scope.current() is not None:
            md, _, _ = outgoing_metadata(
                ((h.REQUEST_ID, request_id),), self.tagging, timeout, method=self.method,
                drill_tenants=self._drill_tenants,
            )  # fmt: skip
            return tuple(md)
        md = ((h.REQUEST_ID, request_id), *self._pairs)
        if not self._signs and not (self._origin and timeout is not None) and not self._baggage:
            return md
        now = wall_clock()
        signed = _token(self.tagging, _first_values(md), request_id, now) if self._signs else None
        if signed is not None:
            md = (*md, signed)
        if self._origin and timeout is not None:
            md = (*md, (h.ORIGIN_DEADLINE, f"{now + timeout:.3f}"))
        if not self._baggage:
            return md
        if not self._bag_prefix or len(request_id) > h.MAX_VALUE_LEN:
            return tuple(with_baggage(list(md)))
        header = f"{self._bag_prefix},{h.BAGGAGE_NAMES[h.REQUEST_ID]}={baggage.encode_value(request_id)}"
        if signed is not None:
            header += f",{h.BAGGAGE_NAMES[h.DRILL_TOKEN]}={signed[1]}"
        return (*md, (h.BAGGAGE, header))


def _grpc_call_codes() -> frozenset:
    """Code objects of grpc.aio's per-call interceptor coroutines."""
    codes = set()
    try:
        from grpc.aio import _interceptor as gi  # private, hence guarded: without it nothing is trusted

        for name in dir(gi):
            invoke = getattr(getattr(gi, name), "_invoke", None)
            if name.startswith("Intercepted") and invoke is not None and hasattr(invoke, "__code__"):
                codes.add(invoke.__code__)
    except Exception:  # noqa: BLE001
        pass
    return frozenset(codes)


_GRPC_CALL_CODES = _grpc_call_codes()


def _is_grpc_call_task(who: object) -> bool:
    """grpc.aio runs a client call's interceptors in a task of its own: it acts for the caller."""
    get_coro = getattr(who, "get_coro", None)
    code = getattr(get_coro(), "cr_code", None) if get_coro is not None else None
    return code is not None and code in _GRPC_CALL_CODES


scope.trust_delegates(_is_grpc_call_task)


class ClientRecorder:
    """Counts finished client calls and attempts; children cached per label set."""

    def __init__(self, service: str = "client", config: str = "none", target: str = "") -> None:
        self.service = service
        self.config = config
        self.target = target
        self._calls = m.ChildCache(m.CLIENT_CALLS)
        self._latency = m.ChildCache(m.CLIENT_LATENCY)
        self._call_duration = m.ChildCache(m.GRPC_CLIENT_CALL_DURATION)
        self._attempt_started = m.ChildCache(m.GRPC_CLIENT_ATTEMPT_STARTED)
        self._attempt_duration = m.ChildCache(m.GRPC_CLIENT_ATTEMPT_DURATION)
        self._seen_methods: set[str] = set()

    def attempt_started(self, method: str) -> None:
        self._attempt_started(method, self.target).inc()

    def attempt_finished(self, method: str, code, elapsed: float) -> None:
        self._attempt_duration(method, self.target, status_name(code)).observe(elapsed)

    def call_finished(
        self,
        method: str,
        code,
        elapsed: float,
        fault_mode: str,
        traffic: str,
        exemplar: dict | None = None,
        injected: bool = False,
    ) -> None:
        """Count one logical call; `injected`: its last attempt carried the `x-drill-fault` trailer."""
        status = status_name(code)
        if method not in self._seen_methods:  # first sight: every status x traffic x mode at 0 (rate() sees 1st inc)
            self._seen_methods.add(method)
            for tr, mode in _TRAFFIC_MODES:
                for name in STATUS_NAMES:
                    self._calls(self.service, method, name, mode, tr, self.config, INJECTED[False])
        self._calls(self.service, method, status, fault_mode, traffic, self.config, INJECTED[injected]).inc()
        self._latency(self.service, method, fault_mode, traffic, self.config).observe(elapsed, exemplar)
        self._call_duration(method, self.target, status).observe(elapsed, exemplar)


class ClientInterceptorBase:
    """State both client interceptors share: what to tag, when to cancel, where to record.

    `tagging` may be swapped at any time (`interceptor.tagging = Tagging(...)`),
    e.g. when a drill enters its fault phase. `record_calls=False` records only
    attempts, for callers (the retry layer) that count logical calls themselves.
    """

    def __init__(
        self,
        tagging: Tagging = ORGANIC,
        *,
        service: str = "client",
        config: str = "none",
        target: str = "",
        cancel_after_ms: float | None = None,
        drill_tenants: frozenset[str] = frozenset({h.DEFAULT_DRILL_TENANT}),
        record_calls: bool = True,
    ) -> None:
        self.tagging = tagging
        self.cancel_after_ms = cancel_after_ms
        self.drill_tenants = drill_tenants
        self.record_calls = record_calls
        self.recorder = ClientRecorder(service, config, target)
