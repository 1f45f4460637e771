"""gRPC interceptors: the layer between grpc and the pure fault logic."""

from harness.interceptors._client_core import ORGANIC, ClientRecorder, Tagging
from harness.interceptors.client_aio import DrillClientInterceptor
from harness.interceptors.client_sync import SyncDrillClientInterceptor, call_with_cancel
from harness.interceptors.server_aio import FaultServerInterceptor
from harness.interceptors.server_sync import SyncFaultServerInterceptor

__all__ = [
    "ORGANIC",
    "ClientRecorder",
    "DrillClientInterceptor",
    "FaultServerInterceptor",
    "SyncDrillClientInterceptor",
    "SyncFaultServerInterceptor",
    "Tagging",
    "call_with_cancel",
]
