"""The demo's adapter to the resilience layer: `drill.v1.Demo` invokes, callers and `Downstream`s.

`harness.resilience` knows no service; this module tells it how to call the demo
(`/drill.v1.Demo/Call` and `/Write` with the generated messages' serializers)
and turns a `ResilientCaller` into the servicer's `Downstream`.
`downstream_for()` is what `drill serve --downstream A,B --config NAME` uses.

Every channel to a next hop balances round robin over all the addresses its name resolves to
(`CHANNEL_OPTIONS`): gRPC's default policy, pick_first, sends every call to the first address, so a
name with three replicas behind it (compose DNS for `--scale`d or `deploy.replicas` services, a
headless Kubernetes Service) would get one replica's capacity. The configuration's own balancer
picks among the targets listed in `--downstream`; gRPC's round robin spreads each target's calls
over that target's addresses. gRPC resolves a name when the channel starts and again only when a
connection ends: a next hop that ends its connections after a while (`--max-connection-age-ms`) makes
its callers see replicas added since.
"""

from __future__ import annotations

import asyncio
import json
import random as _random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from grpc import aio

from harness.core import headers as h
from harness.core.headers import DEFAULT_DRILL_TENANT
from harness.demo.proto import drill_pb2
from harness.demo.service import Downstream
from harness.interceptors import ORGANIC, Tagging
from harness.resilience import ChannelPool, Invoke, ResilienceConfig, ResilientCaller, load, unary_invoker

#: `drill.v1.Demo`, from the generated descriptor (not spelled by hand).
DEMO_SERVICE = drill_pb2.DESCRIPTOR.services_by_name["Demo"].full_name
#: The demo's unary methods, all taking `CallRequest` and answering `CallReply`.
DEMO_UNARY_METHODS = ("Call", "Write")
#: Channel options for calls to a next hop: round robin over every address the target resolves to, and
#: the name resolved again at most a second after a connection ends (gRPC re-resolves only then, at most once
#: per 30 s by default): with `drill serve --max-connection-age-ms` on the next hop, a replica added while
#: calls flow (`--scale`) gets its share within about that age.
#: Each channel keeps its own subchannels: with gRPC's process-wide pool a new channel to an address inherits the
#: failing connection an older channel still holds for a server that was there before, and fails UNAVAILABLE until
#: its reconnect backoff ends (tests/demo/test_downstream_restart.py); one channel per target loses no sharing.
CHANNEL_OPTIONS = (
    ("grpc.service_config", json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})),
    ("grpc.dns_min_time_between_resolutions_ms", 1000),
    ("grpc.use_local_subchannel_pool", 1),
)


def demo_invokers(channel_for_target: Callable[[str], aio.Channel]) -> dict[str, Invoke]:
    """`/drill.v1.Demo/Call` and `/Write` -> invokes through `channel_for_target(target)`."""
    return {
        f"/{DEMO_SERVICE}/{name}": unary_invoker(
            channel_for_target,
            f"/{DEMO_SERVICE}/{name}",
            drill_pb2.CallRequest.SerializeToString,
            drill_pb2.CallReply.FromString,
        )
        for name in DEMO_UNARY_METHODS
    }


def demo_caller(
    addresses: Sequence[str],
    config: ResilienceConfig,
    *,
    service: str,
    tagging: Tagging = ORGANIC,
    drill_tenants: frozenset[str] = frozenset({DEFAULT_DRILL_TENANT}),
    rng: _random.Random | None = None,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> ResilientCaller:
    """A `ResilientCaller` for the demo's replicas at `addresses`, owning its channels."""
    channels = ChannelPool(
        service=service, config=config.name, tagging=tagging, drill_tenants=drill_tenants, options=CHANNEL_OPTIONS
    )
    return ResilientCaller(
        addresses,
        config,
        demo_invokers(channels),
        service=service,
        tagging=tagging,
        drill_tenants=drill_tenants,
        rng=rng,
        sleep=sleep,
        channels=channels,
    )


def as_downstream(caller: ResilientCaller) -> Downstream:
    """Adapt a caller to the demo servicer's `Downstream`: failures become this hop's status.

    With `pushback.onGiveUp` the status carries `grpc-retry-pushback-ms: -1`, so a caller
    above that honours pushback does not retry what this hop already retried (retry at one layer).
    """
    trailing = ((h.RETRY_PUSHBACK_MS, "-1"),) if caller.config.retry.pushback_on_give_up else ()

    async def call(method: str, request, context: aio.ServicerContext):
        try:
            return await caller.call(method, request)
        except aio.AioRpcError as err:
            await context.abort(err.code(), err.details() or "downstream failed", trailing)

    return call


def parse_addresses(addresses: str) -> list[str]:
    out = [a.strip() for a in addresses.split(",") if a.strip()]
    if not out:
        raise ValueError("no downstream address given")
    return out


async def downstream_for(addresses: str, config: str, *, service: str) -> tuple[Downstream, ResilientCaller]:
    """(downstream, closeable) for `drill serve --downstream A,B --config NAME|PATH`."""
    caller = demo_caller(parse_addresses(addresses), load(config), service=service)
    return as_downstream(caller), caller
