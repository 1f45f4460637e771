"""Locust event wiring of a drill profile: arguments, weights, phase state, /metrics.

Importing this module registers the listeners (Locust's `init_command_line_parser`
and `init` events), so a locustfile only imports it. Per role:

* standalone (local runner): the target method resolved (bad input: one line, exit), weights, phase
  state exported, /metrics on the base port;
* master: the same (it dispatches users);
* worker: the target method resolved when a run starts (its options come with the spawn message),
  phase state from `drill_phase` messages, /metrics on base + 1 + worker index.
"""

from __future__ import annotations

import logging

from locust import events
from locust.runners import MasterRunner, WorkerRunner

from harness.core.errors import BadInput
from loadtests import client_metrics, method_target, shape
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
