"""Drills: a plan run against a stack under load, read second by second, analysed, reported.

The stages, each a package, from the first a drill needs to the last (docs/architecture.md draws them):

    plan       what a drill is: the typed model and the YAML it is read from
    stack      what it runs against: the topology the runner starts, or services already running
    readings   per-second readings: the runner's scraper, Prometheus, series.json
    load       the traffic: one open-loop schedule, three drivers (aio, Locust, a command)
    analysis   series -> one trial's numbers -> trials compared -> the verdict, results.json
    report     report.html: results and series drawn
    trials     the runner: every stage above in turn, per configuration and trial; guards, dry run
    cli        `drill run`, `drill demo`, `drill analyze`, `drill hits`

Each imports only the ones listed above it (import-linter checks it in `make test`); `stack` and
`readings` know nothing of each other, nor do `load` and `analysis`.

The names a script may import are re-exported here, loaded on first use so that importing one stage
never imports the others (`drill hits` stays light): plan files, the request ids every load driver and
`drill hits` agree on, the edge resolver the Locust user shares, saved series and their analysis, and
the runner. Everything else is internal to its stage.
"""

from __future__ import annotations

import importlib

#: public name -> the module that defines it
_PUBLIC = {
    # the plan
    "Plan": "plan.model",
    "PlanError": "plan.files",
    "from_dict": "plan.files",
    "load_plan": "plan.files",
    "shipped_plans": "plan.files",
    # a method of any service, as the runner's load and the Locust user call it
    "MethodSpec": "stack.edge",
    "resolve_call": "stack.edge",
    # the ids a load sends, and which of them a plan's fault hits
    "ids_digest": "load.schedule",
    "read_tagged_ids": "load.locust",
    "request_id": "load.schedule",
    "tagged_ids": "load.schedule",
    # saved outputs: series.json, and what the analysis makes of it
    "RunSeries": "readings.series",
    "SeriesKey": "plan.outputs",
    "read_series_document": "readings.series",
    "analyze_run": "analysis.trial",
    "TrialResult": "analysis.trial",
    "assemble": "analysis.results",
    "write_outputs": "report.page",
    # running a plan
    "Runner": "trials.runner",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
