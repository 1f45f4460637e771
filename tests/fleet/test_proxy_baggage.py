"""`drill proxy` reads the drill from baggage too: a chain of no Python service, client → Node hop (OpenTelemetry,
no x-* forwarded) → `drill proxy` (the target, injection on) → Go leaf. The proxy hits exactly the ids
`drill hits` predicts; the leaf's own log counts the calls that reached it: every one the proxy did not abort."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid

from grpc import aio
from prometheus_client.parser import text_string_to_metric_families

from harness.core import headers as h
from harness.demo.proto import drill_pb2
from harness.interceptors import Tagging
from tests.conftest import ROOT
from tests.fleet import hops
from tests.fleet.test_propagation import CALLS, DIRECTIVE, RATIO, SEED, predicted
from tests.interceptors.servers import aio_stub
from tests.proxy.probe import drill_proxy

PROTO = ROOT / "harness" / "demo" / "proto" / "drill.proto"


def metric(metrics_port: int, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    return sum(
        s.value for family in text_string_to_metric_families(text) for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )  # fmt: skip


def test_drill_proxy_behind_a_node_hop_hits_from_baggage_and_the_go_leaf_does_the_rest(built, tmp_path):
    with hops.gohop(tmp_path, "leaf", "-work-ms", "1", "-concurrency", "8", "-queue", "64") as leaf:
        args = ("--upstream", f"127.0.0.1:{leaf}", "--port", "0", "--metrics-port", "-1", "--service", "ledger",
                "--enable-faults", "--seed", str(SEED), "--proto", str(PROTO))  # fmt: skip
        with drill_proxy(tmp_path, *args) as (_, info):
            with hops.nodehop(tmp_path, "node", "--upstream", f"127.0.0.1:{info['port']}") as node:

                async def main() -> dict[str, str]:
                    tagging = Tagging(tenant="tenant-drill", directive=DIRECTIVE, ratio=RATIO, target="ledger")
                    out = {}
                    async with aio_stub(node, tagging) as stub:
                        for _ in range(CALLS):
                            rid = str(uuid.uuid4())
                            try:
                                await stub.Call(drill_pb2.CallRequest(), metadata=((h.REQUEST_ID, rid),), timeout=10)
                                out[rid] = "OK"
                            except aio.AioRpcError as err:
                                out[rid] = err.code().name
                    return out

                outcomes = asyncio.run(main())
            port = info["metrics_port"]
            hits = metric(port, "drill_fault_hits_total", service="ledger", mode="abort")
            drill_calls = metric(port, "drill_server_calls_total", service="ledger", traffic="drill")
    hit = predicted(list(outcomes))
    assert 0 < len(hit) < CALLS
    assert {rid for rid, code in outcomes.items() if code == "UNAVAILABLE"} == hit
    assert {code for rid, code in outcomes.items() if rid not in hit} == {"OK"}
    assert (hits, drill_calls) == (len(hit), CALLS)
    reached = hops.log_lines(tmp_path, "leaf")
    assert sorted(line["request_id"] for line in reached if line["code"] == "OK") == sorted(set(outcomes) - hit)
