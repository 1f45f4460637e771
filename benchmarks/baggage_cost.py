"""What reading W3C baggage costs per call, in-process (contracts "Baggage"; issue 47 §6).

    .venv/bin/python benchmarks/baggage_cost.py [--calls 20000 --repeats 7] [--before DIR]

Pinned to one core, CPU µs per call (the minimum over `--repeats` runs: noise only ever adds time) of:
- `parse_10`: harness.core.baggage.parse of a 10-member header (6 drill entries as our clients send them, a uuid
  request id, a token, and 4 members of other owners, one with properties);
- `read_10`: headers.metadata_dict of a call whose drill is in that header alone (what the target hop does);
- `read_x`: metadata_dict of a drill call by x-* keys with no baggage (the drill read path as before);
- `read_x_bag`: the same call with that baggage beside the x-* keys (precedence: the baggage is not parsed);
- `send`: the client's with_baggage for a drill call (building and merging the header);
- with `--before DIR` (a checkout before baggage, e.g. `git archive 8cb2bbd | tar -x -C DIR`): `read_x_before`,
  `read_x` in that tree, in a process of its own.
Last line: `baggage_us parse_10=… read_10=… read_x=… read_x_bag=… send=…`.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._cpu import cores, header  # noqa: E402
from harness.core import baggage  # noqa: E402
from harness.core import headers as h  # noqa: E402
from harness.interceptors._client_core import with_baggage  # noqa: E402

RID = "5b7f3c1e-8a4d-4f21-9c3e-2d6b1a0f9e87"
DRILL = {
    h.TENANT: "tenant-drill", h.FAULT: "abort:UNAVAILABLE", h.FAULT_RATIO: "50",
    h.FAULT_METHOD: "drill.v1.Demo/Call", h.REQUEST_ID: RID,
    h.DRILL_TOKEN: "1796524696.1d5b22d8c4272ed75ee052f7e0df2903c55203bd7942e2242caf192db52d7e85",
}  # fmt: skip
OTHERS = "userId=alice,session=7f3a;ttl=60,region=eu-west-1,plan=gold%20plus"
HEADER = baggage.with_entries(OTHERS, h.BAGGAGE_PREFIX, {h.BAGGAGE_NAMES[k]: v for k, v in DRILL.items()})
COMMON = [("user-agent", "grpc-python-asyncio/1.85.4 grpc-c/58.0.0 (linux; chttp2)"), ("grpc-accept-encoding", "gzip")]


def per_call_us(fn, calls: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, time.process_time() - t0)
    return best / calls * 1e6


def before(tree: pathlib.Path, md, calls: int, repeats: int) -> float:
    """`read_x` with `tree`'s headers.metadata_dict (this file's timing loop, run there)."""
    code = (
        f"import sys, time; sys.path.insert(0, {str(tree)!r})\n"
        "from harness.core import headers as h\n"
        f"md = {tuple(md)!r}\nbest = float('inf')\n"
        f"for _ in range({repeats}):\n"
        "    t0 = time.process_time()\n"
        f"    for _ in range({calls}):\n"
        "        h.metadata_dict(md)\n"
        "    best = min(best, time.process_time() - t0)\n"
        f"print(h.__file__, best / {calls} * 1e6)"
    )  # per_call_us's loop, with that tree's headers
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tree)
    path, us = out.stdout.split()
    assert path.startswith(str(tree)), path  # that tree's code, not this one's
    return float(us)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--before", help="a checkout before the baggage change: read_x there too")
    args = ap.parse_args()
    os.sched_setaffinity(0, {cores()[0]})
    print(header("baggage cost", pinned=False), flush=True)
    assert len(baggage.parse(HEADER)) == 10
    by_baggage = (*COMMON, (h.REQUEST_ID, "other-id"), (h.BAGGAGE, HEADER))
    by_x = (*COMMON, *DRILL.items())
    both = (*by_x, (h.BAGGAGE, HEADER))
    assert h.metadata_dict(by_baggage)[h.FAULT] == "abort:UNAVAILABLE"
    send_md = list(by_x)
    cases = {
        "parse_10": lambda: baggage.parse(HEADER),
        "read_10": lambda: h.metadata_dict(by_baggage),
        "read_x": lambda: h.metadata_dict(by_x),
        "read_x_bag": lambda: h.metadata_dict(both),
        "send": lambda: with_baggage(send_md),
    }
    print(f"# header ({len(HEADER)} bytes): {HEADER}")
    got = {name: per_call_us(fn, args.calls, args.repeats) for name, fn in cases.items()}
    if args.before:
        got["read_x_before"] = before(pathlib.Path(args.before).resolve(), by_x, args.calls, args.repeats)
    for name, us in got.items():
        print(f"{name}: {us:.2f} µs per call")
    print("baggage_us " + " ".join(f"{name}={us:.2f}" for name, us in got.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
