"""`sweep/store.py`: sweep.json written whole, read back as it was (a real sweep's, byte for byte), tallies that
count only trials with data, and a file that is not a sweep's refused in one line."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from harness.core.errors import BadInput
from harness.drills.sweep.axes import Axis
from harness.drills.sweep.search import Tally
from harness.drills.sweep.store import FILE, VERSION, Record, Settings, load, save, tallies
from harness.drills.sweep.summary import summarize
from tests.conftest import ROOT

#: a real quick sweep of the metastable plan (docs/resilience.md cites it; its .txt says how it was run)
REAL = ROOT / "benchmarks" / "results" / "metastable-sweep-quick-c18c52c.sweep.json"


def test_a_real_sweep_read_back_and_summarised_again_is_the_same_file_byte_for_byte(tmp_path) -> None:
    """What --resume and --collect read is what the sweep wrote: the settings, every trial, and the summary
    the search makes of them again (boundary kinds and outcomes spelled as they always were)."""
    shutil.copy(REAL, tmp_path / FILE)
    settings, records = load(tmp_path)
    saved = json.loads(REAL.read_text())
    assert len(records) == len(saved["trials"]) and saved["complete"]
    out = tmp_path / "again"
    out.mkdir()
    summary = summarize(settings.axis, records, settings.configs, settings.max_trials, stopped=saved["stopped"])
    save(out, settings, records, summary)
    assert (out / FILE).read_bytes() == REAL.read_bytes()
    assert not list(out.glob(".*.tmp"))  # written to a temporary file, renamed over: nothing left beside it


def test_settings_of_a_phase_diagram_and_its_rows_round_trip(tmp_path) -> None:
    axis2 = Axis("traffic.organic_rate", 2.0, 10.0, 2.0, True)
    diagram = Settings("metastable", Axis("fault.ratio", 10.0, 100.0, 6.0, True), False, 3, ["naive"], 7, axis2)
    for settings in (diagram, diagram.row(4.0)):
        save(tmp_path, settings, [], {})
        again, records = load(tmp_path)
        assert again == settings and records == []
    assert diagram.row(4.0).fixed_axis == (axis2, 4.0) and diagram.fixed_axis is None
    assert "fixed" not in diagram.to_json() and diagram.row(4.0).to_json()["fixed"] == 4.0


def test_every_trial_round_trips_with_its_outcome_and_cost(tmp_path) -> None:
    settings = Settings("metastable", Axis("phases.fault", 1.0, 20.0, 1.0, True), True, 2, ["naive", "budget"])
    records = [Record("naive", 3.0, "points/001-phases.fault=3", True, True, False, None, 4.2),
               Record("budget", 3.0, "points/001-phases.fault=3", True, False, False, 5.0, 1.1, guard_tripped=True),
               Record("naive", 1.0, "points/002-phases.fault=1", False, False, True, None, None)]  # fmt: skip
    save(tmp_path, settings, records, {"complete": False})
    assert load(tmp_path) == (settings, records)
    data = json.loads((tmp_path / FILE).read_text())
    assert data["version"] == VERSION and data["complete"] is False and data["trials"][1]["guard_tripped"] is True


def test_tallies_count_each_value_s_trials_with_data_and_those_never_restored() -> None:
    records = [Record("naive", 3.0, "p", True, True, False, None, None),
               Record("naive", 3.0, "p", True, False, False, 4.0, None),
               Record("naive", 3.0, "p", True, False, True, None, None),  # insufficient data: not counted
               Record("naive", 5.0, "p", True, True, False, None, None),
               Record("budget", 3.0, "p", False, False, False, None, None)]  # fmt: skip
    assert tallies(records, "naive") == {3.0: Tally(2, 1), 5.0: Tally(1, 1)}
    assert tallies(records, "budget") == {3.0: Tally(1, 0)} and tallies(records, "other") == {}


@pytest.mark.parametrize(("content", "says"), [
    (None, "--resume {d}: no sweep.json there"),
    ("{not json", "--resume {d}: sweep.json unreadable"),
    (json.dumps({"version": 99}), "--resume {d}: sweep.json version 99, this drill reads 1"),
    (json.dumps({"version": VERSION, "plan": "metastable"}), "--resume {d}: sweep.json is not a sweep's"),
])  # fmt: skip
def test_a_file_that_is_not_a_sweep_is_refused_naming_the_flag(tmp_path, content, says) -> None:
    if content is not None:
        (tmp_path / FILE).write_text(content)
    with pytest.raises(BadInput) as err:
        load(tmp_path)
    assert str(err.value).startswith("sweep: " + says.format(d=tmp_path)), str(err.value)
    with pytest.raises(BadInput, match="--collect"):
        load(pathlib.Path(tmp_path), "--collect")
