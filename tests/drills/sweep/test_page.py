"""`sweep/page.py`: sweep.html's map (a dot per measured value coloured by its outcome, the bracket shaded) and
the phase diagram's page (a row per value of the second key, rows not run yet drawn empty)."""

from __future__ import annotations

from harness.drills.sweep.axes import Axis
from harness.drills.sweep.page import COLOURS, svg_map, write_page, write_plane_page
from harness.drills.sweep.search import Outcome
from harness.drills.sweep.store import Settings
from harness.drills.sweep.summary import summarize
from tests.drills.sweep.synthetic import SyntheticSweep, records, settings


def test_the_page_draws_each_point_coloured_by_outcome_and_shades_the_bracket(tmp_path) -> None:
    s = settings()
    sweep = SyntheticSweep(s, tmp_path / "p", boundaries={"naive": 3, "budget": 40}, log=lambda _: None)
    summary = sweep.run()
    page = (tmp_path / "p" / "sweep.html").read_text()
    assert page == write_page(tmp_path / "p", s, summary).read_text()
    dots = [(c, p["value"]) for p in summary["points"] for c in p["configs"]]
    failing = [(c, v) for c, v in dots if c == "naive" and v >= 3]  # the synthetic boundary
    assert page.count("<circle ") == len(dots) and page.count('class="failing"') == len(failing)
    assert page.count('class="recovering"') == len(dots) - len(failing) and 'class="open"' not in page
    assert page.count('<rect class="boundary"') == 1  # naive's bracket; budget has none inside the range
    assert "naive stops recovering between 2 s and 3 s" in page and "held, held" in page


def test_an_undecided_point_is_amber_and_no_bracket_is_drawn_before_there_is_one() -> None:
    s = settings()
    summary = summarize(s.axis, records("naive", 1, 0, 4) + records("naive", 20, 2, 3), s.configs, s.max_trials)
    svg = svg_map(s, summary)
    assert svg.count('class="recovering"') == 1 and svg.count('class="open"') == 1 and "<rect" not in svg
    assert f'fill="{COLOURS[Outcome.OPEN]}"' in svg and "2/3 never restored (95% CI 0.21–0.94)" in svg


def test_the_phase_diagram_draws_a_row_per_value_and_an_empty_line_for_a_row_not_run_yet(tmp_path) -> None:
    axis2 = Axis("traffic.organic_rate", 2, 6, 2, True)
    s = Settings("metastable", Axis("phases.fault", 1, 20, 1, True), True, 4, ["naive"], None, axis2)
    row = summarize(s.axis, records("naive", 1, 0, 4) + records("naive", 20, 4, 4) + records("naive", 10, 4, 4)
                    + records("naive", 5, 0, 4) + records("naive", 7, 0, 4) + records("naive", 8, 4, 4),
                    ["naive"], 4)  # fmt: skip
    assert row["complete"]
    first = {"value": 2.0, "label": "2", "dir": "traffic.organic_rate=2", "complete": True,
             "verdict": row["verdict"], "boundaries": row["boundaries"], "points": row["points"]}  # fmt: skip
    summary = {"complete": False, "stopped": None, "verdict": "naive …", "rows": [first]}
    page = write_plane_page(tmp_path, s, summary).read_text()
    assert page.count("<svg ") == 1 and page.count('<rect class="boundary"') == 1  # only the row that ran
    assert page.count("<circle ") == len(row["points"])  # dots only where a row has points
    for label in ("2", "4", "6"):  # every row of the diagram is named, run or not
        assert f'text-anchor="end" font-size="12">{label}</text>' in page
    assert 'href="traffic.organic_rate=2/sweep.html"' in page and "not complete (stopped)" in page
