"""Stage 9, the commands: `drill run`, `drill demo`, `drill sweep`, `drill analyze`, `drill hits` and `drill init`.

Owns: the command line of each (`run`, `demo`, `sweep`, `analyze`, `hits`, `init`: `add_arguments(parser)` and
`run(args)`; `harness.cli` imports only the one a command needs), where arguments become a plan, a run, a
re-analysis, a preview or a new stack file, and the terminal's summary of a run. Expected failures are raised as
`harness.core.errors` types, which `harness.cli` prints as one line with their exit code.

May import: every stage of `harness.drills`, and below.
"""
