"""Calls a hop refused at its own limits (`--max-in-flight`: RESOURCE_EXHAUSTED; `--max-backlog`: CANCELLED, which
no error rate counts) are read from its /metrics and said under the results: a trial whose hop was full measures
that process as much as the fault, and an SLO that held there must not read as the configuration's doing."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from harness.core import metrics as m
from harness.drills.analysis import results as res
from harness.drills.analysis import trial as a
from harness.drills.analysis.traffic import refused_by_hop
from harness.drills.plan.outputs import SeriesKey as K
from harness.drills.readings.series import reduce_families
from tests.drills.synth import make_series

SLO = a.Slo(max_error_rate=0.05, hold_s=3)


def test_both_limits_counters_are_one_refused_series_per_hop():
    text = (
        f"# TYPE {m.SERVER_REFUSED._name} counter\n"
        f'{m.SERVER_REFUSED._name}_total{{service="ledger",grpc_method="/x.Y/Z",reason="in_flight"}} 7\n'
        f'{m.SERVER_REFUSED._name}_total{{service="ledger",grpc_method="/x.Y/W",reason="in_flight"}} 3\n'
        f"# TYPE {m.SERVER_BACKLOG_REFUSED_NAME} counter\n"
        f'{m.SERVER_BACKLOG_REFUSED_NAME}_total{{service="ledger"}} 90\n'
        f'{m.SERVER_BACKLOG_REFUSED_NAME}_total{{service="gateway"}} 0\n'
    )
    snap = reduce_families(text_string_to_metric_families(text))
    assert snap[K("refused", "ledger")] == 100.0 and snap[K("refused", "gateway")] == 0.0


def test_a_hop_that_refused_calls_is_named_under_the_results_with_its_trials_and_count():
    full = make_series([0.0] * 40, config="naive")
    full.values[K("refused", "ledger")] = [0.0] * 10 + [12.5] * 8 + [0.0] * 22  # per-second rates: 100 calls
    quiet = make_series([0.0] * 40, config="naive")
    quiet.values[K("refused", "ledger")] = [0.0] * 40  # the counter is there, nothing refused
    ahead = make_series([0.0] * 40, config="naive")  # the backlog's count ran ahead by calls on their way at scrapes
    ahead.values[K("refused", "ledger")] = [1.0] * 3 + [0.0] * 37
    few = make_series([0.0] * 40, config="naive", hops={"gateway": [100.0] * 40, "ledger": [100.0] * 40})
    few.values[K("refused", "ledger")] = [0.0] * 10 + [3.0] * 10 + [0.0] * 20  # 30 of 4,000 calls: under 1 %
    assert refused_by_hop(full) == {"ledger": 100.0}
    assert refused_by_hop(quiet) == refused_by_hop(ahead) == refused_by_hop(few) == {}
    out = res.assemble({"naive": [quiet, full], "budget": [make_series([0.0] * 40, config="budget")]}, SLO,
                       ["gateway", "ledger"])  # fmt: skip
    said = [n for n in out.notes if "own limits" in n]
    assert said == [
        "naive: hop ledger refused 100 calls at its own limits in trial 2 (its in-flight limit answers "
        "RESOURCE_EXHAUSTED, its core backlog CANCELLED, which no error rate counts): its process was full, so "
        "those trials measure it as much as the fault; give it more room (--max-in-flight, --max-backlog, "
        "--workers) or less load"
    ], out.notes
