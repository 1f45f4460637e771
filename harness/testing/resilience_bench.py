"""Topologies and load loops on real in-process servers, shared by the benchmark and the tests.

Starts demo hops on 127.0.0.1 with the fault interceptor (faults on, fixed seed),
chains them through `ResilientCaller`s, drives bounded load (a request count
*and* a time limit) and reads what each hop actually saw through a small
counting server interceptor. Nothing here is imported by the serving path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
import uuid
from collections.abc import Sequence
from typing import Any

import grpc
from grpc import aio

from harness.core import headers as h
from harness.core.settings import FaultSettings
from harness.demo.downstream import as_downstream, demo_caller
from harness.demo.proto import drill_pb2
from harness.demo.serve import start_server
from harness.interceptors import Tagging
from harness.resilience import ResilientCaller
from harness.resilience import config as _config

DRILL_TENANT = h.DEFAULT_DRILL_TENANT


class HopRecorder(aio.ServerInterceptor):
    """Counts unary calls a hop received and when each handler really finished (wall clock)."""

    def __init__(self) -> None:
        self.calls = 0
        #: (finished wall time, origin deadline or None) per call.
        self.ends: list[tuple[float, float | None]] = []
        self.previous_attempts: list[tuple[str, str, str]] = []
        #: `time_remaining()` each handler saw at entry (None = the caller set no deadline).
        self.remaining: list[float | None] = []
        #: the same, by request id (the first attempt of each request that reached this hop)
        self.remaining_by_request: dict[str, float | None] = {}
        #: How far past the edge caller's deadline this hop's own deadline lay, per call.
        self.deadline_overshoot: list[float] = []
        #: (request id, attempt number, whether the answer told the caller not to retry: pushback -1)
        self.answers: list[tuple[str, int, bool]] = []

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.response_streaming:
            return handler
        self.calls += 1
        md = h.metadata_dict(handler_call_details.invocation_metadata)
        raw = md.get(h.ORIGIN_DEADLINE)
        origin = float(raw) if raw else None
        self.previous_attempts.append(
            (
                md.get(h.REQUEST_ID, ""),
                md.get(h.PREVIOUS_RPC_ATTEMPTS, ""),
                md.get(h.DRILL_PREVIOUS_RPC_ATTEMPTS, ""),
            )
        )
        inner = handler.unary_unary
        rid = md.get(h.REQUEST_ID, "")
        attempt = int(md.get(h.DRILL_PREVIOUS_RPC_ATTEMPTS) or 0)

        async def unary(request, context):
            left = context.time_remaining()
            self.remaining.append(left)
            self.remaining_by_request.setdefault(rid, left)
            if left is not None and origin is not None:
                self.deadline_overshoot.append(time.time() + left - origin)
            try:
                return await inner(request, context)
            finally:
                self.ends.append((time.time(), origin))
                trailers = dict(context.trailing_metadata() or ())
                self.answers.append((rid, attempt, trailers.get(h.RETRY_PUSHBACK_MS) == "-1"))

        return grpc.unary_unary_rpc_method_handler(
            unary,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def retried_give_ups(self) -> int:
        """Attempts this hop received after it had answered the same request "do not retry" (pushback -1)."""
        stopped = {(rid, n) for rid, n, stop in self.answers if stop}
        return sum((rid, n - 1) in stopped for rid, n, _ in self.answers if n > 0)

    def max_gap(self) -> float:
        """Longest time any handler here ran past the edge caller's deadline (0 when none did)."""
        gaps = [end - origin for end, origin in self.ends if origin is not None]
        return max([0.0, *gaps])


@dataclasses.dataclass
class Hop:
    service: str
    address: str
    server: aio.Server
    recorder: HopRecorder
    caller: ResilientCaller | None = None


@dataclasses.dataclass
class InProcessChain:
    """Demo hops served in this process (not `harness.drills.stack.topology`'s processes)."""

    hops: list[Hop]

    @property
    def entry(self) -> str:
        return self.hops[0].address

    async def close(self) -> None:
        for hop in self.hops:
            if hop.caller is not None:
                await hop.caller.close()
            await hop.server.stop(None)


