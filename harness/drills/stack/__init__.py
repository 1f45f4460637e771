"""Stage 2, the stack: what a drill runs against, and the call its load makes (contracts §13: the local topology
is one kind of stack).

Owns: the demo chain the runner starts itself (`topology`, one `drill serve` per replica), services already
running (`targets.RunningStack`: a configuration's switch command, the readiness probe, audit lines, the
emergency stop), both behind one interface (`targets.DrillTarget`, `targets.target_for`), and the edge method
a load calls, of any kind, without a generated stub (`edge`: its kind and request bytes from a `.proto`, a
descriptor set or server reflection).

A trial's links (`links`: `drill link`'s relay, in the runner's process, in front of replicas; the link fault
set, removed and counted) belong to the target that starts them.

May import: `harness.drills.plan`, `harness.procs`, `harness.demo` (the demo's proto and emergency stop),
`harness.link` (the relay's Python API), `harness.core`. Independent of `readings`: how a stack is reached
says nothing of how it is measured. A new kind of target (a service behind a proxy, say) is a new
`DrillTarget` in `targets`.
"""
