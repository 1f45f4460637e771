"""Locust event wiring of a drill profile: arguments, weights, phase state, /metrics.

Importing this module registers the listeners (Locust's `init_command_line_parser`
and `init` events), so a locustfile only imports it. Per role:

* standalone (local runner): the target method resolved (bad input: one line, exit), weights, phase
  state exported, /metrics on the base port;
* master: the same (it dispatches users);
* worker: the target method resolved when a run starts (its options come with the spawn message),
  phase state from `drill_phase` messages, /metrics on base + 1 + worker index.

At the end (Locust's `quitting`), a standalone process or a master that ran a load which never reached
its target (`loadtests.outcome`: no call OK or failed by an injected fault) sets the exit code to 1 and
ends its output with one line saying so; a worker leaves that to its master, which holds every worker's
counts.
"""

from __future__ import annotations

import logging

from locust import events
from locust.runners import MasterRunner, WorkerRunner

from harness.core.errors import BadInput
from loadtests import client_metrics, method_target, outcome, shape
from loadtests import options as drill_options
from loadtests.phase import STATE
from loadtests.users import configure_weights

log = logging.getLogger("drill.loadtests")


def role_of(runner) -> str:
    if isinstance(runner, MasterRunner):
        return "master"
    if isinstance(runner, WorkerRunner):
        return "worker"
    return "local"


@events.init_command_line_parser.add_listener
def _arguments(parser, **_kw) -> None:
    drill_options.add_arguments(parser)
    parser.add_argument(
        "--drill-master-wait",
        env_var="LOCUST_DRILL_MASTER_WAIT",
        type=master_wait,
        default=str(DEFAULT_MASTER_WAIT_S),
        help="seconds a worker waits for a master that does not answer, at start and during a run, before it "
        f"gives up ({DEFAULT_MASTER_WAIT_S}; Locust's own: 300 at start, 60 during a run)",
    )


#: A worker gives up on a master silent this long (s): at start (no answer to its hello) and during a run (no
#: heartbeat). Compose starts the workers once the master serves (its healthcheck), so a master that is
#: still silent after this is gone.
DEFAULT_MASTER_WAIT_S = 15


def master_wait(text: str) -> float:
    """`--drill-master-wait`: checked, and applied as it is parsed (Locust reads these module settings when
    the worker runner connects, right after parsing its options, with no event in between): the worker asks
    once a second and gives up after `text` seconds; during a run it quits after `text` s without heartbeat."""
    import argparse
    import math

    from locust import runners

    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a number of seconds") from None
    if not 0 < seconds <= 3600:
        raise argparse.ArgumentTypeError(f"{text}: must be > 0 and <= 3600 seconds")
    runners.CONNECT_TIMEOUT = 1
    runners.CONNECT_RETRY_COUNT = max(1, math.ceil(seconds)) - 1  # it gives up on the retry past the count
    runners.MASTER_HEARTBEAT_TIMEOUT = seconds
    return seconds


@events.init.add_listener
def _init(environment, **_kw) -> None:
    if environment.parsed_options is None or environment.runner is None:
        return  # library use without Locust's CLI: nothing to wire
    role = role_of(environment.runner)
    try:
        opts = drill_options.from_namespace(environment.parsed_options)
    except ValueError as exc:  # options that argparse could not check one by one (e.g. two type sources)
        method_target.exit_with(BadInput(str(exc)), environment.runner)
    if role != "worker":  # a worker gets --drill-method and the rest from the master when a run starts
        method_target.check_or_exit(opts, environment.host, environment.runner)
    configure_weights(opts)
    STATE.reset(opts, export=True)
    if role == "worker":
        environment.runner.register_message(shape.PHASE_MESSAGE, shape.on_phase_message)
        client_metrics.serve_when_indexed(opts, environment.runner)
    else:
        server = getattr(environment.runner, "server", None)  # the master's worker port (0 = bound at random)
        client_metrics.serve(opts, role, master_port=getattr(server, "port", None))


@events.test_start.add_listener
def _test_start(environment, **_kw) -> None:
    _STARTED[:] = [True]
    if environment.parsed_options is None:
        return
    # Workers get the master's --drill-* values with the spawn message: re-read them.
    opts = drill_options.from_namespace(environment.parsed_options)
    if role_of(environment.runner) == "worker":
        method_target.check_or_log(opts, environment.host)
    configure_weights(opts)
    STATE.reset(opts, export=True)


@events.test_stop.add_listener
def _test_stop(environment, **_kw) -> None:
    STATE.finish()


#: the line this process ends its output with when its load did not reach the target (set at `quitting`)
_VERDICT: list[str] = []
#: whether a run started in this process (`test_start`)
_STARTED: list[bool] = []


@events.quitting.add_listener
def _quitting(environment, **_kw) -> None:
    """A load that never reached its target is a failed run (exit 1), decided where every call is counted."""
    runner = environment.runner
    if environment.parsed_options is None or runner is None or role_of(runner) == "worker":
        return
    if environment.process_exit_code not in (None, 0) or not _STARTED:
        return  # a failure of its own already decided, or no run started (a web UI closed before one)
    line = outcome.failure(tally(runner.stats))
    if line:
        environment.process_exit_code = 1
        _VERDICT[:] = [line]


@events.quit.add_listener
def _quit(exit_code: int, **_kw) -> None:
    """After Locust's summary: the verdict is the output's last line, what a runner shows of a load's log."""
    if _VERDICT and exit_code:
        method_target.say(_VERDICT[0])


def tally(stats) -> outcome.Tally:
    """The run's calls from Locust's stats: requests of type `grpc` (OK or failed), `grpc-cancelled`, and the
    failures by status, those the server marked as injected apart (their message says so)."""
    from locust.stats import StatsError

    from loadtests.grpc_user import CANCELLED_TYPE, REQUEST_TYPE

    t = outcome.Tally()
    for (_name, method), entry in stats.entries.items():
        if method == REQUEST_TYPE:
            t.sent += entry.num_requests
            t.ok += entry.num_requests - entry.num_failures
        elif method == CANCELLED_TYPE:
            t.cancelled += entry.num_requests
    for err in stats.errors.values():
        if err.method != REQUEST_TYPE:
            continue
        text = StatsError.parse_error(err.error)
        t.failed[outcome.status_of(text)] += err.occurrences
        if outcome.INJECTED_MARK in text:
            t.injected += err.occurrences
    return t
