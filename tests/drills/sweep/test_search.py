"""`sweep/search.py` on synthetic outcomes: the interval, the bisection, a point's outcome and a boundary's kind."""

from __future__ import annotations

import math

import pytest

from harness.drills.sweep.search import BoundaryKind, Bracket, Outcome, Tally, grid, search, wilson


def test_wilson_interval_matches_the_closed_form_and_decides_only_when_it_excludes_one_half() -> None:
    # scipy-free reference values (Wilson 1927; e.g. statsmodels proportion_confint(method="wilson"))
    assert wilson(0, 4) == pytest.approx((0.0, 0.48990), abs=1e-4)
    assert wilson(3, 3) == pytest.approx((0.43850, 1.0), abs=1e-4)
    assert wilson(4, 4) == pytest.approx((0.51010, 1.0), abs=1e-4)
    assert wilson(5, 10) == pytest.approx((0.23659, 0.76341), abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)
    # three unanimous trials do not exclude one half; four do
    assert not Tally(3, 3).decided(max_trials=10) and Tally(4, 4).decided(max_trials=10)
    assert not Tally(3, 0).decided(max_trials=10) and Tally(4, 0).decided(max_trials=10)
    # a split point runs to the cap, and a tie counts as failing (the boundary is where P reaches one half)
    assert not Tally(4, 2).decided(max_trials=5) and Tally(5, 2).decided(max_trials=5)
    assert Tally(2, 1).failing and not Tally(3, 1).failing


def _drive(values, boundary, max_trials, flaky=None):
    """Run the search against a synthetic trigger: never restored iff value >= boundary (or `flaky(v, i)`)."""
    tallies_: dict[float, Tally] = {}
    asked = []
    while True:
        b = search(values, tallies_, max_trials)
        if b.done:
            return b, asked, tallies_
        v = b.next_value
        t = tallies_.get(v, Tally())
        fails = flaky(v, t.n) if flaky else v >= boundary
        tallies_[v] = Tally(t.n + 1, t.k + int(fails))
        asked.append(v)


@pytest.mark.parametrize("boundary", [1.5, 2.2, 7.0, 13.7, 19.99])
def test_bisection_brackets_a_known_boundary_within_one_step(boundary: float) -> None:
    values = grid(1, 20, 1)
    b, asked, _ = _drive(values, boundary, max_trials=4)
    assert b.recovering < boundary <= b.failing and b.failing - b.recovering == 1
    assert b.kind is BoundaryKind.BETWEEN
    points = len(set(asked))
    assert points <= 2 + math.ceil(math.log2(len(values)))  # the two ends, then halving: not a full grid
    assert len(asked) == 4 * points  # unanimous points stop at 4 trials, where Wilson excludes one half


def test_a_boundary_outside_the_range_is_said_as_such_after_only_the_two_ends() -> None:
    b, asked, _ = _drive(grid(1, 20, 1), 0.5, max_trials=4)
    assert (b.recovering, b.failing, b.done) == (None, 1, True) and set(asked) == {1, 20}
    assert b.kind is BoundaryKind.BELOW_RANGE
    b, asked, _ = _drive(grid(1, 20, 1), 25, max_trials=4)
    assert (b.recovering, b.failing, b.done) == (20, None, True) and set(asked) == {1, 20}
    assert b.kind is BoundaryKind.ABOVE_RANGE


def test_an_uncertain_point_gets_trials_up_to_the_cap_and_a_certain_one_stops_early() -> None:
    # at 10 the outcome alternates (P = 1/2): it takes every trial the cap allows; elsewhere 4 decide
    flaky = lambda v, i: (i % 2 == 0) if v == 10 else v > 10  # noqa: E731
    _, asked, t = _drive(grid(1, 20, 1), None, max_trials=7, flaky=flaky)
    assert t[10].n == 7 and t[10].k == 4
    assert all(x.n == 4 for v, x in t.items() if v != 10)


def test_the_grid_ends_at_hi_even_when_the_step_does_not_divide_the_range() -> None:
    assert grid(1, 20, 4) == [1, 5, 9, 13, 17, 20]
    assert grid(0.5, 1.5, 0.25) == [0.5, 0.75, 1.0, 1.25, 1.5]


def test_a_search_under_way_is_open_and_asks_for_the_ends_first_then_the_middle() -> None:
    values = grid(1, 9, 1)
    first = search(values, {}, max_trials=4)
    assert (first.kind, first.next_value) == (BoundaryKind.OPEN, 1)
    ends = {1: Tally(4, 0), 9: Tally(4, 4)}
    middle = search(values, ends, max_trials=4)
    assert middle == Bracket(1, 9, False, 5) and middle.kind is BoundaryKind.OPEN


@pytest.mark.parametrize(("tally", "outcome"), [
    (Tally(0, 0), Outcome.OPEN),  # no trial yet
    (Tally(3, 3), Outcome.OPEN),  # unanimous, but three do not exclude one half
    (Tally(4, 4), Outcome.FAILING),
    (Tally(4, 0), Outcome.RECOVERING),
    (Tally(2, 1), Outcome.FAILING),  # the cap reached on a tie: failing, as `failing` says
    (Tally(2, 0), Outcome.RECOVERING),
])  # fmt: skip
def test_a_points_outcome_is_open_until_decided_then_failing_or_recovering(tally: Tally, outcome: Outcome) -> None:
    assert tally.outcome(max_trials=2 if tally.n == 2 else 10) is outcome


def test_the_kinds_are_the_strings_sweep_json_and_sweep_html_have_always_spelled() -> None:
    assert [k.value for k in BoundaryKind] == ["between", "below_range", "above_range", "open"]
    assert [o.value for o in Outcome] == ["failing", "recovering", "open"]
    assert f"{BoundaryKind.BELOW_RANGE}" == "below_range" and BoundaryKind("above_range") is BoundaryKind.ABOVE_RANGE
