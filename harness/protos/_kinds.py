"""Each method's kind for a hop that forwards every call (`drill proxy`, either data plane): read once at start.

One place for the rule both planes follow (`harness.proxy` and `harness.link` are siblings and import neither
the other), so a method is judged the same kind whichever plane carries it.
"""

from __future__ import annotations

import argparse
import logging

from harness.core.errors import BadInput
from harness.core.faults import Kind
from harness.protos._reflection import ReflectionError
from harness.protos._types import from_descriptor_set, from_proto, from_reflection

log = logging.getLogger("drill.proxy")
#: How long each question to the upstream's server reflection may take, at start
REFLECTION_TIMEOUT_S = 5.0


def method_kinds(args: argparse.Namespace, command: str = "proxy") -> dict[str, Kind]:
    """`/pkg.Service/Method` → kind, read once at start so the pipeline judges `@after` and `@read` as in
    process: from `args.descriptor_set` or `args.proto` (every service in it, `args.proto_path` its imports), else
    the server reflection of `args.upstream` (its own services: not reflection's or health's), else none, said once.
    A method found in none is forwarded as a bidi stream (every kind is one on the wire), a fault judged by what the
    wire shows. `command` starts the error lines (`proxy: --proto …`)."""
    if args.descriptor_set and args.proto:
        raise BadInput(f"{command}: give --descriptor-set or --proto, not both (neither = the upstream's reflection)")
    if args.proto_path and not args.proto:
        raise BadInput(f"{command}: --proto-path applies to --proto; give --proto too")
    if args.descriptor_set:
        with from_descriptor_set(args.descriptor_set, option=f"{command}: --descriptor-set") as types:
            return types.kinds()
    if args.proto:
        with from_proto(args.proto, args.proto_path, option=f"{command}: --proto") as types:
            return types.kinds()
    try:
        with from_reflection(args.upstream, timeout_s=REFLECTION_TIMEOUT_S) as types:
            return types.kinds(infra=False)
    except ReflectionError as err:
        log.warning("%s: %s offers no server reflection (%s): each call is forwarded as a stream, a "
                    "mid-stream fault judged by what the wire shows; give --proto FILE.proto (the upstream's "
                    "service) for each method's kind", command, args.upstream, err.code)  # fmt: skip
        return {}