async def start_hop(service: str, *, faults: bool = True, seed: int = 7, downstream=None, instance: str = "") -> Hop:
    rec = HopRecorder()
    settings = FaultSettings(enabled=faults, service=service, seed=seed, instance_id=instance or service)
    server, port, _ = await start_server(port=0, settings=settings, downstream=downstream, extra_interceptors=[rec])
    return Hop(service, f"127.0.0.1:{port}", server, rec)


async def start_chain(
    depth: int, cfg: _config.ResilienceConfig, *, prefix: str = "hop", seed: int = 7, seed_rng: int = 1
) -> InProcessChain:
    """`depth` hops, `prefix1 → prefix2 → ...`; each non-leaf calls the next through `cfg`."""

    hops: list[Hop] = []
    downstream = None
    caller: ResilientCaller | None = None
    for i in range(depth, 0, -1):
        hop = await start_hop(f"{prefix}{i}", seed=seed, downstream=downstream)
        hop.caller = caller  # what this hop uses to reach hop i+1 (None for the leaf)
        hops.insert(0, hop)
        if i > 1:
            caller = demo_caller([hop.address], cfg, service=f"{prefix}{i - 1}", rng=random.Random(seed_rng + i))
            downstream = as_downstream(caller)
    return InProcessChain(hops)


@dataclasses.dataclass
class LoadResult:
    latencies: list[float]
    codes: dict[str, int]
    elapsed: float

    @property
    def count(self) -> int:
        return len(self.latencies)

    def percentile(self, q: float) -> float:
        data = sorted(self.latencies)
        if not data:
            return math.nan
        return data[max(0, math.ceil(q * len(data)) - 1)]


async def drive(
    caller: ResilientCaller,
    requests: int,
    *,
    concurrency: int = 8,
    time_limit_s: float = 30.0,
    method: str = "Call",
    timeout: float | None = None,
    request_ids: int | None = None,
) -> LoadResult:
    """Up to `requests` logical calls from `concurrency` workers, stopping at `time_limit_s` regardless.

    With `request_ids` (a seed) the calls carry uuid4-shaped request ids drawn from a seeded
    random, so which requests a ratio-based fault hits is reproducible (the hit is by request id).
    """
    ids = random.Random(request_ids) if request_ids is not None else None
    issued = 0
    latencies: list[float] = []
    codes: dict[str, int] = {}
    start = time.monotonic()
    stop_at = start + time_limit_s

    async def worker() -> None:
        nonlocal issued
        while issued < requests and time.monotonic() < stop_at:
            issued += 1
            md = ((h.REQUEST_ID, str(uuid.UUID(int=ids.getrandbits(128), version=4))),) if ids else None
            t0 = time.perf_counter()
            try:
                await caller.call(method, drill_pb2.CallRequest(payload="x"), timeout=timeout, metadata=md)
                code = "OK"
            except aio.AioRpcError as err:
                code = err.code().name
            latencies.append(time.perf_counter() - t0)
            codes[code] = codes.get(code, 0) + 1

    await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    return LoadResult(latencies, codes, time.monotonic() - start)


def drill_tagging(directive: str, *, ratio: int | None = None, target: str | None = None) -> Tagging:
    return Tagging(tenant=DRILL_TENANT, directive=directive, ratio=ratio, target=target)


async def measure_amplification(
    cfg: _config.ResilienceConfig,
    depth: int,
    requests: int,
    *,
    concurrency: int = 16,
    ratio: int = 50,
    time_limit_s: float = 60.0,
    seed: int = 7,
) -> dict[str, Any]:
    """Ingress caller (same config) → `depth` hops, abort:UNAVAILABLE at `ratio` on the deepest hop only.

    Returns attempts seen at each hop ÷ ingress logical requests.
    """

    topo = await start_chain(depth, cfg, prefix=f"{cfg.name}-d{depth}-h", seed=seed)
    deepest = topo.hops[-1].service
    ingress = demo_caller(
        [topo.entry],
        cfg,
        service="ingress",
        tagging=drill_tagging("abort:UNAVAILABLE", ratio=ratio, target=deepest),
        rng=random.Random(seed),
    )
    try:
        result = await drive(ingress, requests, concurrency=concurrency, time_limit_s=time_limit_s, request_ids=seed)
    finally:
        await ingress.close()
        await topo.close()
    n = max(1, result.count)
    return {
        "config": cfg.name,
        "depth": depth,
        "requests": result.count,
        "per_hop": [hop.recorder.calls / n for hop in topo.hops],
        "retried_give_ups": [hop.recorder.retried_give_ups() for hop in topo.hops],
        "amplification": topo.hops[-1].recorder.calls / n,
        "codes": result.codes,
        "elapsed_s": result.elapsed,
    }


