"""A starter stack file, written from a service's own methods (`drill init`): pure text from a method listing.

`drill init` lists a service's methods (`harness.protos`), picks the edge and hands them here; this
module turns them into the text of a plan the model (`stack.Stack`, `model.PlanFile`) validates, every
section commented in plain words: what it does and what to change first. It owns the decisions that
need no network: which method is the edge by default (`pick_edge`), the hop's name a plan allows
(`hop_name`), the request skeleton of a message (`skeleton`: proto field names as written, zero-ish
scalars, nested messages, one-element lists, enums by their first value, a oneof's first member,
protobuf's JSON forms of the well-known types), a fault that fits the method's kind (`FAULT`,
`fault_note`), and the methods as a table for the terminal (`methods_table`).

It reads methods by duck typing (`name`, `kind`, `input`: what `harness.protos.Method` has) and message
descriptors through their own attributes, so the plan stage imports no reader of types.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from typing import Any, Protocol

import yaml

from harness.core.errors import BadInput
from harness.core.faults import Kind

#: The fault every starter file injects: an abort, the plainest failure a caller must handle; half the drill
#: user's calls (the seed picks which), so the fault window is a breach the SLO sees and recovers from.
FAULT = "abort:UNAVAILABLE"
FAULT_RATIO = 50
#: Rates modest enough for a service whose capacity nobody told us (per user, calls/s).
ORGANIC_USERS, ORGANIC_RATE, DRILL_USERS, DRILL_RATE = 2, 5, 1, 5
#: The configuration of a service left as it runs (nothing to switch)
AS_IS = "as-is"


class Listed(Protocol):
    """A method as `harness.protos.list_methods` gives it."""

    name: str  # /pkg.Service/Method
    kind: Kind
    input: Any  # its input message's descriptor


def kind_words(kind: Kind) -> str:
    """`server-streaming`, `unary`, … as a person writes them."""
    return Kind(kind).value.replace("_", "-")


def short(method: Listed) -> str:
    """`pkg.Service/Method`, as a plan's `edge.method` writes it."""
    return method.name.lstrip("/")


# --- which method, which hop --------------------------------------------------------------------
def pick_edge(methods: Sequence[Listed], wanted: str | None = None) -> tuple[Listed, str]:
    """The edge method and why it was chosen (words for the terminal).

    `wanted`: `/pkg.Service/Method`, `pkg.Service/Method`, `Service/Method` or `Method` (when one service has
    it); bad input naming every method when it matches none, or several. None: the first unary method, else
    the first."""
    if not methods:
        raise BadInput("init: the service has no methods to call (its only services are reflection and health)")
    names = ", ".join(short(m) for m in methods)
    if wanted is None:
        unary = [m for m in methods if Kind(m.kind) is Kind.UNARY]
        edge = (unary or list(methods))[0]
        why = "the first unary method" if unary else "the first method (none is unary)"
        return edge, why
    text = wanted.strip().lstrip("/")
    service, _, method = text.rpartition("/")

    def fits(m: Listed) -> bool:
        full_service, _, name = short(m).rpartition("/")
        if name != method:
            return False
        return not service or service in (full_service, full_service.rpartition(".")[2])

    found = [m for m in methods if fits(m)]
    if not found:
        raise BadInput(f"init: --method {wanted}: the service has no such method (it has: {names})")
    if len(found) > 1:
        raise BadInput(f"init: --method {wanted}: more than one method has that name "
                       f"({', '.join(short(m) for m in found)}): give it as pkg.Service/Method")  # fmt: skip
    return found[0], "--method"


def hop_name(service: str) -> str:
    """A hop's name a plan allows (`^[a-z][a-z0-9-]*$`) from a service's full name: `shop.v1.Cart` → `cart`."""
    name = re.sub(r"[^a-z0-9-]+", "-", service.rpartition(".")[2].lower()).strip("-")
    name = re.sub(r"^[^a-z]+", "", name)
    return name or "service"


