"""A phase diagram: the trigger bisected once per value of a second key (`--vary` twice).

Each row of the diagram (one value of the second axis) is a sweep of its own, in its own directory with its
own sweep.json, so it resumes as any sweep does; the top directory's sweep.json holds the diagram's settings
and each row's boundaries, and its sweep.html draws the diagram. A budget is shared by the rows, in order.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable

from harness.drills.sweep.engine import Sweep
from harness.drills.sweep.search import BoundaryKind
from harness.drills.sweep.store import FILE, Settings, load, save


def _short(b: dict, label) -> str:
    """A row's boundary in a few words (the diagram's verdict names one per row)."""
    if b["kind"] == BoundaryKind.BETWEEN:
        return f"stops recovering between {label(b['recovering'])} and {label(b['failing'])}"
    if b["kind"] == BoundaryKind.ABOVE_RANGE:
        return f"recovers up to {label(b['recovering'])}"
    if b["kind"] == BoundaryKind.BELOW_RANGE:
        return f"does not recover even at {label(b['failing'])}"
    return "not bracketed yet"


class Plane:
    #: what runs a row (tests give a synthetic one)
    row_class = Sweep

    def __init__(self, settings: Settings, out: pathlib.Path, *, budget_s: float | None = None,
                 log: Callable[[str], None] = print) -> None:  # fmt: skip
        assert settings.axis2 is not None and settings.fixed is None
        self.settings, self.out, self.budget_s, self.log = settings, out, budget_s, log

    def row_dir(self, value: float) -> pathlib.Path:
        return self.out / f"{self.settings.axis2.key}={value:g}"

    def run(self) -> dict:
        started = time.monotonic()
        self.out.mkdir(parents=True, exist_ok=True)
        rows, stopped = [], None
        self.write(rows, None)
        for value in self.settings.axis2.values:
            where = self.row_dir(value)
            records = load(where)[1] if (where / FILE).exists() else []
            left = None if self.budget_s is None else max(0.0, self.budget_s - (time.monotonic() - started))
            row = self.row_class(self.settings.row(value), where, records, budget_s=left, log=self.log)
            summary = row.run()
            stopped = stopped or summary["stopped"]
            rows.append((value, where, summary))
            self.write(rows, None)
        return self.write(rows, stopped)

    def write(self, rows: list, stopped: str | None) -> dict:
        s = self.settings
        lab2 = s.axis2.label
        per_config = []
        for config in s.configs:
            parts = [f"{_short(summary['boundaries'][config], s.axis.label)} at {s.axis2.key}={lab2(v)}"
                     for v, _, summary in rows]  # fmt: skip
            per_config.append(f"{config} " + "; ".join(parts) if parts else f"{config}: no row yet")
        complete = len(rows) == len(s.axis2.values) and all(r[2]["complete"] for r in rows)
        verdict = " | ".join(per_config) + ("" if complete else f" (stopped: {stopped})" if stopped
                                                              else " (not finished)")  # fmt: skip
        summary = {
            "complete": complete, "stopped": stopped, "verdict": verdict,
            "rows": [{"value": v, "label": lab2(v), "dir": where.name, "complete": r["complete"],
                      "verdict": r["verdict"], "boundaries": r["boundaries"], "points": r["points"]}
                     for v, where, r in rows],
        }  # fmt: skip
        save(self.out, s, [], summary)
        from harness.drills.sweep.page import write_plane_page

        write_plane_page(self.out, s, summary)
        return summary
