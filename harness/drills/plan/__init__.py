"""Stage 1, the plan: what a drill is, as one typed model (pydantic), and the YAML files it is read from.

Owns: the plan's sections (`sections`: hops, traffic, fault, phases, SLO, probe; `stack`: services already
running; `guards`: stop conditions; `links`: the links a trial starts and a link fault, `base`: what every
section shares), the plan as a whole (`model.PlanFile`, what a user writes;
`model.Plan`, what runs), the types of what a run produces (`outputs`: `SeriesKey`, `Results`), and the
loading of plan files with every error named by its key path (`files`), which also writes the JSON Schema
editors use (harness/drills/plan.schema.json), and a commented starter stack file written from a service's
methods (`starter`, for `drill init`).

May import: `harness.core`, `harness.interceptors` (a fault's client tagging), `harness.resilience` (a
configuration's name or file is checked as the plan loads), `harness.link` (a link fault's toxic is checked
by the link's own parser). Nothing else of `harness.drills`: every
later stage takes these types, none of them is known here.
"""
