"""Guards on synthetic per-second series: each kind trips where its definition says, the runner's per-second
watch finds what the whole series says, a tripped configuration never wins, and a trip skips later trials.

Synthetic series (tests/drills/synth.py) have one sample per second at t = 1..n, sample t covering (t−1, t],
and the trial's first second as t = 0: trial time = t. Every expected trip time below is derived from the
guard's definition (harness/drills/trials/guard.py), not observed.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from harness.core.errors import GuardTripped
from harness.drills.analysis import trial as analysis
from harness.drills.analysis.gate import parse_conditions
from harness.drills.analysis.results import assemble, config_entry
from harness.drills.analysis.verdict import judge
from harness.drills.plan.files import PlanError, from_dict
from harness.drills.plan.guards import Guard
from harness.drills.plan.outputs import SeriesKey
from harness.drills.plan.sections import Slo
from harness.drills.readings.series import RunSeries
from harness.drills.trials import guard as g
from harness.drills.trials.runner import Runner
from tests.drills.synth import make_series, rates

SLO = Slo(max_error_rate=0.05, hold_s=3, traffic="organic")


def guard(**condition) -> Guard:
    return Guard(stop_when=[condition])


def first(series: RunSeries, **condition) -> g.Trip | None:
    return g.first_trip(guard(**condition), series, SLO)


# --- each kind trips within its window -------------------------------------------------------------------
def test_error_rate_trips_at_the_last_of_for_s_bad_seconds_and_not_before():
    s = make_series(rates({(12, 20): 0.3}))
    trip = first(s, kind="error_rate", above=0.2, for_s=3)
    assert trip is not None and trip.tripped_at_s == 14.0 and trip.value == pytest.approx(0.3)  # seconds 12, 13, 14
    assert trip.name == "error_rate" and "organic error rate 30.0% > 20% for 3 s" == trip.text
    assert first(s, kind="error_rate", above=0.2, for_s=9).tripped_at_s == 20.0  # 12..20: exactly nine
    assert first(s, kind="error_rate", above=0.2, for_s=10) is None  # one short
    assert first(s, kind="error_rate", above=0.3, for_s=1) is None  # "above": 30 % is not above 30 %
    # two-second spikes never make three in a row; one good second resets the count
    spikes = make_series(rates({(10, 11): 0.9, (13, 14): 0.9, (16, 17): 0.9}))
    assert first(spikes, kind="error_rate", above=0.2, for_s=3) is None
    assert first(spikes, kind="error_rate", above=0.2, for_s=2).tripped_at_s == 11.0


def test_error_rate_reads_its_own_traffic_class_and_unknown_seconds_break_a_run():
    s = make_series(rates({(12, 20): 0.3}))
    for key in s.select("calls", traffic="organic", status="UNAVAILABLE"):  # only the drill's calls fail
        s.values[key] = [0.0] * len(s.t)
    assert first(s, kind="error_rate", above=0.2, for_s=3) is None  # organic, the default
    assert first(s, kind="error_rate", above=0.2, for_s=3, traffic="drill").tripped_at_s == 14.0
    # a second with fewer calls than the SLO's min_calls is unknown: neither bad nor good
    gap = make_series([0.0] * 11 + [0.3, None, 0.3, 0.3] + [0.0] * 25)
    assert first(gap, kind="error_rate", above=0.2, for_s=3) is None
    assert first(gap, kind="error_rate", above=0.2, for_s=2).tripped_at_s == 15.0


def test_burn_rate_trips_when_both_windows_burn_faster_than_the_bound():
    # 30 % errors against a 5 % budget is a 6× burn each bad second; over the last 12 s, k bad seconds burn
    # k × 0.3 / 12 / 0.05 = k / 2 ×: above 2× once k = 5, at t = 16 (bad from 12). The 1-s window burns 6×.
    s = make_series(rates({(12, 30): 0.3}))
    trip = first(s, kind="burn_rate", above=2, long_s=12, short_s=1)
    assert trip is not None and trip.tripped_at_s == 16.0 and trip.value == pytest.approx(2.5)
    assert "burning 2.5× over 12 s and 6.0× over 1 s (> 2×)" in trip.text
    # the long window keeps one bad second from tripping: 100 % errors for 1 s burn 20× over 1 s, 1.7× over 12 s
    blip = make_series(rates({(12, 12): 1.0}))
    assert first(blip, kind="burn_rate", above=2, long_s=12, short_s=1) is None
    assert first(blip, kind="burn_rate", above=2, long_s=8, short_s=1).tripped_at_s == 12.0  # 2.5× over 8 s
    # the short window clears a trip as soon as the errors stop (the workbook's reason for it)
    past = make_series(rates({(5, 9): 1.0}))
    trip = first(past, kind="burn_rate", above=1, long_s=30, short_s=3)
    assert trip.tripped_at_s == 5.0  # long: 1 of 5 seconds at 20× = 4×; short: 3 s window, 1 bad = 6.7×
    assert g.evaluate(guard(kind="burn_rate", above=1, long_s=30, short_s=3).stop_when[0], past, SLO, 12, 13.0) is None


def test_burn_rate_counts_bad_calls_as_the_trials_budget_burn_does():
    # with a latency SLO, slow successes are bad calls too (harness.drills.analysis.impact): 40 % of calls slower
    # than 1 s
    slo = Slo(max_error_rate=0.05, max_p99_s=1.0, traffic="organic")
    s = make_series([0.0] * 40, slow=[0.0] * 11 + [0.4] * 29)
    # each slow second burns 0.4 / 0.05 = 8×; over the last 5 s, k slow seconds burn 1.6·k×: above 4× at k = 3
    trip = g.first_trip(guard(kind="burn_rate", above=4, long_s=5, short_s=1), s, slo)
    assert trip is not None and trip.tripped_at_s == 14.0 and trip.value == pytest.approx(4.8)
    assert g.first_trip(guard(kind="burn_rate", above=4, long_s=5, short_s=1), s, SLO) is None  # no latency SLO


def test_wall_clock_trips_at_the_first_sample_that_ends_at_or_after_its_bound():
    s = make_series([0.0] * 40)
    assert first(s, kind="wall_clock", after_s=15).tripped_at_s == 15.0
    assert first(s, kind="wall_clock", after_s=14.5).tripped_at_s == 15.0
    assert first(s, kind="wall_clock", after_s=41) is None
    assert g.first_trip(guard(kind="wall_clock", after_s=15), s, SLO, start_t=5.0).tripped_at_s == 15.0  # t = 20


def test_conditions_are_asked_in_plan_order_and_the_first_trip_wins():
    s = make_series(rates({(12, 20): 0.3}))
    both = Guard(stop_when=[{"kind": "wall_clock", "after_s": 14}, {"kind": "error_rate", "above": 0.2}])
    assert g.first_trip(both, s, SLO).name == "wall_clock"
    later = Guard(stop_when=[{"kind": "wall_clock", "after_s": 15}, {"kind": "error_rate", "above": 0.2}])
    assert g.first_trip(later, s, SLO).name == "error_rate"


# --- the runner's watch reads the same series --------------------------------------------------------------
def cumulative(series: RunSeries) -> list[tuple[float, dict]]:
    """The scraper's samples that give `series`: cumulative counters, a baseline at t = 0."""
    total: dict[SeriesKey, float] = {}
    out = [(0.0, {k: 0.0 for k in series.values})]
    for i, t in enumerate(series.t):
        for k, vs in series.values.items():
            if k.is_gauge:
                total[k] = vs[i] or 0.0
            elif vs[i] is not None:
                total[k] = total.get(k, 0.0) + vs[i]
        out.append((t, dict(total)))
    return out


