"""`sweep/plane.py`: a phase diagram, the trigger bisected once per value of a second key, each row a sweep of its
own that resumes as any sweep does."""

from __future__ import annotations

import json

import pytest

from harness.drills.sweep.axes import Axis
from harness.drills.sweep.plane import Plane, _short
from harness.drills.sweep.search import BoundaryKind
from harness.drills.sweep.store import Settings, load
from tests.drills.sweep.synthetic import SyntheticSweep


def test_a_phase_diagram_bisects_each_row_and_resumes_row_by_row(tmp_path) -> None:
    """Two --vary keys: the trigger is bisected in each row (one per value of the second key, each a sweep of its
    own); a synthetic boundary that moves with the second key is found in every row, within one step; a kill in
    the middle of a row resumes from each row's sweep.json, repeating no trial; the page has a diagram per
    configuration with one shaded bracket per row where it has one."""
    axis2 = Axis("traffic.organic_rate", 2, 10, 2, True)
    settings = Settings("metastable", Axis("phases.fault", 1, 20, 1, True), True, 4, ["naive", "budget"], None,
                        axis2)  # fmt: skip
    ran: list = []

    def plane_with(kill_after=None):
        class Row(SyntheticSweep):
            def __init__(self, row_settings, *args, **kwargs):
                v2 = row_settings.fixed  # naive's boundary moves down as organic traffic grows
                super().__init__(row_settings, *args, boundaries={"naive": 12 - v2, "budget": 40}, **kwargs)

            def _point(self, value, configs, trials=1):
                if kill_after is not None and len(ran) >= kill_after:
                    raise KeyboardInterrupt
                super()._point(value, configs, trials)
                ran.append((self.settings.fixed, value, tuple(configs)))

        plane = Plane(settings, tmp_path / "plane", log=lambda _: None)
        plane.row_class = Row
        return plane

    whole = plane_with()
    whole.out = tmp_path / "whole"
    summary = whole.run()
    whole_ran, ran[:] = list(ran), []
    assert summary["complete"] and [r["value"] for r in summary["rows"]] == [2, 4, 6, 8, 10]
    for r in summary["rows"]:
        b = r["boundaries"]["naive"]
        assert (b["recovering"], b["failing"]) == (12 - r["value"] - 1, 12 - r["value"]), r
        assert r["boundaries"]["budget"]["kind"] == "above_range"
    assert summary["verdict"].startswith("naive stops recovering between 9 s and 10 s at traffic.organic_rate=2; "
                                         "stops recovering between 7 s and 8 s at traffic.organic_rate=4")
    with pytest.raises(KeyboardInterrupt):
        plane_with(kill_after=len(whole_ran) // 2).run()
    first = list(ran)
    saved = json.loads((tmp_path / "plane" / "sweep.json").read_text())
    assert saved["axis2"]["key"] == "traffic.organic_rate" and not saved["complete"]
    resumed_settings, _ = load(tmp_path / "plane")
    assert resumed_settings.axis2 == axis2 and resumed_settings.fixed is None
    ran[:] = []
    plane_with().run()
    assert first + ran == whole_ran  # nothing lost, nothing repeated
    page = (tmp_path / "plane" / "sweep.html").read_text()
    assert page.count("<svg ") == 2 and page.count('<rect class="boundary"') == 5  # naive's five rows
    assert page.count('href="traffic.organic_rate=') == 5


def test_each_row_s_boundary_is_said_in_a_few_words_by_its_kind() -> None:
    label = lambda v: f"{v:g} s"  # noqa: E731
    said = {kind: _short({"kind": kind, "recovering": 2.0, "failing": 3.0}, label) for kind in BoundaryKind}
    assert said == {
        BoundaryKind.BETWEEN: "stops recovering between 2 s and 3 s",
        BoundaryKind.BELOW_RANGE: "does not recover even at 3 s",
        BoundaryKind.ABOVE_RANGE: "recovers up to 2 s",
        BoundaryKind.OPEN: "not bracketed yet",
    }
    assert _short({"kind": "between", "recovering": 2.0, "failing": 3.0}, label) == said[BoundaryKind.BETWEEN]
