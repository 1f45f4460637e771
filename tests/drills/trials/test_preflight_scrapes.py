"""The preflight's check of a hop read from Prometheus when a target's last scrape failed (`up` 0).

Prometheus' answers are scripted here (`api_get` replaced): what is checked is the check's logic. A scrape that
times out on a busy host reads as the target down until the next scrape, and meanwhile its `drill_fault_switch`
series is stale. One failed scrape alone must not be what the check reports: a CI run's dry run printed
"ok  hop order: ... 1 target in ..., 0 up" (an ok for a hop it could not read). The check waits for the next scrape
(bounded by one scrape interval and a second); a hop with no target answering by then cannot be judged (exit 1 when
the fault needs it), and one with some targets still failing is a warning.
"""

from __future__ import annotations

import pytest

from harness.core.errors import DrillError
from harness.drills.plan.files import from_dict
from harness.drills.readings import scrapes
from harness.drills.trials.preflight import Preflight
from harness.procs import prometheus

URL = "http://127.0.0.1:9"
PLAN = {
    "name": "scrapes", "seed": 7,
    "stack": {"edge": {"address": "127.0.0.1:1", "method": "drill.v1.Demo/Call"}, "prometheus": URL,
              "hops": [{"name": "gateway", "selector": '{service="gateway"}'},
                       {"name": "ledger", "selector": '{service="ledger"}'}]},
    "traffic": {"organic_users": 1, "organic_rate": 5, "drill_users": 1, "drill_rate": 5, "timeout_s": 2.0},
    "fault": {"directive": "abort:UNAVAILABLE", "ratio": 100, "target": "gateway"},
    "phases": {"warmup": 1, "fault": 1, "recovery": 1},
    "slo": {"max_error_rate": 0.5, "hold_s": 1},
}  # fmt: skip


def _series(*values: str) -> list[dict]:
    return [{"metric": {"instance": f"10.0.0.{i}:9464"}, "value": [1.0, v]} for i, v in enumerate(values)]


def _check(monkeypatch, hop: str, ups: list[list[str]], wait_s: float = 30.0) -> tuple[list[str], list[str]]:
    """The check of `hop` while Prometheus answers `up{...}` with `ups` in turn (the last one for good) and every
    answering target's switch is on; its verdicts and the progress lines it said."""
    answers = list(ups)

    def api_get(url, path, params, timeout_s):
        query = dict(params)["query"]
        if query.startswith("up{"):
            return {"result": _series(*(answers.pop(0) if len(answers) > 1 else answers[0]))}
        assert query.startswith("drill_fault_switch{"), query
        current = answers[0]
        return {"result": _series(*(["1"] * sum(1 for v in current if v == "1")))}  # a down target's is stale

    monkeypatch.setattr(prometheus, "api_get", api_get)
    monkeypatch.setattr(scrapes, "scrape_wait_s", lambda url, timeout_s: wait_s)
    monkeypatch.setattr("time.sleep", lambda s: None)
    plan = from_dict(PLAN, "scrapes.yaml")
    said: list[str] = []
    pf = Preflight(plan, out="-", prometheus="off", dry=True, say=said.append)
    index = [h.name for h in plan.stack.hops].index(hop)
    try:
        pf._hop_selector(hop, index, plan.stack.hops[index].selector, list(plan.variants), 0.0)
    except DrillError:
        pass
    return [f"{v.status}: {v.text}" for v in pf.verdicts], said


def test_one_failed_scrape_is_waited_out_and_the_check_reads_the_next(monkeypatch):
    verdicts, said = _check(monkeypatch, "gateway", [["0"], ["1"]])
    assert verdicts == [f'ok: hop gateway: {{service="gateway"}}: 1 target in {URL}, 1 up'], verdicts
    assert any("1 of 1 target failed the last scrape; waiting for the next (at most 30 s" in s for s in said), said


def test_a_hop_that_must_inject_and_answers_no_scrape_by_the_bound_cannot_be_judged(monkeypatch):
    verdicts, _ = _check(monkeypatch, "gateway", [["0"]], wait_s=0.0)
    assert len(verdicts) == 1 and verdicts[0].startswith("fail: hop gateway: "), verdicts
    assert "0 up: no target answered its scrapes" in verdicts[0] and "the hop that injects" in verdicts[0]
    assert "nothing was sent" in verdicts[0]


@pytest.mark.parametrize(("ups", "expect"), [
    ([["0", "0"]], "2 targets in http://127.0.0.1:9, 0 up: no target answered its scrapes"),
    ([["1", "0"]], "2 targets in http://127.0.0.1:9, 1 up: 1 failed its scrapes for a scrape interval"),
])  # fmt: skip
def test_a_hop_behind_the_target_still_failing_its_scrapes_is_a_warning(monkeypatch, ups, expect):
    verdicts, _ = _check(monkeypatch, "ledger", ups, wait_s=0.0)
    assert len(verdicts) == 1 and verdicts[0].startswith("warn: hop ledger: ") and expect in verdicts[0], verdicts