@pytest.mark.parametrize(
    "condition",
    [
        {"kind": "error_rate", "above": 0.2, "for_s": 3},
        {"kind": "burn_rate", "above": 2, "long_s": 12, "short_s": 1},
        {"kind": "burn_rate", "above": 1, "long_s": 36, "short_s": 3},
        {"kind": "wall_clock", "after_s": 17},
    ],
)
def test_the_per_second_watch_trips_where_the_whole_series_does(condition):
    s = make_series(rates({(12, 14): 0.5, (18, 30): 0.3}))
    expected = g.first_trip(guard(**condition), s, SLO)
    samples = cumulative(s)
    watch = g.GuardWatch(guard(**condition), SLO, start_t=0.0)
    found = next((trip for k in range(2, len(samples) + 1) if (trip := watch.check(samples[:k])) is not None), None)
    assert expected is not None and found == expected


# --- the verdict -------------------------------------------------------------------------------------------
def results(trips: dict[str, list[bool]], specs: dict[str, list[dict]]) -> dict:
    series = {}
    for name, per in specs.items():
        series[name] = []
        for spec, tripped in zip(per, trips.get(name, [False] * len(per)), strict=True):
            s = make_series(rates(spec) if spec is not None else [None] * 40, config=name)
            s.guard = {"name": "error_rate", "kind": "error_rate", "tripped_at_s": 12.0, "value": 0.5, "limit": 0.2,
                       "text": "organic error rate 50.0% > 20% for 3 s"} if tripped else None  # fmt: skip
            series[name].append(s)
    return assemble(series, SLO, ["gateway", "ledger"], plan_name="synthetic").model_dump()


