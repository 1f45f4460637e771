"""Stage 5, the analysis: per-second series → one trial's numbers → trials compared → the verdict.

Owns: in the order the data flows, each second's SLO state (`slo`), what users felt (`impact`: budget burn,
seconds outside the SLO), the fault window's traffic (`traffic`: offered load, amplification, goodput), one
trial's every number as a `TrialResult` (`trial.analyze_run`: TTD, TTM, TTR, MTTR, the rest; the one rule
for "never restored"), whether the fault landed as planned (`landing`), trials summarised
and compared (`stats`), the ranking and its sentence (`verdict`), results.json assembled once (`results`),
and the `--fail-on` gates over it (`gate`); a link fault's trials in words and its
expectation's gate (`links`). Pure functions over series and dicts, but for `landing`'s
read of the hops' gates.

May import: `harness.drills.readings` (`RunSeries`), `harness.drills.plan`, `harness.core`. Never how the
series were produced (stack, load) nor who asks (trials, report, cli). A new measure goes here (per trial:
a field of `trial.TrialResult`; across trials: `stats`) and reaches the report through results.json.
"""
