"""Amplification benchmark: downstream attempts per ingress request, per resilience configuration.

Real in-process gRPC servers on 127.0.0.1 with the fault interceptor on; drill traffic
carries `abort:UNAVAILABLE` at ratio 50 targeted at the deepest hop. For each named
configuration it drives a single hop and a 3-hop chain (every hop, and the ingress,
retries with that configuration) and prints deepest-hop attempts ÷ ingress requests.
It also measures P2C against round robin (4 replicas, 2 delaying drill traffic by
300 ms) and the deadline gap on a 3-hop chain with and without propagation.

    .venv/bin/python benchmarks/amplification.py [--requests N] [--chain-requests N] [--quick]

The last line is `amplification naive=X budget=Y resilient=Z throttled=W` (single hop).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._cpu import header  # noqa: E402
from harness.resilience import config as rconfig  # noqa: E402
from harness.testing import resilience_bench as bench  # noqa: E402


def _fmt(values: list[float]) -> str:
    return " → ".join(f"{v:.2f}" for v in values)


async def amplification(
    requests: int, chain_requests: int, chain_concurrency: int
) -> tuple[dict[str, float], dict[str, float]]:
    single: dict[str, float] = {}
    chain: dict[str, float] = {}
    print("## amplification: deepest-hop attempts ÷ ingress requests (abort:UNAVAILABLE, ratio 50, deepest hop)")
    resilient = rconfig.load("resilient")
    # Not a named configuration: shows what the 50% breaker costs when the fault ratio is also 50%.
    breaker60 = bench.with_overrides(
        resilient, name="resilient(breaker=60%)", breaker={**resilient.breaker, "failure_rate": 0.6}
    )
    for cfg in [*(rconfig.load(n) for n in rconfig.NAMES), breaker60]:
        name = cfg.name
        for depth, n, conc, out in ((1, requests, 16, single), (3, chain_requests, chain_concurrency, chain)):
            r = await bench.measure_amplification(cfg, depth, n, concurrency=conc, time_limit_s=120.0)
            ok = r["codes"].get("OK", 0) / max(1, r["requests"])
            out[name] = r["amplification"]
            print(
                f"{name:22s} hops={depth} requests={r['requests']:4d} per-hop={_fmt(r['per_hop']):22s} "
                f"amplification={r['amplification']:.2f} success={ok:.0%} codes={r['codes']} ({r['elapsed_s']:.1f}s)",
                flush=True,
            )
    return single, chain


async def balancing(requests: int) -> None:
    print("## balancing: 4 replicas, 2 delay drill traffic by 300 ms; picks after 40 warm-up calls")
    p2c = rconfig.load("resilient-p2c")
    variants = [
        # the three differ only in the balancer (resilient-p2c's p99-derived per-attempt timeout in all)
        bench.with_overrides(p2c, name="round-robin", balancer={"kind": "round_robin"}),
        bench.with_overrides(p2c, name="p2c-no-ejection", balancer={"kind": "p2c", "decay_s": 10.0}),
        p2c,
    ]
    for cfg in variants:
        r = await bench.measure_balancing(cfg, warmup=40, requests=requests, concurrency=8, time_limit_s=60.0)
        print(
            f"{cfg.name:16s} slow-share={r['slow_share']:.1%} drill p50={r['p50_s'] * 1000:.1f}ms "
            f"p99={r['p99_s'] * 1000:.1f}ms requests={r['requests']} codes={r['codes']}",
            flush=True,
        )


async def deadlines() -> None:
    print("## deadline gap: 3 hops, 500 ms client deadline, delay:2000 at the last hop")
    resilient = rconfig.load("resilient")
    without = bench.with_overrides(
        resilient, name="no-propagation", deadline=dataclasses.replace(resilient.deadline, propagate=False)
    )
    for cfg in (resilient, without):
        r = await bench.measure_deadline_gap(cfg, requests=5)
        over = [round(g * 1000) for g in r["deadline_overshoot_per_hop_s"]]
        print(
            f"{cfg.name:16s} propagate={cfg.deadline.propagate!s:5s} "
            f"work past client deadline per hop (ms)={[round(g * 1000, 1) for g in r['gap_per_hop_s']]} "
            f"hop deadline past client deadline (ms)={over} codes={r['codes']}",
            flush=True,
        )


async def main(args: argparse.Namespace) -> int:
    print(header("amplification", pinned=False), flush=True)
    start = time.monotonic()
    single, chain = await amplification(args.requests, args.chain_requests, args.chain_concurrency)
    if not args.skip_extras:
        await balancing(args.balancing_requests)
        await deadlines()
    print(f"## done in {time.monotonic() - start:.1f}s")
    names = ("naive", "budget", "resilient", "throttled")
    print("amplification-3hop " + " ".join(f"{n}={chain[n]:.2f}" for n in names))
    print("amplification " + " ".join(f"{n}={single[n]:.2f}" for n in names))
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=1000, help="ingress requests per single-hop run")
    p.add_argument("--chain-requests", type=int, default=300, help="ingress requests per 3-hop run")
    p.add_argument(
        "--chain-concurrency",
        type=int,
        default=4,
        help="concurrent ingress requests in the 3-hop runs (naive's storm of 64 attempts per failing request "
        "must fit in its 1 s timeouts on one process, else timeouts, not retries, shape the result)",
    )
    p.add_argument("--balancing-requests", type=int, default=400, help="calls measured per balancer")
    p.add_argument("--skip-extras", action="store_true", help="amplification only (no balancing, no deadlines)")
    p.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    ns = p.parse_args()
    if ns.quick:
        ns.requests, ns.chain_requests, ns.balancing_requests = 200, 60, 120
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    logging.getLogger("drill").setLevel(logging.WARNING)
    sys.exit(asyncio.run(main(ns)))
