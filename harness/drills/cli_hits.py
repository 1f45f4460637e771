"""`drill hits`: preview a drill's blast radius. Reads request ids from stdin, prints `id<TAB>hit|miss`."""

from __future__ import annotations

import argparse
import sys

from harness.core.errors import BadInput
from harness.core.faults import DirectiveError, is_hit, parse_directive, seed_from_drill_id


def add_arguments(p: argparse.ArgumentParser) -> None:
    seed = p.add_mutually_exclusive_group(required=True)
    seed.add_argument("--seed", type=int, help="the servers' DRILL_FAULT_SEED")
    seed.add_argument("--drill-id", help="the servers' DRILL_FAULT_DRILL_ID (seed = its Java hash)")
    p.add_argument("--directive", required=True, help="the x-fault value, e.g. delay:250")
    p.add_argument("--ratio", type=int, default=100, help="x-fault-ratio, 0-100 (default 100)")
    p.add_argument("--summary", action="store_true", help="print the hit share to stderr at the end")


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.ratio <= 100:
        raise BadInput(f"hits: --ratio must be 0-100, got {args.ratio}")
    try:
        parse_directive(args.directive, max_delay_ms=10**9)
    except DirectiveError as err:
        raise BadInput(f"hits: servers would reject this directive ({err}); nothing would be hit") from None
    seed = args.seed if args.seed is not None else seed_from_drill_id(args.drill_id)
    hits = total = 0
    out = sys.stdout
    for line in sys.stdin:
        request_id = line.rstrip("\r\n")
        if not request_id:
            continue
        hit = is_hit(seed, request_id, args.directive, args.ratio)
        total += 1
        hits += hit
        out.write(f"{request_id}\t{'hit' if hit else 'miss'}\n")
    if args.summary:
        share = hits / total if total else 0.0
        print(f"{hits}/{total} hit ({share:.1%}) seed={seed}", file=sys.stderr)
    return 0
