"""Sweeps: where each configuration stops recovering (`drill sweep`).

A sweep varies one plan key (a trigger: the fault's length, its delay, its ratio, a rate) and, per
configuration, brackets the **boundary**: the smallest trigger at which the chance of "never restored" (a
trial that breached the SLO and did not restore it by the end) reaches one half. It bisects along the axis,
spending trials only where the outcome is uncertain (a Wilson 95 % interval decides a point, or the trial
cap does), and saves every trial as it ends, so an interrupted sweep resumes without losing or repeating one.

Owns: the axis and its values (`axes`), the bisection, the interval, a point's `Outcome` and a boundary's
`BoundaryKind`, pure (`search`), sweep.json (`store`), running a point's trials through the runner (`engine`),
the verdict in words (`summary`), sweep.html with its map (`page`), a phase diagram's rows, one sweep each
(`plane`), and points run on other machines and merged (`elsewhere`).

May import: `trials` (each point's trials are the runner's ordinary trials, guards and all), `report`,
`analysis`, `plan`, and `harness.core`. Nothing below imports it.
"""
