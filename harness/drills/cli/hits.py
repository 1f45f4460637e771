"""`drill hits`: preview a drill's blast radius. Reads request ids from stdin, prints `id<TAB>hit|miss`.

With `--scope attempt --attempts K` (or `--attempts K` alone, i.e. `x-fault-attempts: K`
with request scope) it prints `id` then K tab-separated `hit|miss` columns, one per
attempt 0..K-1 (contracts §4).

Input is text, one request id per line, each one a server could carry and judge: printable
ASCII (gRPC metadata) of at most 256 characters (longer ids are refused by the servers, never
hit). Anything else (a binary file, a line of UTF-8 text) is refused on one line naming the line.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator

from harness.core import cliargs
from harness.core.errors import BadInput
from harness.core.faults import (
    ABSOLUTE_MAX_DELAY_MS,
    MAX_ATTEMPTS,
    DirectiveError,
    is_hit_attempt,
    parse_directive,
    seed_from_drill_id,
)
from harness.core.headers import MAX_VALUE_LEN
from harness.core.reasons import explain
from harness.core.settings import FaultSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    seed = p.add_mutually_exclusive_group(required=True)
    seed.add_argument("--seed", type=cliargs.seed, help="the servers' DRILL_FAULT_SEED")
    seed.add_argument("--drill-id", help="the servers' DRILL_FAULT_DRILL_ID (seed = its Java hash)")
    p.add_argument("--directive", required=True, help="the x-fault value, e.g. delay:250")
    p.add_argument("--ratio", type=cliargs.integer(0, 100, "a percentage"), default=100,
                   help="x-fault-ratio, 0-100 (default 100)")  # fmt: skip
    p.add_argument(
        "--scope",
        choices=("request", "attempt"),
        default="request",
        help="x-fault-scope: request (every retry of a hit id is hit) or attempt (one draw per attempt)",
    )
    p.add_argument(
        "--attempts",
        type=cliargs.integer(1, MAX_ATTEMPTS, "attempts"),
        default=None,
        help="print one hit|miss column per attempt 0..K-1 (with --scope request: x-fault-attempts K)",
    )
    p.add_argument("--summary", action="store_true", help="print the hit share to stderr at the end")
    p.add_argument(
        "--max-delay-ms", type=cliargs.integer(0, ABSOLUTE_MAX_DELAY_MS, "milliseconds"), default=None,
        help="the servers' DRILL_FAULT_MAX_DELAY_MS (default: that variable here, else 60000): longer "
        "delays and drops are refused by them, so nothing would be hit",
    )  # fmt: skip


_NOT_PRINTABLE = re.compile(rb"[^\x20-\x7e]")


def request_ids(stream) -> Iterator[tuple[int, str]]:
    """(line number, id) of each non-empty line of a binary stream, or BadInput naming the first line that is
    not a request id: not text (a binary file), not printable ASCII, or longer than servers accept."""
    for number, raw in enumerate(stream, 1):
        line = raw.rstrip(b"\r\n")
        if not line:
            continue
        if b"\0" in line:
            raise BadInput(f"hits: stdin line {number} is binary, not text; give request ids, one per line")
        if _NOT_PRINTABLE.search(line):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                raise BadInput(
                    f"hits: stdin line {number} is not text (not UTF-8); give request ids, one per line"
                ) from None
            raise BadInput(f"hits: stdin line {number} is not a request id: gRPC metadata carries printable "
                           "ASCII only")  # fmt: skip
        if len(line) > MAX_VALUE_LEN:
            raise BadInput(f"hits: stdin line {number} is not a request id: {len(line)} characters, servers refuse "
                           f"ids longer than {MAX_VALUE_LEN} (never hit)")  # fmt: skip
        yield number, line.decode("ascii")


def run(args: argparse.Namespace) -> int:
    limit = args.max_delay_ms
    if limit is None:
        limit = FaultSettings.from_env().max_delay_ms  # the servers' default, unless this shell sets it
    try:
        parse_directive(args.directive, max_delay_ms=limit)
    except DirectiveError as err:
        raise BadInput(f"hits: servers would refuse this directive, so nothing would be hit: {explain(err)}") from None
    seed = args.seed if args.seed is not None else seed_from_drill_id(args.drill_id)
    columns = args.attempts or 1
    hits = total = 0
    out = sys.stdout
    stdin = getattr(sys.stdin, "buffer", None)  # bytes, to tell a binary file from text; a text-only stand-in
    lines = stdin if stdin is not None else (line.encode() for line in sys.stdin)  # (tests, an embedding) is text
    for _, request_id in request_ids(lines):
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
