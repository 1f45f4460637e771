"""Run by test_locust_tags.py in a Locust-like (gevent-patched) process: the same calls two ways.

    python tests/loadtests/_tags_probe.py HOST:PORT

For each case, one call through the Locust user (`DrillUser.call`) and one through
a sync channel carrying the harness client interceptor, with the same tagging and
request id and the wall clock pinned. Prints one JSON object: per case and path,
the client metric samples the call changed. The server records what it received.
"""

from __future__ import annotations

import json
import pathlib
import sys
import types

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import locust  # noqa: E402,F401,I001  (first: patches like a Locust process, gevent everywhere)
from locust.env import Environment  # noqa: E402

import gevent  # noqa: E402
import grpc  # noqa: E402
from prometheus_client import REGISTRY  # noqa: E402

from harness.demo.proto import drill_pb2, drill_pb2_grpc  # noqa: E402
from harness.interceptors import ORGANIC, SyncDrillClientInterceptor, Tagging, _client_core  # noqa: E402
from harness.interceptors.client_sync import call_with_cancel  # noqa: E402
from loadtests.users import DrillUser  # noqa: E402

CONFIG = "probe-config"
TENANT = "tenant-drill"
CASES = {
    "organic": (ORGANIC, None),
    "quiet-drill": (Tagging(tenant=TENANT), None),
    "fault-signed": (
        Tagging(
            tenant=TENANT, directive="abort:UNAVAILABLE", ratio=30, target="demo", instances=50,
            scope="attempt", attempts=2, secret="s3cret",
        ),
        None,
    ),  # fmt: skip
    "cancelled": (Tagging(tenant=TENANT, directive="delay:1000"), 50.0),
}


def client_samples() -> dict[str, float]:
    """Every client-side sample of the registry: {name{labels}: value}."""
    out = {}
    for family in REGISTRY.collect():
        for s in family.samples:
            if s.name.startswith(("drill_client_", "grpc_client_")):
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}"] = s.value
    return out


def changed(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Samples whose value changed, with the change (histogram sums excluded: they carry the latency)."""
    return {
        k: round(after[k] - before.get(k, 0.0), 6)
        for k in after
        if after[k] != before.get(k, 0.0) and "_sum{" not in k and "_bucket{" not in k
    }


def main() -> None:
    target = sys.argv[1]
    _client_core.wall_clock = lambda: 1_800_000_000.25  # both paths see the same time
    ns = types.SimpleNamespace(drill_tenant=TENANT, drill_config=CONFIG, drill_timeout=10, drill_rate=0)
    env = Environment(user_classes=[DrillUser], parsed_options=ns, host=target)
    user = DrillUser(env)
    user.on_start()
    interceptor = SyncDrillClientInterceptor(
        ORGANIC, service="locust", config=CONFIG, target=target, drill_tenants=frozenset({TENANT})
    )
    stub = drill_pb2_grpc.DemoStub(grpc.intercept_channel(grpc.insecure_channel(target), interceptor))
    result = {}
    for case, (tagging, cancel_ms) in CASES.items():
        rid = f"probe-{case}"
        request = drill_pb2.CallRequest(payload=case)
        before = client_samples()
        user.tagging = tagging
        user.call("Call", request, cancel_after_ms=cancel_ms, request_id=rid)
        mid = client_samples()
        interceptor.tagging = tagging
        metadata = ((_client_core.h.REQUEST_ID, rid),)
        try:
            if cancel_ms is not None:
                call_with_cancel(stub.Call, request, cancel_ms, timeout=10, metadata=metadata)
            else:
                stub.Call.with_call(request, timeout=10, metadata=metadata)
        except grpc.RpcError:
            pass
        after = client_samples()
        # a cancelled future is counted when its last event arrives, after result(); at most 10 s (a busy box's stalls
        # are 1-2 s), and both paths' deadlines are 10 s so that a stall before the 50-ms cancel cannot end the call
        # at its deadline instead
        for _ in range(1000):
            if any(k.startswith("drill_client_calls_total{") for k in changed(mid, after)):
                break
            gevent.sleep(0.01)
            after = client_samples()
        result[case] = {"locust": changed(before, mid), "interceptor": changed(mid, after)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
