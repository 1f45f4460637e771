"""The reach probe's baseline for a hop read from Prometheus: taken only from a read in which every target's last
scrape succeeded (`read_selector`'s `down` is 0).

Prometheus' answers are scripted here (`read_selector` replaced), and so is the probe's sending: what is checked is
the probe's logic, on reads test_reach_snapshot.py shows a real Prometheus gives. A target that fails its scrapes
(`up` 0) has a stale counter, so the hop's count then lacks its calls; if it stays down until the bound and answers
again after the probe, its calls from before the probe would read as counted by the probe: a false pass. The
probe must refuse to judge (exit 1), and must take a baseline once the target answers again.
"""

from __future__ import annotations

import asyncio

from harness.core.errors import DrillError
from harness.drills.plan.files import from_dict
from harness.drills.stack.edge import EdgeCall
from harness.drills.trials import reach
from harness.drills.trials.preflight import Preflight
from harness.drills.trials.reach import SelectorRead

SELECTOR = '{service="ledger"}'
PLAN = {
    "name": "baseline", "seed": 7,
    "stack": {"edge": {"address": "127.0.0.1:1", "method": "drill.v1.Demo/Call"}, "prometheus": "http://127.0.0.1:9",
              "hops": [{"name": "ledger", "selector": SELECTOR}]},
    "traffic": {"organic_users": 1, "organic_rate": 5, "drill_users": 1, "drill_rate": 5, "timeout_s": 2.0},
    "fault": {"directive": "abort:UNAVAILABLE", "ratio": 100, "target": "ledger"},
    "phases": {"warmup": 1, "fault": 1, "recovery": 1},
    "slo": {"max_error_rate": 0.5, "hold_s": 1},
}  # fmt: skip


def _probe(monkeypatch, reads_before: list[SelectorRead]) -> list[str]:
    """Run the probe against `reads_before` (then the last of them, until the bound) and, after the probe, a read in
    which the target answers and counts 40 more calls than it did before the probe; the verdicts' texts."""
    sent = []
    before = list(reads_before)

    def read_selector(url: str, selector: str) -> SelectorRead:
        if not sent:
            return before.pop(0) if len(before) > 1 else before[0]
        return SelectorRead(140.0, 1e12, 0)  # after the probe: all up, scraped later than anything

    async def send(edges, call, tags, plan, timeout_s):
        sent.append(1)
        return ["OK"] * reach.PROBE_CALLS

    async def read_gates(hop, prometheus):
        return {}

    monkeypatch.setattr(reach, "read_selector", read_selector)
    monkeypatch.setattr(reach, "send", send)
    monkeypatch.setattr(reach, "read_gates", read_gates)
    monkeypatch.setattr(reach, "scrape_wait_s", lambda url: 0.0)  # the bound: SETTLE_S
    monkeypatch.setattr(reach, "refusal", lambda hop, variant: None)
    plan = from_dict(PLAN, "baseline.yaml")
    pf = Preflight(plan, out="-", prometheus="off")
    call = EdgeCall("/drill.v1.Demo/Call", lambda request_id: b"")
    try:
        asyncio.run(reach.check_reach(pf, plan.variants[0], edges=["127.0.0.1:1"], call=call, order=["ledger"],
                                      endpoints=[], selectors={"ledger": SELECTOR},
                                      prometheus="http://127.0.0.1:9"))  # fmt: skip
    except DrillError:
        pass
    return [f"{v.status}: {v.text}" for v in pf.verdicts]


def test_a_target_failing_its_scrapes_until_the_bound_gives_no_baseline_and_the_probe_does_not_judge(monkeypatch):
    # before the probe the target is down: the hop's count (100 from the other target) lacks its calls
    verdicts = _probe(monkeypatch, [SelectorRead(100.0, None, 1)])
    assert len(verdicts) == 1 and verdicts[0].startswith("fail: reach probe: a target of hop ledger"), verdicts
    assert "failed its scrapes" in verdicts[0] and "no fault was sent" in verdicts[0]


def test_a_target_that_answers_again_before_the_bound_gives_the_baseline(monkeypatch):
    # down for one read, then up: the baseline is the read with every target (100), so the probe counted 40
    verdicts = _probe(monkeypatch, [SelectorRead(60.0, None, 1), SelectorRead(100.0, 5.0, 0)])
    assert verdicts and verdicts[-1].startswith("ok: the drill reaches the target ledger"), verdicts
    assert "ledger 40" in verdicts[-1]
