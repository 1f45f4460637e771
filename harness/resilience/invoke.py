"""How the caller reaches a backend: `Invoke` (one attempt), `unary_invoker()`, `ChannelPool`, local errors.

Transport-agnostic on purpose: the resilient caller is given, per method, an
`Invoke` — `await invoke(target, request, timeout, metadata)` returning the reply
or raising `grpc.aio.AioRpcError` — and `unary_invoker()` builds one from any
channel factory and a full method name with its serializers, so no generated
code is needed. `ChannelPool` is such a factory: one channel per target, each
with a `DrillClientInterceptor` that records attempts (`record_calls=False`).
`rpc_error()` makes the `AioRpcError` of a call answered locally (fail fast).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import grpc
from grpc import aio

from harness.core.headers import DEFAULT_DRILL_TENANT
from harness.interceptors import ORGANIC, DrillClientInterceptor, Tagging


class Invoke(Protocol):
    """One attempt of one method on one target: the reply, or `grpc.aio.AioRpcError`/`grpc.RpcError`."""

    def __call__(
        self, target: str, request: Any, timeout: float | None, metadata: Sequence[tuple[str, str]]
    ) -> Awaitable[Any]: ...


def rpc_error(code: grpc.StatusCode, details: str, trailing: Sequence[tuple[str, str]] = ()) -> aio.AioRpcError:
    """An `AioRpcError` for a call answered locally (fail fast, early give-up)."""
    return aio.AioRpcError(code, aio.Metadata(), aio.Metadata(*trailing), details)


def full_method(method: str) -> str:
    """`pkg.Service/Method` or `/pkg.Service/Method` -> `/pkg.Service/Method` (grpc's form)."""
    name = method.lstrip("/")
    if "/" not in name:
        raise ValueError(f"{method!r} is not a full method name (/pkg.Service/Method)")
    return "/" + name


def unary_invoker(
    channel_for_target: Callable[[str], aio.Channel],
    method: str,
    request_serializer: Callable[[Any], bytes] | None = None,
    response_deserializer: Callable[[bytes], Any] | None = None,
) -> Invoke:
    """An `Invoke` for the unary method `/pkg.Service/Method` through `channel.unary_unary(...)`.

    No serializers = bytes in, bytes out. The multicallable is made once per target.
    """
    path = full_method(method)
    calls: dict[str, Any] = {}

    async def invoke(target: str, request: Any, timeout: float | None, metadata: Sequence[tuple[str, str]]) -> Any:
        call = calls.get(target)
        if call is None:
            call = calls[target] = channel_for_target(target).unary_unary(
                path, request_serializer=request_serializer, response_deserializer=response_deserializer
            )
        return await call(request, timeout=timeout, metadata=tuple(metadata))

    return invoke


class ChannelPool:
    """One insecure grpc.aio channel per target, each with a `DrillClientInterceptor` recording attempts.

    Call it with a target to get its channel; `tagging` may be swapped at any time.
    """

    def __init__(
        self,
        *,
        service: str,
        config: str = "none",
        tagging: Tagging = ORGANIC,
        drill_tenants: frozenset[str] = frozenset({DEFAULT_DRILL_TENANT}),
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self.service, self.config, self.drill_tenants = service, config, drill_tenants
        self.options = tuple(options)
        self._tagging = tagging
        self._interceptors: dict[str, DrillClientInterceptor] = {}
        self._channels: dict[str, aio.Channel] = {}

    def __call__(self, target: str) -> aio.Channel:
        channel = self._channels.get(target)
        if channel is None:
            ic = DrillClientInterceptor(
                self._tagging,
                service=self.service,
                config=self.config,
                target=target,
                drill_tenants=self.drill_tenants,
                record_calls=False,
            )
            channel = aio.insecure_channel(target, options=self.options, interceptors=[ic])
            self._interceptors[target], self._channels[target] = ic, channel
        return channel

    def add_options(self, options: Sequence[tuple[str, Any]]) -> None:
        """More channel options (a configuration's keepalive), for every channel made from now on; a key given
        again replaces the earlier value."""
        if self._channels and options:
            raise RuntimeError("channel options are set before the first channel is made")
        keys = {k for k, _ in options}
        self.options = tuple((k, v) for k, v in self.options if k not in keys) + tuple(options)

    @property
    def tagging(self) -> Tagging:
        return self._tagging

    @tagging.setter
    def tagging(self, value: Tagging) -> None:
        self._tagging = value
        for ic in self._interceptors.values():
            ic.tagging = value

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        self._interceptors = {}
        for channel in channels:
            await channel.close()


def as_aio_error(err: grpc.RpcError) -> aio.AioRpcError:
    """A sync `grpc.RpcError` (a `grpc.Call`) as the `AioRpcError` the caller raises."""
    code = getattr(err, "code", lambda: grpc.StatusCode.UNKNOWN)()
    details = getattr(err, "details", lambda: str(err))() or ""
    trailing = getattr(err, "trailing_metadata", lambda: ())() or ()
    return rpc_error(code, details, tuple((k, v) for k, v in trailing))