# --- the request ---------------------------------------------------------------------------------
#: protobuf's JSON mapping writes these messages as a scalar, a string or a list, not as their fields
_WELL_KNOWN: dict[str, Any] = {
    "google.protobuf.Timestamp": "1970-01-01T00:00:00Z",
    "google.protobuf.Duration": "0s",
    "google.protobuf.FieldMask": "",
    "google.protobuf.Struct": {},
    "google.protobuf.Value": "",
    "google.protobuf.ListValue": [],
    "google.protobuf.Empty": {},
    "google.protobuf.DoubleValue": 0.0,
    "google.protobuf.FloatValue": 0.0,
    "google.protobuf.Int64Value": 0,
    "google.protobuf.UInt64Value": 0,
    "google.protobuf.Int32Value": 0,
    "google.protobuf.UInt32Value": 0,
    "google.protobuf.BoolValue": False,
    "google.protobuf.StringValue": "",
    "google.protobuf.BytesValue": "",
}
#: An Any needs a type to name (`@type`); a skeleton leaves it out rather than guess one
_LEFT_OUT = {"google.protobuf.Any"}
#: FieldDescriptor.CPPTYPE_*: 1 int32, 2 int64, 3 uint32, 4 uint64, 5 double, 6 float, 7 bool, 8 enum,
#: 9 string (and bytes), 10 message
_ZERO = {1: 0, 2: 0, 3: 0, 4: 0, 5: 0.0, 6: 0.0, 7: False, 9: ""}
_ENUM, _MESSAGE = 8, 10
#: A map's key in JSON is a string: the example key for each key type
_MAP_KEY = {1: "0", 2: "0", 3: "0", 4: "0", 7: "false", 9: "key"}


def skeleton(message, _path: tuple[str, ...] = ()) -> dict:
    """A JSON request for `message` (a message descriptor) with every field, in protobuf's JSON mapping that
    `json_format.ParseDict` reads: proto field names as written, scalars zero-ish, nested messages filled in
    (one already on the path, a recursive type, as `{}`), repeated fields as one-element lists, maps as one
    entry, enums by their first value's name, of each oneof only its first member; well-known types in their
    JSON form (a Timestamp is a string), an Any left out."""
    out: dict[str, Any] = {}
    path = (*_path, message.full_name)
    for field in message.fields:
        oneof = field.containing_oneof
        if oneof is not None and oneof.fields[0] is not field:
            continue  # a oneof holds one member: its first
        if field.cpp_type == _MESSAGE and field.message_type.full_name in _LEFT_OUT:
            continue
        if field.cpp_type == _MESSAGE and field.message_type.GetOptions().map_entry:
            key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            out[field.name] = {_MAP_KEY.get(key.cpp_type, "key"): _value(value, path)}
        elif field.is_repeated:
            out[field.name] = [_value(field, path)]
        else:
            out[field.name] = _value(field, path)
    return out


def _value(field, path: tuple[str, ...]) -> Any:
    if field.cpp_type == _ENUM:
        return field.enum_type.values[0].name
    if field.cpp_type != _MESSAGE:
        return _ZERO[field.cpp_type]
    name = field.message_type.full_name
    if name in _WELL_KNOWN:
        return _WELL_KNOWN[name]
    return {} if name in path else skeleton(field.message_type, path)


def request_of(method: Listed) -> dict | list[dict]:
    """The edge's `request`: one message's skeleton, or for a client stream a list of them (one)."""
    one = skeleton(method.input)
    return [one] if Kind(method.kind).request_streaming else one