def test_a_tripped_configuration_is_worse_on_impact_and_the_other_wins():
    # the guard stopped naive's fault in its one trial: its numbers end where its fault was stopped
    r = results({"naive": [True]}, {"naive": [{(11, 13): 0.5}], "resilient": [{}]})
    v = r["verdict"]
    assert v["winner"] == "resilient" and r["ranking"] == ["resilient", "naive"]
    (c,) = v["comparisons"]
    assert c["better"] == ["guard"] and c["worse"] == [] and c["guard_trips"] == [[0, 1], [1, 1]]
    assert v["text"].startswith("resilient is best: no guard stopped it, and one stopped naive (vs naive: stopped "
                                "by a guard in 0/1 vs 1/1 trials, breaches")  # fmt: skip
    assert "a configuration a guard stopped counts as worse on impact and never wins" in v["text"].lower()
    assert r["configs"]["naive"]["summary"]["guard_trips"] == 1


def test_a_tripped_configuration_never_wins_even_with_better_numbers():
    # naive's trial tripped (say a wall-clock cap) although the SLO held; resilient breached every time
    r = results({"naive": [True, False, False]}, {"naive": [{}, {}, {}], "resilient": [{(11, 30): 0.9}] * 3})
    assert r["verdict"]["winner"] == "resilient" and r["ranking"][0] == "resilient"
    (c,) = r["verdict"]["comparisons"]
    assert c["config"] == "resilient" and c["outcome"] == "better" and c["better"] == ["guard"]


def test_a_tripped_configuration_without_data_is_judged_not_set_aside():
    r = results({"naive": [True]}, {"naive": [None], "resilient": [{}]})
    v = r["verdict"]
    assert "naive" not in v["set_aside"] and v["winner"] == "resilient"
    assert r["configs"]["naive"]["summary"]["valid_trials"] == 0


def test_when_a_guard_stopped_every_configuration_none_is_best():
    r = results({"naive": [True], "budget": [True]}, {"naive": [{(11, 20): 0.5}], "budget": [{(11, 13): 0.5}]})
    v = r["verdict"]
    assert v["winner"] is None and v["kind"] == "guard"
    assert v["text"].startswith("No configuration is best: a guard stopped every one (")
    solo = results({"naive": [True]}, {"naive": [{(11, 20): 0.5}]})["verdict"]
    assert solo["winner"] is None and solo["text"].startswith("naive: a guard stopped 1 of 1 trials; breached")


