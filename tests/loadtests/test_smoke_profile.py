"""The smoke profile against a real `drill serve` with the switch on (the issue's "done when").

One short headless run, 50 users, no shape: both traffic classes show up in the client-side
metrics, organic traffic gets no injected fault, the drill hits are exactly the ids the hit
function picks at the ratio (and their share is the ratio, within what the number of calls
allows), and CANCELLED is counted in its own category, never as a failure.

5 s of traffic is enough: 25 drill users at 10 calls/s each make ~1,250 drill calls (~1,000 with
two CPU hogs beside the test: a bound of ±7.5 pp), and the share's bound comes from the calls
actually made.
"""

from __future__ import annotations

import math

from harness.core.faults import is_hit
from harness.drills.load.locust import read_tagged_ids
from harness.drills.stack.topology import audit_hit_ids
from tests.loadtests.conftest import run_locust, total, unexpected_tracebacks

RATIO = 30
DIRECTIVE = "abort:UNAVAILABLE"  # the smoke profile's
SERVER_SEED = 7  # the drill_server fixture's
#: Standard deviations of the binomial bound: a share outside it has probability < 6e-7 per check.
Z = 5.0


#: Calls from which the share's bound is below the ratio itself: Z·sqrt(p(1−p)/n) < p ⇔ n > Z²(1−p)/p (58.3).
MIN_SHARE_CALLS = 59


def _binomial_bound(n: float) -> float:
    """How far the hit share of n calls may lie from the ratio. Each drill call's id is hit when its hash
    bucket (uniform over 0…99, `harness.core.faults.hit_bucket`) is below the ratio: n Bernoulli(p) draws
    with p = RATIO/100, so the share has standard deviation sqrt(p(1−p)/n); Z of them."""
    p = RATIO / 100
    return Z * math.sqrt(p * (1 - p) / n)


def test_smoke_run_separates_traffic_classes_and_hits_drill_at_the_ratio(tmp_path, drill_server):
    ids_dir = tmp_path / "ids"
    run = run_locust(
        tmp_path,
        drill_server.host,
        "-u", "50", "-r", "50", "-t", "5s",
        "--drill-ratio", str(RATIO), "--drill-ids-dir", str(ids_dir),
        metrics=True,
        timeout=60,
    )  # fmt: skip
    assert run.rc == 0, run.log[-3000:]
    assert not unexpected_tracebacks(run.log), run.log[-3000:]
    client = run.scraped["local"]
    server = drill_server.metrics()
    calls = "drill_client_calls_total"

    # Both traffic classes. Every check below is exact but the share's, whose bound narrows with the calls made:
    # from MIN_SHARE_CALLS on it excludes a drill that never hits (and, with fewer, one that always does).
    organic = total(client, calls, traffic="organic")
    drill = total(client, calls, traffic="drill")
    assert organic > 0 and drill > 0, (organic, drill)

    # Organic traffic: untagged, all OK client-side, never faulted server-side.
    assert total(client, calls, traffic="organic", grpc_status="OK") == organic
    assert total(client, calls, traffic="organic", fault_mode="none") == organic
    assert total(server, "drill_server_calls_total", traffic="organic") > 0
    assert total(server, "drill_server_calls_total", traffic="organic", fault_mode="none") == total(
        server, "drill_server_calls_total", traffic="organic"
    )

    # The hits are exactly the ids the hit function picks: every id the server audited as hit was sent with
    # the directive and is a hit at the ratio (a predicted hit it never saw was cancelled before it arrived,
    # or still in flight when the run stopped).
    tagged = set(read_tagged_ids(ids_dir))
    predicted = {i for i in tagged if is_hit(SERVER_SEED, i, DIRECTIVE, RATIO)}
    audited = audit_hit_ids(tmp_path)
    assert audited and audited <= predicted, (len(audited), len(predicted), sorted(audited - predicted)[:5])
    # And their share is the ratio, client-side (UNAVAILABLE among non-cancelled drill calls) and server-side.
    finished = drill - total(client, calls, traffic="drill", grpc_status="CANCELLED")
    assert finished >= MIN_SHARE_CALLS, finished
    hit_share = total(client, calls, traffic="drill", grpc_status="UNAVAILABLE") / finished
    assert abs(hit_share - RATIO / 100) <= _binomial_bound(finished), (hit_share, finished)
    server_drill = total(server, "drill_server_calls_total", traffic="drill")
    server_hits = total(server, "drill_fault_hits_total", mode="abort")
    assert abs(server_hits / server_drill - RATIO / 100) <= _binomial_bound(server_drill), (server_hits, server_drill)
    bound = _binomial_bound(finished)
    print(
        f"\n{drill:.0f} drill calls; hit share {hit_share:.3f} of {finished:.0f} (bound ±{bound:.3f}); "
        f"server {server_hits:.0f}/{server_drill:.0f}; audited hits {len(audited)} of {len(predicted)} predicted"
    )

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
