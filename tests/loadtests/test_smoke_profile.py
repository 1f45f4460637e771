"""The smoke profile against a real `drill serve` with the switch on (the issue's "done when").

One 20 s headless run, 50 users, no shape: both traffic classes show up in the
client-side metrics, organic traffic gets no injected fault, the drill hit share
matches the ratio, and CANCELLED is counted in its own category, never as a failure.
"""

from __future__ import annotations

from tests.loadtests.conftest import run_locust, total, unexpected_tracebacks

RATIO = 30


def test_smoke_run_separates_traffic_classes_and_hits_drill_at_the_ratio(tmp_path, drill_server):
    run = run_locust(
        tmp_path,
        drill_server.host,
        "-u", "50", "-r", "50", "-t", "20s",
        "--drill-ratio", str(RATIO),
        metrics=True,
        timeout=60,
    )  # fmt: skip
    assert run.rc == 0, run.log[-3000:]
    assert not unexpected_tracebacks(run.log), run.log[-3000:]
    client = run.scraped["local"]
    server = drill_server.metrics()
    calls = "drill_client_calls_total"

    # Both traffic classes, each well over 100 calls.
    organic = total(client, calls, traffic="organic")
    drill = total(client, calls, traffic="drill")
    assert organic > 100 and drill > 100, (organic, drill)

    # Organic traffic: untagged, all OK client-side, never faulted server-side.
    assert total(client, calls, traffic="organic", grpc_status="OK") == organic
    assert total(client, calls, traffic="organic", fault_mode="none") == organic
    assert total(server, "drill_server_calls_total", traffic="organic") > 100
    assert total(server, "drill_server_calls_total", traffic="organic", fault_mode="none") == total(
        server, "drill_server_calls_total", traffic="organic"
    )

    # Drill hits at the ratio, client-side (UNAVAILABLE among non-cancelled drill calls) and server-side.
    finished = drill - total(client, calls, traffic="drill", grpc_status="CANCELLED")
    hit_share = total(client, calls, traffic="drill", grpc_status="UNAVAILABLE") / finished
    assert abs(hit_share * 100 - RATIO) < 7, hit_share
    server_drill = total(server, "drill_server_calls_total", traffic="drill")
    server_hits = total(server, "drill_fault_hits_total", mode="abort")
    assert abs(server_hits / server_drill * 100 - RATIO) < 7, (server_hits, server_drill)

    # CANCELLED: counted apart in Locust's stats and in the metrics, never a failure.
    cancelled = run.row("grpc-cancelled", "drill/Call")
    assert cancelled is not None and int(cancelled["Request Count"]) > 0, run.stats
    assert int(cancelled["Failure Count"]) == 0
    assert total(client, calls, traffic="drill", grpc_status="CANCELLED") > 0
    assert all("CANCELLED" not in f["Error"] for f in run.failures), run.failures
    # Failures are grouped by status and origin (one row), not one traceback per request: every
    # drill failure here was injected, so it carries the x-drill-fault marker and says so.
    assert [f["Error"] for f in run.failures] == ["GrpcStatusError('UNAVAILABLE (server-fault, injected)')"]
    # The client metric splits by the marker: injected failures are the server's hits, organic has none.
    injected = total(client, calls, injected="true")
    assert injected == total(client, calls, traffic="drill", grpc_status="UNAVAILABLE", injected="true") > 0
    assert total(client, calls, traffic="drill", grpc_status="UNAVAILABLE", injected="false") == 0
    assert total(client, calls, traffic="organic", injected="false") == organic
    assert int(run.row("grpc", "organic/Call")["Failure Count"]) == 0