def test_no_draw_of_trials_makes_a_tripped_configuration_the_winner():
    rng = random.Random(5)
    shapes = [{}, {(11, 13): 0.5}, {(11, 20): 0.2}, {(11, 30): 0.9}, {(11, 40): 0.6}, None]
    analysed = [analysis.analyze_run(make_series(rates(s) if s is not None else [None] * 40), SLO, None).to_dict()
                for s in shapes]  # fmt: skip
    trip = {"name": "wall_clock", "kind": "wall_clock", "tripped_at_s": 12.0, "value": 12.0, "limit": 12.0,
            "text": "the trial ran 12 s (≥ 12 s)"}  # fmt: skip
    winners = 0
    for _ in range(80):
        names = ["a", "b", "c"][: rng.randint(2, 3)]
        n = rng.randint(1, 5)
        trips = {name: [rng.random() < 0.2 for _ in range(n)] for name in names}
        configs = {name: config_entry([{"trial": k + 1, **rng.choice(analysed), **({"guard": trip} if t else {})}
                                       for k, t in enumerate(ts)]) for name, ts in trips.items()}  # fmt: skip
        ranking, verdict = judge(configs)
        r = {"ranking": ranking, "verdict": verdict}
        winner = r["verdict"]["winner"]
        winners += winner is not None
        tripped = {name for name, ts in trips.items() if any(ts)}
        assert winner not in tripped, (trips, r["verdict"]["text"])
        untripped = [name for name in r["ranking"] if name not in tripped and name not in r["verdict"]["set_aside"]]
        assert r["ranking"][: len(untripped)] == untripped  # untripped first
    assert winners > 5  # the draw does reach winners: the assertion above is not vacuous


def test_a_trip_is_exit_5_with_one_line_naming_it_and_the_fail_on_conditions_that_held_too():
    r = results({"naive": [True]}, {"naive": [{(11, 20): 0.5}], "resilient": [{}]})
    g.check_trips(results({}, {"resilient": [{}]}))  # no trip: nothing raised
    with pytest.raises(GuardTripped) as caught:
        g.check_trips(r, parse_conditions(["breach", "budget>1000"]))
    assert caught.value.exit_code == 5
    text = str(caught.value)
    assert text == ("guard stopped the drill: naive trial 1: error_rate at 12 s (organic error rate 50.0% > 20% "
                    "for 3 s) (fail-on breach held too)")  # fmt: skip


# --- the plan ------------------------------------------------------------------------------------------------
BASE = {"topology": {"hops": [{"name": "gateway"}]}}


@pytest.mark.parametrize(
    ("guard_spec", "message"),
    [
        ({"stop_when": []}, "guard.stop_when: List should have at least 1 item"),
        ({"stop_when": [{"kind": "error_rate", "above": 1.5}]}, "guard.stop_when.0.error_rate.above: Input should be"),
        ({"stop_when": [{"kind": "errors", "above": 0.5}]}, "Input tag 'errors' found using 'kind' does not match"),
        ({"stop_when": [{"kind": "burn_rate", "above": 2, "long_s": 3, "short_s": 12}]}, "must not exceed long_s"),
        ({"stop_when": [{"kind": "wall_clock", "after_s": 5}, {"kind": "wall_clock", "after_s": 9}]},
         "guard names must be unique (a kind used twice needs a name each): ['wall_clock']"),
        ({"stop_when": [{"kind": "error_rate", "above": 0.5}], "after_trip": "retry"}, "guard.after_trip: Input"),
    ],
)
def test_a_bad_guard_is_refused_with_its_key_path(guard_spec, message):
    with pytest.raises(PlanError) as caught:
        from_dict({**BASE, "guard": guard_spec})
    assert message in str(caught.value)


