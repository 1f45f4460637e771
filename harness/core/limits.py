"""The largest (and smallest) values the harness accepts, in one place, each with the reason for it.

A plan's fields (`harness.drills.plan`) and the commands' flags (`harness.core.cliargs`) take
their bounds from here, so `phases.fault: .inf` and `drill serve --port 99999` are refused the
same way: on one line naming the key or flag, before anything starts (exit 2). A bound is never a
target: it sits past anything a drill on one machine can use, so that a typo (`1e12` for `12`)
or an infinity cannot validate and then run for ever. docs/drills.md lists the plan's bounds.
"""

from __future__ import annotations

from harness.core.faults import ABSOLUTE_MAX_DELAY_MS, MAX_ATTEMPTS
from harness.core.metrics import LATENCY_BUCKETS

#: TCP and UDP port numbers are 16 bits.
MAX_PORT = 65_535

#: The hit formula is 64-bit two's complement arithmetic, bit-compatible with the reference Java
#: interceptor (a Java `long` seed); a seed outside it would hit other requests in a Java fleet.
MIN_SEED, MAX_SEED = -(2**63), 2**63 - 1

#: One phase (warm-up, fault, recovery) of a trial, seconds. A drill measures recovery in seconds;
#: an hour-long phase is already a soak test (benchmarks/soak.py), and every trial keeps its
#: per-second series in memory. Windows read inside a phase (SLO hold, window, grace) share it.
MAX_PHASE_S = 3600.0

#: A call's deadline or a hop's work per call, seconds: the longest delay a server can inject at all
#: (harness.core.faults.ABSOLUTE_MAX_DELAY_MS). A longer deadline never turns an injected delay
#: into DEADLINE_EXCEEDED, so it measures nothing a 600-s one does not.
MAX_DEADLINE_S = ABSOLUTE_MAX_DELAY_MS / 1000

#: Calls/s one user sends. Each user's calls are timed on the event loop's clock, whose timers
#: (epoll) have 1-ms resolution: a user cannot keep a schedule tighter than one call a millisecond.
MAX_USER_RATE = 1000.0

#: Messages/s within one client stream (`stack.edge.message_rate`): each message is timed on the event
#: loop's clock, as a user's calls are (MAX_USER_RATE), so no stream keeps a tighter pace.
MAX_MESSAGE_RATE = 1000.0

#: Calls/s one load process offers, all users together. The aio client costs ~250 µs of CPU per
#: call (benchmarks/results/perf-interceptor_overhead-1.txt: ~2,900 calls/s on one core), a Locust
#: worker ~400 µs (perf-summary.txt: 2,255 calls/s); 10,000 is past what any core sends, so a plan
#: above it cannot be offered and only falls behind (the trial would be `insufficient_data`).
MAX_LOAD_RPS = 10_000.0

#: Users per traffic class: more users than the load's calls/s would each send under one a second.
MAX_USERS = 10_000

#: Calls in flight per user, handlers per hop replica: a whole second of the largest load.
MAX_INFLIGHT = 10_000

#: Calls a hop replica queues before shedding: ten seconds of the largest load.
MAX_QUEUE = 100_000

#: An SLO's p99 bound, seconds: the latency histograms' largest finite bucket (30 s,
#: harness.core.metrics.LATENCY_BUCKETS); a p99 above it cannot be told apart from +Inf.
MAX_P99_S = LATENCY_BUCKETS[-1]

#: gRPC keepalive and idle times, ms. gRPC takes them as a C int (≤ 2^31−1 ms, 24.8 days);
#: a day is longer than any drill.
MAX_CHANNEL_MS = 86_400_000

#: Waits for something outside the harness (a stack's switch, its readiness, a downstream's ready
#: file, Locust starting): an hour, as a phase.
MAX_WAIT_S = 3600.0

#: Trials per configuration: 100 interleaved trials of the shipped retry-storm plan (42 s each) take
#: over an hour per configuration.
MAX_TRIALS = 100

#: Locust processes on this machine (driver locust).
MAX_WORKERS = 64

#: Replicas of one hop the runner starts (each a `drill serve` process on this machine).
MAX_REPLICAS = 16

#: Connections `drill probe half-open` opens: each holds a file descriptor until it is watched out.
MAX_PROBE_CONNECTIONS = 10_000

#: Calls per traffic class `drill client` sends.
MAX_CLIENT_CALLS = 100_000

#: Linux's PID_MAX_LIMIT on 64-bit systems (2^22): no process id is larger.
MAX_PID = 4_194_304

#: `drill analyze --last`: longer than any Prometheus keeps by default (15 days).
MAX_ANALYZE_RANGE_S = 31 * 86_400.0

__all__ = [
    "MAX_ATTEMPTS", "MAX_PORT", "MIN_SEED", "MAX_SEED", "MAX_PHASE_S", "MAX_DEADLINE_S", "MAX_USER_RATE",
    "MAX_MESSAGE_RATE", "MAX_LOAD_RPS", "MAX_USERS", "MAX_INFLIGHT", "MAX_QUEUE", "MAX_P99_S", "MAX_CHANNEL_MS",
    "MAX_WAIT_S", "MAX_TRIALS", "MAX_WORKERS", "MAX_REPLICAS", "MAX_PROBE_CONNECTIONS", "MAX_CLIENT_CALLS", "MAX_PID",
    "MAX_ANALYZE_RANGE_S",
]  # fmt: skip
