"""Stage 3, the readings: how a drill reads the stack it drills, second by second, into per-second series.

Owns: the runner's own scraper of every `/metrics` endpoint (`scraper`), Prometheus as a data source
while a run goes and afterwards (`prom`; `hop_rates`: a stack's selector hops' rates now, for the live
view; `scrapes`: when a Prometheus reads its targets, from its own config), the runner's `/metrics` server
that relays each hop's at a path that outlives trials (`relay`), and what a reading keeps (`series`:
snapshots → `RunSeries`, and series.json, written and read back).

May import: `harness.drills.plan` (the series' keys), `harness.procs`, `harness.core`. Independent of
`stack`: the same readings serve a topology the runner started and a stack it found running.
"""