def test_guards_that_cannot_see_are_refused_before_anything_starts():
    with pytest.raises(PlanError, match="a burn rate needs an error budget"):
        from_dict({**BASE, "slo": {"max_error_rate": 0}, "guard": {"stop_when": [{"kind": "burn_rate", "above": 1}]}})
    stack = {"edge": {"address": "127.0.0.1:1", "method": "a.B/C"}, "prometheus": "http://127.0.0.1:9",
             "hops": [{"name": "gateway", "selector": '{a="b"}'}],
             "load": {"command": "true", "selector": '{job="load"}'}}  # fmt: skip
    with pytest.raises(PlanError, match="cannot be watched while it runs"):
        from_dict({"stack": stack, "guard": {"stop_when": [{"kind": "error_rate", "above": 0.5}]}})
    plan = from_dict({**BASE, "guard": {"stop_when": [{"kind": "prometheus", "expr": "up == 0"}]}})
    with pytest.raises(Exception, match="a prometheus guard needs a Prometheus to ask") as caught:
        g.prometheus_guards(plan, None)
    assert caught.value.exit_code == 2
    assert g.prometheus_guards(plan, "http://127.0.0.1:9090")[0][1] == "http://127.0.0.1:9090"


# --- a trip skips the configuration's later trials ----------------------------------------------------------
@pytest.mark.parametrize("after_trip", ["skip", "run"])
def test_a_trip_skips_the_configurations_later_trials_unless_the_plan_says_run(tmp_path, after_trip):
    plan = from_dict({**BASE, "configs": ["naive", "resilient"], "trials": 3,
                      "guard": {"stop_when": [{"kind": "error_rate", "above": 0.2}], "after_trip": after_trip}})
    ran = []

    async def fake_trial(variant, index, trial=1):  # the trial loop only: no process starts
        ran.append((variant.name, trial))
        s = make_series(rates({(11, 20): 0.5} if variant.name == "naive" else {}), config=variant.name)
        s.guard = {"name": "error_rate", "kind": "error_rate", "tripped_at_s": 13.0, "value": 0.5, "limit": 0.2,
                   "text": "organic error rate 50.0% > 20% for 3 s"} if variant.name == "naive" else None  # fmt: skip
        return s

    runner = Runner(plan, tmp_path, log=lambda _line: None)
    runner.run_config = fake_trial
    out = asyncio.run(runner.run())
    if after_trip == "skip":
        assert ran == [("naive", 1), ("resilient", 1), ("resilient", 2), ("resilient", 3)]
        assert out["configs"]["naive"]["summary"]["skipped_trials"] == 2
        note = "naive: trials 2, 3 skipped after a guard stopped an earlier one (guard.after_trip: skip)"
        assert note in out["notes"]
    else:
        assert len(ran) == 6 and out["configs"]["naive"]["summary"]["guard_trips"] == 3
    assert out["verdict"]["winner"] == "resilient"
    assert (tmp_path / "report.html").read_text().count("<tr class='null'><td>naive</td>") == (
        1 if after_trip == "skip" else 3)  # fmt: skip


# --- what a user reads ---------------------------------------------------------------------------------------
def test_the_safeguards_example_in_docs_is_a_guard_the_plan_accepts():
    import re

    import yaml

    from tests.conftest import ROOT

    text = (ROOT / "docs" / "drills.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if b.startswith("guard:")]
    plan = from_dict({**BASE, **yaml.safe_load(block)})
    assert [c.kind for c in plan.guard.stop_when] == ["error_rate", "burn_rate", "prometheus", "wall_clock"]


def test_the_live_view_shows_each_guards_value_then_the_trip():
    from rich.console import Console

    from harness.drills.trials.live import LiveView

    update = {"config": "naive", "index": 0, "count": 2, "phase": "fault", "elapsed": 9.0, "total": 42.0,
              "samples": [], "hops": [], "guard": {"watch": {"organic-errors": "26.3%", "cap": "9 s"},
                                                    "tripped": None}}  # fmt: skip
    console = Console(width=200, record=True)
    view = LiveView("retry-storm-guarded", console=console, enabled=False)
    console.print(view.render(update, None))
    assert "guards: organic-errors 26.3% · cap 9 s" in console.export_text()
    update["guard"]["tripped"] = {"name": "organic-errors", "tripped_at_s": 11.0,
                                  "text": "organic error rate 26.3% > 10% for 4 s"}  # fmt: skip
    console.print(view.render(update, None))
    assert ("GUARD organic-errors tripped at 11 s: organic error rate 26.3% > 10% for 4 s; the fault is stopped"
            in console.export_text())  # fmt: skip