# --- the fault, in words that fit the method ------------------------------------------------------
def fault_note(kind: Kind) -> str:
    """What a mid-stream option would do on a method of `kind`, and which option it cannot take."""
    kind = Kind(kind)
    if kind is Kind.UNARY:
        return ("A unary call has no stream to fault midway: @after=N and @read=N are for streaming methods, and "
                "the run refuses them on this one.")  # fmt: skip
    out = []
    if kind.response_streaming:
        out.append("`abort:UNAVAILABLE@after=2` would let 2 replies through, then abort the stream midway.")
    if kind.request_streaming:
        out.append("`abort:UNAVAILABLE@read=2` would abort once the service has read 2 of the stream's messages.")
    if not kind.response_streaming:
        out.append("@after=N counts the replies of a reply stream: not for this method, nor for a unary one.")
    if not kind.request_streaming:
        out.append("@read=N counts the messages of a request stream: not for this method.")
    return " ".join(out)


# --- the file -------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TypesFrom:
    """Where the request's type and each method's kind come from: a .proto (with its import paths), a
    descriptor set, or (neither) the server's reflection. Paths are as the stack file writes them: relative
    to its folder."""

    proto: str | None = None
    proto_path: tuple[str, ...] = ()
    descriptor_set: str | None = None
    #: in words, for the header: `tests/proxy/probe.proto`, `reflection at 127.0.0.1:50051`
    said: str = ""


@dataclasses.dataclass(frozen=True)
class ViaProxy:
    """A service in any language, left unchanged: `drill proxy` in front of it, started by the runner."""

    upstream: str
    port: int
    metrics_port: int


@dataclasses.dataclass(frozen=True)
class Direct:
    """A service with the interceptors installed: called at `address`, its series at `metrics`."""

    address: str
    metrics: str


def stack_file(methods: Sequence[Listed], edge: Listed, *, hop: str, seed: int, types: TypesFrom,
               front: ViaProxy | Direct, run_as: str) -> str:  # fmt: skip
    """The stack file's text: a plan for `edge` (one of `methods`) on the hop `hop`, every section commented.
    `run_as` is how the header tells the reader to run it (`drill run cart.yaml`)."""
    service = short(edge).rpartition("/")[0]
    proxied = isinstance(front, ViaProxy)
    where = front.upstream if proxied else front.address
    lines = [
        *_wrap(f"A drill of {service} at {where}"
               + (", behind `drill proxy`" if proxied else ", which runs the drill interceptors")
               + f", written by `drill init` from the service's methods ({types.said}). Every key: docs/stacks.md"
               + (" and docs/proxy.md" if proxied else "") + "; an unknown key is refused before anything starts."),
        f"# Check it:  {run_as} --dry-run",
        f"# Run it:    {run_as}",
        "",
        *_wrap("The drill's name (its request ids are NAME-SEED-USER-N) and its seed: the seed picks which request "
               "ids the fault hits, so `drill hits`, the dry run and the run agree on them."
               + (" The runner gives it to the proxy." if proxied else "")),
    ]  # fmt: skip
    if not proxied:
        lines.append(f"# Your service must run with the same seed: DRILL_FAULT_SEED={seed}.")
    lines += [f"name: {hop}", f"seed: {seed}", "",
              "# What the drill runs against: services already running (the runner starts none of them"
              + (" but the proxy)." if proxied else ")."), "stack:"]  # fmt: skip
    if proxied:
        lines += _proxy_lines(front, hop, types)
    lines += _edge_lines(methods, edge, types, None if proxied else front.address)
    lines += _hop_lines(hop, None if proxied else front.metrics)
    lines += _config_lines()
    lines += _rest(edge, hop)
    return "\n".join(lines) + "\n"


def _types_lines(types: TypesFrom, what: str) -> list[str]:
    if types.descriptor_set:
        return [_kv("descriptor_set", _q(types.descriptor_set), what)]
    if types.proto:
        out = [_kv("proto", _q(types.proto), what)]
        if types.proto_path:
            out.append(_kv("proto_path", _flow(list(types.proto_path)), "its import paths"))
        return out
    return [f"    # {what}: the service's server reflection (no proto or descriptor_set given)"]


