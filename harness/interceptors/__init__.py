"""gRPC interceptors: the layer between grpc and the pure fault logic.

`method_handler` builds grpc's handler of a method of any kind, cheaply, for a package
that serves methods it has no generated code for (the proxy). `backlog_options`,
`channelz_server_ids` and `watch_backlog` bound and count the calls the gRPC core holds
for a server's event loop (`_overload`: the server's limits, with the in-flight limit).
"""

from harness.interceptors._client_core import ORGANIC, CallTags, ClientRecorder, Tagging
from harness.interceptors._handlers import method_handler
from harness.interceptors._overload import backlog_options, channelz_server_ids, watch_backlog
from harness.interceptors.client_aio import DrillClientInterceptor
from harness.interceptors.client_sync import SyncDrillClientInterceptor, call_with_cancel
from harness.interceptors.server_aio import FaultServerInterceptor
from harness.interceptors.server_sync import SyncFaultServerInterceptor

__all__ = [
    "ORGANIC",
    "CallTags",
    "ClientRecorder",
    "DrillClientInterceptor",
    "FaultServerInterceptor",
    "SyncDrillClientInterceptor",
    "SyncFaultServerInterceptor",
    "Tagging",
    "backlog_options",
    "call_with_cancel",
    "channelz_server_ids",
    "method_handler",
    "server_interceptors",
    "watch_backlog",
]


def server_interceptors(settings=None, *, metrics: bool | None = None, tracer=None, sync: bool = False) -> list:
    """The interceptors to install on a server: empty when the switch is off and nothing else is asked (no
    metrics, tracer or in-flight limit).

    The recommended way to add drill harness to a service: with the process
    switch off (the default) the server runs with no interceptor at all.
    """
    from harness.core.settings import FaultSettings

    settings = settings or FaultSettings.from_env()
    if not settings.enabled and not metrics and tracer is None and not settings.max_in_flight:
        return []
    cls = SyncFaultServerInterceptor if sync else FaultServerInterceptor
    return [cls(settings, metrics=metrics, tracer=tracer)]
