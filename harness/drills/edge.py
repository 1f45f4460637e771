"""What the load calls at the edge: a full method name and how to build each request's bytes.

The load never needs a generated stub: it calls `channel.unary_unary(method)` (or
`unary_stream`) with serialized bytes and ignores the reply's content, as ghz and
grpcurl do. `demo_edge` builds the demo topology's `drill.v1.Demo` call (the request
id as payload, so a reply shows which request it answers); `harness.drills.stacks`
builds a stack's from a JSON body typed by a `.proto`, a descriptor set or server
reflection.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from harness.demo.downstream import DEMO_SERVICE
from harness.demo.proto import drill_pb2


@dataclasses.dataclass(frozen=True)
class EdgeCall:
    """`method` is `/pkg.Service/Method`; `request(request_id)` returns the serialized request."""

    method: str
    request: Callable[[str], bytes]
    #: server-streaming (the demo's Stream): the load reads the stream to its end
    streaming: bool = False


def demo_edge(method: str) -> EdgeCall:
    """The demo's `Call`, `Write` or `Stream`, with the request id as the payload."""

    def request(rid: str) -> bytes:
        return drill_pb2.CallRequest(payload=rid).SerializeToString()

    return EdgeCall(f"/{DEMO_SERVICE}/{method}", request, streaming=method == "Stream")


def constant_edge(method: str, body: bytes) -> EdgeCall:
    """A stack's edge: the same serialized request for every call (the request id travels in metadata)."""
    method = method if method.startswith("/") else "/" + method
    return EdgeCall(method, lambda _rid: body)