def _proxy_lines(front: ViaProxy, hop: str, types: TypesFrom) -> list[str]:
    out = _wrap("drill proxy in front of your service, which stays as it is (any language): the runner starts it "
                "for each trial, with injection on and this file's seed, and stops it after. It is the edge the "
                "load calls (127.0.0.1:port) and the hop that injects the fault. Change first: `upstream`, if "
                "your service listens elsewhere; the two ports were free when this file was written (any free "
                "ones do).", "  # ")  # fmt: skip
    return [
        *out,
        "  proxy:",
        _kv("upstream", _q(front.upstream), "your service: the only address the proxy calls"),
        _kv("service", hop, "the hop it stands for (what fault.target names)"),
        _kv("port", str(front.port), "its gRPC port on 127.0.0.1: the load calls it"),
        _kv("metrics_port", str(front.metrics_port), "its /metrics: the hop's series"),
        *_types_lines(types, "each method's kind, for @after/@read"),
    ]


def _edge_lines(methods: Sequence[Listed], edge: Listed, types: TypesFrom, address: str | None) -> list[str]:
    kind = Kind(edge.kind)
    others = [f"{short(m).rpartition('/')[2]} ({kind_words(m.kind)})" for m in methods if m is not edge]
    out = [
        "  # The method the load calls, and its request in protobuf's JSON mapping (field names as the .proto",
        "  # writes them). Change first: the request's values. They are its shape only: zeros, empty strings,",
        "  # each enum's first value, one item in each list, a oneof's first field.",
    ]
    if types.proto or types.descriptor_set:
        out.append("  # A relative path is from this file's folder.")
    if others:
        out += _wrap("The service's other methods (any kind will do): " + ", ".join(others) + ".", "  # ")
    out.append("  edge:")
    if address is not None:
        out.append(_kv("address", _q(address), "HOST:PORT the load calls"))
    out.append(_kv("method", short(edge), kind_words(kind)))
    if kind.request_streaming:
        out.append("    # a client stream: the request is the stream's messages, sent in order, then half-closed")
    request = request_of(edge)
    if request in ({}, []):
        out.append(_kv("request", _flow(request), "nothing to fill in: the default message"))
    else:
        body = yaml.safe_dump(request, default_flow_style=False, sort_keys=False, allow_unicode=True)
        out.append("    request:")
        out += ["      " + line for line in body.rstrip("\n").splitlines()]
    if kind.request_streaming:
        out.append("    # message_rate: 10            # messages/s in a stream (default: each as soon as it is taken)")
    return out + _types_lines(types, "the request's type")


def _hop_lines(hop: str, metrics: str | None) -> list[str]:
    out = ["  # The hops in chain order, edge first, each named as the service calls itself (its series' service",
           "  # label; what fault.target names). Add the services behind it whose series you want beside it."]
    if metrics is None:
        out += ["  # This one is the proxy's: its /metrics are filled in from proxy.metrics_port.",
                "  hops:", f"    - name: {hop}"]  # fmt: skip
        return out
    out += [f"  # Start your service with DRILL_SERVICE={hop} and DRILL_FAULT_ENABLED=1: the dry run reads both",
            "  # from its /metrics, and a service that names itself otherwise is never the fault's target.",
            "  hops:", f"    - name: {hop}",
            _kv("metrics", f"[{_q(metrics)}]", "its /metrics URL (drill init --metrics URL)", "      ")]  # fmt: skip
    return out


def _config_lines() -> list[str]:
    return [
        "  # The configurations to compare, each a way the stack is deployed. One here: your service as it runs",
        "  # now, nothing to switch (a service without our resilience layer has no configuration the runner",
        "  # can pick for it). To compare two, give each a `switch` command that redeploys the service that",
        "  # way and returns once it serves, e.g. `- {name: retries-off, switch: ./deploy.sh retries-off}`.",
        "  # Before each trial the runner waits for the edge's gRPC health check (`ready`; a service without",
        "  # the health service answers UNIMPLEMENTED, which counts as up).",
        "  configs:",
        f"    - name: {AS_IS}",
        "      ready: {checks: 3, timeout_s: 60}",
    ]  # fmt: skip


