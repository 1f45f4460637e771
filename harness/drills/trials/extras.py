"""What results.json keeps of a trial beside its analysis: where it ran, which ids were hit, whether the fault
landed as planned (`analysis.landing`: `hits.as_planned`, `hits.note`), a streaming edge's messages, the probe,
a link fault's summary (`stack.links`).

The hits come from every witness the trial had, each asked of the one that knows it: the ids the load tagged
that the hit function picks (`expected`), the services' own audit lines (`observed`), the ids the load saw
answered with the `x-drill-fault` marker (`marked`; on a running stack without audit lines, the marker is
the services' own word, so it is `observed` too); each set with a digest to compare runs.
"""

from __future__ import annotations

import pathlib

from harness.drills.analysis import landing
from harness.drills.load.schedule import LoadDriver, ids_digest
from harness.drills.plan.model import Plan, Variant
from harness.drills.readings.series import RunSeries
from harness.drills.trials.probe import probe_summary


def trial_extras(
    plan: Plan, variant: Variant, load: LoadDriver, *, target_kind: str, scrape_errors, wall0: float,
    probe_out: pathlib.Path | None, observed: set[str] | None, series: RunSeries | None = None,
    gates: dict | None = None, link: dict | None = None,
) -> dict:  # fmt: skip
    """The trial's extras; `probe_out` is the probe's output when one ran, `observed` the audited ids (None
    where there are no audit lines), `gates` the target hop's drill gates over the trial (None: not read)."""
    tagged = load.expected_hits()
    expected = set(tagged or ())
    extras = {
        "config": variant.config or ("plain" if target_kind == "topology" else variant.name),
        "started_unix": round(wall0, 3),
        "driver": load.name,
        "scrape_errors": scrape_errors,
        "hits": {"expected": len(expected), "expected_digest": ids_digest(expected)} if tagged is not None else {},
    }
    if observed is not None:  # the services' own audit lines
        extras["hits"].update({
            "observed": len(observed), "observed_digest": ids_digest(observed),
            "observed_subset_of_expected": observed <= expected if expected else None,
        })  # fmt: skip
    messages = load.message_counts()
    if messages is not None:  # a streaming edge's messages
        extras["messages"] = messages
    marked = load.observed_hits()
    if marked is not None:  # what the load itself was told: ids answered with the x-drill-fault marker
        marked = set(marked)
        extras["hits"].update({"marked": len(marked), "marked_digest": ids_digest(marked)})
        if observed is None:  # a running stack: the marker is the services' own word on what they hit
            extras["hits"].update({
                "observed": len(marked), "observed_digest": ids_digest(marked),
                "observed_subset_of_expected": marked <= expected if expected else None,
            })  # fmt: skip
    if tagged is not None and series is not None and series.guard:  # tagging stopped early, on purpose
        extras["hits"].update({"as_planned": None, "note": None})
    elif tagged is not None:
        witnesses = landing.Witnesses(
            expected, audited=observed, marked=marked,
            injected=landing.injected(series.values) if series is not None else None, gates=gates,
        )  # fmt: skip
        ok, note = landing.judge(witnesses, variant.fault, seed=plan.seed, hops=plan.hop_names)
        extras["hits"].update({"as_planned": ok, "note": note})
    if probe_out is not None:
        extras["probe"] = probe_summary(probe_out)
    if link is not None:  # a link fault: what it touched, and whether the configuration met its expectation
        extras["link"] = link
    return extras
