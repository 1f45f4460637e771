"""`drill hits`: preview a drill's blast radius. Reads request ids from stdin, prints `id<TAB>hit|miss`.

With `--scope attempt --attempts K` (or `--attempts K` alone, i.e. `x-fault-attempts: K`
with request scope) it prints `id` then K tab-separated `hit|miss` columns, one per
attempt 0..K-1 (contracts §4).
"""

from __future__ import annotations

import argparse
import sys

from harness.core.errors import BadInput
from harness.core.faults import MAX_ATTEMPTS, DirectiveError, is_hit_attempt, parse_directive, seed_from_drill_id
from harness.core.settings import FaultSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    seed = p.add_mutually_exclusive_group(required=True)
    seed.add_argument("--seed", type=int, help="the servers' DRILL_FAULT_SEED")
    seed.add_argument("--drill-id", help="the servers' DRILL_FAULT_DRILL_ID (seed = its Java hash)")
    p.add_argument("--directive", required=True, help="the x-fault value, e.g. delay:250")
    p.add_argument("--ratio", type=int, default=100, help="x-fault-ratio, 0-100 (default 100)")
    p.add_argument(
        "--scope",
        choices=("request", "attempt"),
        default="request",
        help="x-fault-scope: request (every retry of a hit id is hit) or attempt (one draw per attempt)",
    )
    p.add_argument(
        "--attempts",
        type=int,
        default=None,
        help="print one hit|miss column per attempt 0..K-1 (with --scope request: x-fault-attempts K)",
    )
    p.add_argument("--summary", action="store_true", help="print the hit share to stderr at the end")
    p.add_argument(
        "--max-delay-ms", type=int, default=None,
        help="the servers' DRILL_FAULT_MAX_DELAY_MS (default: that variable here, else 60000): longer "
        "delays and drops are refused by them, so nothing would be hit",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.ratio <= 100:
        raise BadInput(f"hits: --ratio must be 0-100, got {args.ratio}")
    limit = args.max_delay_ms
    if limit is None:
        limit = FaultSettings.from_env().max_delay_ms  # the servers' default, unless this shell sets it
    try:
        parse_directive(args.directive, max_delay_ms=limit)
    except DirectiveError as err:
        raise BadInput(f"hits: servers would refuse this directive ({err}); nothing would be hit") from None
    if args.attempts is not None and not 1 <= args.attempts <= MAX_ATTEMPTS:
        raise BadInput(f"hits: --attempts must be 1-{MAX_ATTEMPTS}, got {args.attempts}")
    seed = args.seed if args.seed is not None else seed_from_drill_id(args.drill_id)
    columns = args.attempts or 1
    hits = total = 0
    out = sys.stdout
    for line in sys.stdin:
        request_id = line.rstrip("\r\n")
        if not request_id:
            continue
        row = [
            is_hit_attempt(seed, request_id, args.directive, args.ratio, n, args.scope)
            for n in range(columns)
        ]
        total += 1
        hits += row[0]
        out.write(request_id + "".join("\thit" if hit else "\tmiss" for hit in row) + "\n")
    if args.summary:
        share = hits / total if total else 0.0
        print(f"{hits}/{total} hit ({share:.1%}) seed={seed}", file=sys.stderr)
    return 0
