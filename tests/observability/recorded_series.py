"""Recorded drill runs as test fixtures: a `drill run`'s series.json cut down to what the MTTR board reads.

`tests/observability/recorded/*.series.json` are made from real runs with

    .venv/bin/drill run tests/observability/plans/storm-3hop.yaml --out /tmp/storm --no-live
    .venv/bin/python -m tests.observability.recorded_series /tmp/storm tests/observability/recorded/NAME.series.json

Kept: the edge's calls (`calls`: the SLO, blast radius, edge first attempts) and the hops' calls (`srv`:
amplification); series that are zero at every second are dropped (a zero counter adds nothing to any sum
or rate). Values are made exact in binary floating point, so a sum is the same in any order (the runner
adds per-second values, PromQL subtracts cumulative ones): edge calls are whole calls (the runner's per-second
counts, which its sample times' millisecond rounding left a few 1e-16 off) and hop calls are rounded to
1/1024 of a call (they are interpolated to the second between two scrapes). The header keeps the command,
and the run's own results.json numbers that depend only on these series, so a test can check that cutting
lost nothing.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

from harness.drills.readings.series import RunSeries, read_series_document, series_document

KINDS = ("calls", "srv")
#: results.json fields computed from `calls` and `srv` alone (not latency: offered load, p99)
RESULT_KEYS = ("breached", "ttd_s", "ttm_s", "ttr_s", "mttr_s", "flaps", "blast_radius", "error_rate_during_fault",
               "success_rate", "amplification_by_hop")  # fmt: skip
HOP_QUANTUM = 1024


def _exact(kind: str, values: list[float | None]) -> list[float | None]:
    if kind == "calls":
        return [None if v is None else float(round(v)) for v in values]
    return [None if v is None else round(v * HOP_QUANTUM) / HOP_QUANTUM for v in values]


def cut(run_dir: pathlib.Path, command: str) -> dict:
    """series.json of `run_dir`, cut and made exact, with the run's results in the header."""
    header, trials = read_series_document(json.loads((run_dir / "series.json").read_text()))
    results = json.loads((run_dir / "results.json").read_text())
    out: dict[str, list[RunSeries]] = {}
    for name, runs in trials.items():
        if len(runs) != 1:
            raise SystemExit(f"{name}: {len(runs)} trials; record one trial per configuration")
        s = runs[0]
        values = {k: _exact(k.kind, v) for k, v in s.values.items() if k.kind in KINDS and any(v)}
        out[name] = [RunSeries(s.config, s.t, s.fault_on, s.fault_off, values, s.planned_rps, s.timeout_s)]
    doc = series_document(header, out)
    doc["recorded"] = {
        "command": command,
        "started_at": results.get("started_at"),
        "results": {n: {k: c.get(k) for k in RESULT_KEYS} for n, c in results["configs"].items()},
    }
    return doc


def main(argv: list[str]) -> None:
    run_dir, target = pathlib.Path(argv[0]), pathlib.Path(argv[1])
    command = "drill run tests/observability/plans/storm-3hop.yaml --out DIR --no-live" if len(argv) < 3 else argv[2]
    text = json.dumps(cut(run_dir, command), indent=1)
    # one line per list of numbers: readable diffs, a few KB
    text = re.sub(r"\[[^\[\]{}\"]*\]", lambda m: " ".join(m.group(0).split()), text)
    target.write_text(text + "\n")
    print(f"wrote {target} ({target.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv[1:])
