"""`sweep/summary.py`: each configuration's boundary in words and numbers, every point's counts, and a sweep
that stopped saying so."""

from __future__ import annotations

from harness.drills.sweep.axes import Axis
from harness.drills.sweep.search import BoundaryKind, Tally, wilson
from harness.drills.sweep.store import Record, tallies
from harness.drills.sweep.summary import boundary, points, summarize
from tests.drills.sweep.synthetic import records as recs

AXIS = Axis("phases.fault", 1, 20, 1, True)


def test_the_verdict_names_each_kind_of_boundary_with_its_counts() -> None:
    records = (recs("naive", 1, 0, 4) + recs("naive", 20, 4, 4) + recs("naive", 2, 0, 4) + recs("naive", 3, 3, 3)
               + recs("naive", 3, 1, 1) + recs("budget", 1, 0, 4) + recs("budget", 20, 0, 4)
               + recs("fragile", 1, 4, 4) + recs("fragile", 20, 4, 4))  # fmt: skip
    for v in range(4, 20):
        records += recs("naive", v, 4, 4) if v in (10, 15, 17, 18) else []
    s = summarize(AXIS, records, ["naive", "budget", "fragile"], 4)
    assert s["boundaries"]["naive"]["text"] == ("naive stops recovering between 2 s and 3 s (4/4 never restored at "
                                                "3 s, 0/4 at 2 s)")  # fmt: skip
    assert s["boundaries"]["budget"]["text"] == ("budget recovers from every trigger up to 20 s (0/4 never restored "
                                                 "there)")  # fmt: skip
    assert s["boundaries"]["fragile"]["text"] == "fragile does not recover even at 1 s (4/4 never restored there)"
    assert [s["boundaries"][c]["kind"] for c in ("naive", "budget", "fragile")] == [
        BoundaryKind.BETWEEN, BoundaryKind.ABOVE_RANGE, BoundaryKind.BELOW_RANGE]  # fmt: skip
    assert s["complete"] and s["verdict"].count(";") == 2
    naive3 = next(p for p in s["points"] if p["value"] == 3)["configs"]["naive"]
    assert naive3["trials"] == 4 and naive3["never_restored"] == 4 and naive3["ci95"] == list(wilson(4, 4))
    assert tallies(records, "naive")[3] == Tally(4, 4)


def test_an_unbracketed_configuration_says_what_is_known_and_the_sweep_why_it_stopped() -> None:
    records = recs("naive", 1, 0, 4) + recs("naive", 20, 2, 3)  # the high end not decided yet
    b = boundary(AXIS, records, "naive", 4)
    assert b["kind"] is BoundaryKind.OPEN and not b["done"]
    assert b["text"] == "naive: not bracketed yet (1 s: 0/4 never restored; 20 s: 2/3 never restored)"
    stopped = summarize(AXIS, records, ["naive", "budget"], 4, stopped="the 5-min budget would end")
    assert not stopped["complete"] and stopped["stopped"] == "the 5-min budget would end"
    assert stopped["verdict"] == (f"{b['text']}; budget: not bracketed yet (no trial yet) "
                                  "(stopped: the 5-min budget would end)")  # fmt: skip
    assert summarize(AXIS, records, ["naive"], 4)["verdict"].endswith(" (not finished)")


def test_a_value_that_fails_below_one_that_recovers_is_reported_as_measured() -> None:
    records = (recs("naive", 1, 0, 4) + recs("naive", 20, 4, 4) + recs("naive", 5, 4, 4) + recs("naive", 8, 0, 4)
               + recs("naive", 10, 4, 4) + recs("naive", 9, 0, 4))  # fmt: skip
    b = boundary(AXIS, records, "naive", 4)
    assert b["not_monotone"] == [5, 8]  # fails at 5 yet recovers at 8: bisection's assumption does not hold
    assert b["text"].endswith("; not monotone: fails at 5 s yet recovers at 8 s")


def test_every_point_lists_its_trials_with_data_apart_from_those_without() -> None:
    records = [Record("naive", 3.0, "points/001", True, True, False, None, 2.5),
               Record("naive", 3.0, "points/002", True, False, False, 6.0, 1.5),
               Record("naive", 3.0, "points/002", False, False, True, None, None),
               Record("budget", 5.0, "points/003", False, False, False, None, 0.0)]  # fmt: skip
    (three, five) = points(AXIS, records, ["naive", "budget"])
    assert (three["value"], three["label"], list(three["configs"])) == (3.0, "3 s", ["naive"])
    assert three["configs"]["naive"] == {
        "trials": 2, "never_restored": 1, "insufficient_data": 1, "p_never_restored": 0.5,
        "ci95": list(wilson(1, 2)), "breached": [True, True], "mttr_s": [None, 6.0], "budget_burn": [2.5, 1.5],
        "points": ["points/001", "points/002"],
    }  # fmt: skip
    assert five["configs"]["budget"]["never_restored"] == 0 and five["configs"]["budget"]["p_never_restored"] == 0.0
