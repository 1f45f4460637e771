"""Stage 8, the commands: `drill run`, `drill demo`, `drill analyze` and `drill hits`.

Owns: the command line of each (`run`, `demo`, `analyze`, `hits`: `add_arguments(parser)` and
`run(args)`; `harness.cli` imports only the one a command needs), where arguments become a plan, a run, a
re-analysis or a preview, and the terminal's summary of a run. Expected failures are raised as
`harness.core.errors` types, which `harness.cli` prints as one line with their exit code.

May import: every stage of `harness.drills`, and below.
"""