def _rest(edge: Listed, hop: str) -> list[str]:
    organic, drill = ORGANIC_USERS * ORGANIC_RATE, DRILL_USERS * DRILL_RATE
    return [
        "",
        *_wrap(f"The load: users that call the edge at fixed rates (open loop: whatever the service answers). "
               f"Modest on purpose, for a service whose capacity is unknown: {ORGANIC_USERS} organic users and "
               f"{DRILL_USERS} drill user at {ORGANIC_RATE} calls/s each, {organic + drill} calls/s in all; raise "
               "them once you know what it takes. Organic calls never carry the fault; the drill user's do, in "
               "the fault phase. timeout_s: each call's deadline."),
        f"traffic: {{organic_users: {ORGANIC_USERS}, organic_rate: {ORGANIC_RATE}, drill_users: {DRILL_USERS}, "
        f"drill_rate: {DRILL_RATE}, timeout_s: 2}}",
        "",
        *_wrap(f"The fault: in the fault phase, {FAULT_RATIO} % of the drill user's calls (the seed picks which) "
               f"are aborted with UNAVAILABLE at the hop `target` ({hop}), before your service sees them. Change "
               "first: the status (abort:CODE), or try a delay (delay:MS) or a drop (drop:MS): the fault grammar "
               "of docs/contracts.md."),
        *_wrap(fault_note(edge.kind)),
        f'fault: {{directive: "{FAULT}", ratio: {FAULT_RATIO}, target: {hop}}}',
        "",
        *_wrap("Each trial's phases, in seconds: warmup (the SLO's baseline), fault (the directive sent), "
               "recovery (no fault: how long until the SLO holds again). Longer phases give steadier numbers."),
        "phases: {warmup: 5, fault: 10, recovery: 10}",
        "",
        *_wrap("The SLO each second is judged by: the drill traffic's error rate at most 5 % over 2-s windows, "
               "held 2 s to count as restored; MTTR runs from its first breach to then. traffic: drill (the calls "
               "the fault can hit: this fault breaches it), organic (what other users felt: the blast radius) "
               "or all."),
        "slo: {max_error_rate: 0.05, hold_s: 2, traffic: drill, window_s: 2}",
        "",
        "# Trials per configuration (several configurations run interleaved); a verdict needs several.",
        "trials: 1",
    ]  # fmt: skip


def _kv(key: str, value: str, comment: str, indent: str = "    ") -> str:
    """`key: value` and its comment, the comments of a block in one column."""
    return (f"{indent}{key}: {value} ").ljust(34) + f"# {comment}"


def _q(text: str) -> str:
    """A YAML string in double quotes (JSON's, which YAML reads as written)."""
    return json.dumps(text)


def _flow(value: Any) -> str:
    return json.dumps(value)


def _wrap(text: str, indent: str = "# ", width: int = 110) -> list[str]:
    """`text` as comment lines of at most `width` characters, each starting with `indent`."""
    words, out, line = text.split(), [], indent
    for w in words:
        if len(line) + len(w) > width and line != indent:
            out.append(line.rstrip())
            line = indent
        line += w + " "
    return [*out, line.rstrip()]


# --- the terminal ---------------------------------------------------------------------------------
def methods_table(methods: Sequence[Listed], edge: Listed) -> str:
    """The methods with their kinds and input messages, the edge marked."""
    rows = [("method", "kind", "request"), *((short(m), kind_words(m.kind), m.input.full_name) for m in methods)]
    widths = [max(len(r[c]) for r in rows) for c in range(3)]
    out = []
    for i, row in enumerate(rows):
        mark = "  <- the edge" if i and methods[i - 1] is edge else ""
        out.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + mark)
    return "\n".join(out)
