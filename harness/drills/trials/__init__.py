"""Stage 7, the trials: running a plan, every stage below in turn, for each configuration and trial.

Owns: the runner (`runner.Runner`: the stack up, the load, a reading each second, the series analysed and the
outputs written, interleaved trials, cleanup on every path) with what it does each second of a trial (`tick`;
a link fault set and removed at the phase boundaries: `link_fault`), what results.json keeps of a trial beside
its analysis (`extras`), its one /metrics server and what Prometheus scrapes through it (`metrics_server`) and
the plan's probe (`probe`); the guards watched while a trial runs (`guard`) and what a trip does to it
(`trip`), the run's preflight — every check before its first fault, each with its verdict (`preflight`) — the
dry run that prints it and says what a run would do (`dryrun`), and the live view on the terminal (`live`).

May import: every stage below it (`report`, `analysis`, `load`, `readings`, `stack`, `plan`) and
`harness.procs`, `harness.dashboards` (Grafana annotations), `harness.core`.
"""
