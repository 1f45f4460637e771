"""Stage 4, the load: organic and drill traffic on one open-loop schedule, sent by one of three drivers.

Owns: the schedule every driver keeps (`schedule`: users, rates, `PLAN-SEED-USER-N-MIX` request ids
(`harness.core.ids`), which of them carry the directive, the trial's phase times), and the drivers behind
one small interface (`schedule.LoadDriver`, the questions the runner asks): the runner's own grpc.aio
users (`aio`), Locust headless (`locust`), and a load a stack file starts with a command (`command`),
one of them chosen from the plan (`drivers`).

May import: `harness.drills.stack` (the edge call), `harness.drills.readings` (a command load's phase
times read from Prometheus), `harness.drills.plan`, `harness.interceptors`, `harness.procs`,
`harness.core`. Never the analysis: the numbers do not know how the calls were sent.
"""
