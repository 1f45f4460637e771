"""The Locust user's calls carry exactly what the harness client interceptor sends, and are counted alike.

The Locust user tags and counts its calls itself (no grpc interceptor machinery,
`loadtests/grpc_user.py`). In a gevent-patched process like Locust's, the same
call is made once through the user and once through a sync channel with
`SyncDrillClientInterceptor` (same tagging, request id and pinned wall clock;
`_tags_probe.py`), against a real server here that records what it receives: the
metadata must match key by key (request id, tenant, every directive key, the token,
the origin deadline, in order), and so must every client metric sample the call
changed (`drill_client_calls_total` with its status, traffic, fault mode, config and
injected labels, the latency and A66 counts) — for organic, quiet drill, a signed
injected abort and an actively cancelled call.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from concurrent import futures

import grpc
import pytest

from harness.core import headers as h
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from tests.conftest import ROOT

PINNED_NOW = 1_800_000_000.25
#: the calls' deadline in _tags_probe.py (both paths)
CALL_TIMEOUT_S = 10
#: The longest the server holds the `cancelled` case's call (it ends as soon as the client cancels it)
HOLD_BOUND_S = 30.0


class Recorder(drill_pb2_grpc.DemoServicer):
    """Records the metadata of every call; `fault-signed` aborts as an injected fault would, `cancelled` is held until
    its client leaves."""

    def __init__(self) -> None:
        self.received: dict[str, list[list[tuple[str, str]]]] = {}
        self._lock = threading.Lock()

    def Call(self, request, context):  # noqa: N802
        md = [(k, v) for k, v in context.invocation_metadata() if isinstance(v, str)]
        with self._lock:
            self.received.setdefault(request.payload, []).append(md)
        if request.payload == "fault-signed":
            context.set_trailing_metadata(((h.FAULT_MARKER, "abort"),))
            context.abort(grpc.StatusCode.UNAVAILABLE, "injected fault: UNAVAILABLE")
        if request.payload == "cancelled":
            # held until the client cancels it (50 ms in), not for a fixed time a stalled client could outlast
            # (it then got this answer, OK, and no CANCELLED to compare); the bound only ends a call nobody
            # cancelled, past the call's own 10-s deadline
            ended = threading.Event()
            if context.add_callback(ended.set):
                ended.wait(HOLD_BOUND_S)
        return drill_pb2.CallReply(payload=request.payload)


@pytest.fixture
def recording_server():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    servicer = Recorder()
    drill_pb2_grpc.add_DemoServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        server.stop(0)


def test_locust_calls_carry_and_count_what_the_interceptor_does(recording_server):
    target, servicer = recording_server
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "loadtests" / "_tags_probe.py"), target],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(metrics) == {"organic", "quiet-drill", "fault-signed", "cancelled"}

    for case, paths in metrics.items():
        locust_md, interceptor_md = servicer.received[case]  # one call each, Locust's first
        assert locust_md == interceptor_md, case
        assert paths["locust"] == paths["interceptor"], case
        assert any(k.startswith("drill_client_calls_total{") for k in paths["locust"]), (case, paths)

    sent = {case: dict(servicer.received[case][0]) for case in metrics}
    assert sent["organic"][h.REQUEST_ID] == "probe-organic"
    assert not {h.TENANT, h.FAULT, h.ORIGIN_DEADLINE, h.DRILL_TOKEN} & set(sent["organic"])
    assert sent["quiet-drill"][h.TENANT] == "tenant-drill" and h.FAULT not in sent["quiet-drill"]
    assert sent["quiet-drill"][h.ORIGIN_DEADLINE] == f"{PINNED_NOW + CALL_TIMEOUT_S:.3f}"
    signed = sent["fault-signed"]
    assert signed[h.FAULT] == "abort:UNAVAILABLE" and signed[h.FAULT_RATIO] == "30"
    assert (signed[h.FAULT_TARGET], signed[h.FAULT_INSTANCES]) == ("demo", "50")
    assert (signed[h.FAULT_SCOPE], signed[h.FAULT_ATTEMPTS]) == ("attempt", "2")
    assert signed[h.FAULT_METHOD] == "drill.v1.Demo/Call" and signed[h.DRILL_TOKEN].count(".") == 1

    def calls(case: str) -> str:
        (key,) = [k for k in metrics[case]["locust"] if k.startswith("drill_client_calls_total{")]
        return key

    assert "grpc_status=UNAVAILABLE" in calls("fault-signed") and "injected=true" in calls("fault-signed")
    assert "fault_mode=abort" in calls("fault-signed") and "traffic=drill" in calls("fault-signed")
    assert "grpc_status=CANCELLED" in calls("cancelled") and "injected=false" in calls("cancelled")
    assert "traffic=organic" in calls("organic") and "config=probe-config" in calls("organic")