async def measure_balancing(
    cfg: _config.ResilienceConfig,
    *,
    backends: int = 4,
    slow: int = 2,
    delay_ms: int = 300,
    warmup: int = 40,
    requests: int = 200,
    concurrency: int = 8,
    time_limit_s: float = 30.0,
    seed: int = 7,
) -> dict[str, Any]:
    """`backends` replicas, `slow` of them delay drill traffic by `delay_ms`: share of picks to the slow."""

    hops = [await start_hop("balanced", faults=i < slow, seed=seed, instance=f"balanced-{i}") for i in range(backends)]
    slow_addrs = {hop.address for hop in hops[:slow]}
    caller = demo_caller(
        [hop.address for hop in hops],
        cfg,
        service="lb-client",
        tagging=drill_tagging(f"delay:{delay_ms}"),
        rng=random.Random(seed),
    )
    try:
        await drive(caller, warmup, concurrency=concurrency, time_limit_s=time_limit_s)
        warm = caller.picks.copy()
        result = await drive(caller, requests, concurrency=concurrency, time_limit_s=time_limit_s)
        picks = caller.picks - warm
    finally:
        await caller.close()
        for hop in hops:
            await hop.server.stop(None)
    total = sum(picks.values()) or 1
    return {
        "config": cfg.name,
        "balancer": cfg.balancer.get("kind"),
        "slow_share": sum(n for a, n in picks.items() if a in slow_addrs) / total,
        "p50_s": result.percentile(0.50),
        "p99_s": result.percentile(0.99),
        "requests": result.count,
        "codes": result.codes,
    }


async def measure_deadline_gap(
    cfg: _config.ResilienceConfig,
    *,
    depth: int = 3,
    client_deadline_s: float = 0.5,
    delay_ms: int = 2000,
    requests: int = 4,
    seed: int = 7,
) -> dict[str, Any]:
    """Chain with `delay_ms` at the last hop, edge deadline `client_deadline_s`: work past the deadline."""

    topo = await start_chain(depth, cfg, prefix=f"{cfg.name}-dl-h", seed=seed)
    edge = demo_caller(
        [topo.entry],
        cfg,
        service="edge",
        tagging=drill_tagging(f"delay:{delay_ms}", target=topo.hops[-1].service),
        rng=random.Random(seed),
    )
    try:
        result = await drive(edge, requests, concurrency=1, time_limit_s=requests * 3.0, timeout=client_deadline_s)
        await asyncio.sleep(0.2)  # let cancelled handlers finish unwinding
    finally:
        await edge.close()
        await topo.close()
    return {
        "config": cfg.name,
        "propagate": cfg.deadline.propagate,
        "gap_per_hop_s": [hop.recorder.max_gap() for hop in topo.hops],
        "max_gap_s": max(hop.recorder.max_gap() for hop in topo.hops),
        "leaf_remaining": list(topo.hops[-1].recorder.remaining),
        "leaf_overshoot": list(topo.hops[-1].recorder.deadline_overshoot),
        "deadline_overshoot_per_hop_s": [max(hop.recorder.deadline_overshoot, default=0.0) for hop in topo.hops],
        #: per request id, the time each hop saw left at entry, edge first (shorter where a hop gave up early)
        "remaining_along_chain": {rid: [hop.recorder.remaining_by_request[rid] for hop in topo.hops
                                        if rid in hop.recorder.remaining_by_request]
                                  for rid in topo.hops[0].recorder.remaining_by_request},  # fmt: skip
        "codes": result.codes,
    }


def with_overrides(cfg: _config.ResilienceConfig, **changes: Any) -> _config.ResilienceConfig:
    """A copy of `cfg` with some fields replaced (e.g. `deadline=...`), renamed when `name` is given."""
    return dataclasses.replace(cfg, **changes)


def names(configs: Sequence[str]) -> list[_config.ResilienceConfig]:
    return [_config.load(n) for n in configs]
