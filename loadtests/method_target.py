"""What the users of one Locust process call: the demo's `Demo/Call`, or any method of any service.

With `--drill-method pkg.Service/Method` the users call that method, whatever its kind,
with the request `--drill-request` gives as protobuf JSON (an object; for a client stream
a list of objects, sent `--drill-message-rate` a second), its types found by the server's
reflection at `--host` (default), in `--drill-descriptor-set` or in `--drill-proto`
(compiled with grpcio-tools). The options are checked as a stack file's `stack.edge` is
(`edge.edge_spec`) and the method is resolved once per process by `edge.resolve_edge`, the
runner's own resolver, so a stack edge and a Locust user take and refuse a method, a request
and a message rate alike: the request is serialized once and every
call sends the same bytes (the request id travels in metadata), through grpc's
multicallables without serializers, as ghz and grpcurl do. Without `--drill-method` the
users call the demo's `Demo/Call` through its generated stub, as they always did.

Bad input (no such method, a request that does not fit, reflection off, an unreachable
host) is found when Locust starts — at `init` on a standalone process or a master, at
`test_start` on a worker, which gets its options from the master — and is one line
(`drill: locust: …`) and an exit, never a traceback per request.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import pathlib
import sys
from typing import Any, NoReturn

from harness.core.errors import BadInput, DrillError
from harness.core.faults import Kind
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.drills.stack import edge
from loadtests.options import DrillOptions

log = logging.getLogger("drill.loadtests")

#: How errors name the inputs: Locust's options, not a stack file's keys.
LOCUST_NAMES = edge.InputNames(
    method="--drill-method",
    request="--drill-request",
    proto="--drill-proto",
    descriptor_set="--drill-descriptor-set",
    edge="--host",
    address="--host",
    sources="give --drill-proto or --drill-descriptor-set",
    message_rate="--drill-message-rate",
    proto_path="--drill-proto-path",
    address_key="--host",
)


@dataclasses.dataclass(frozen=True)
class Target:
    """One method as the users call it: `stub_class(channel)` has an attribute `method` (its multicallable),
    `request` is what a unary or server-streaming call sends, `messages` what a client stream sends."""

    stub_class: Any
    method: str
    kind: Kind
    request: Any
    messages: tuple[bytes, ...] = ()
    message_rate: float | None = None

    @property
    def unary(self) -> bool:
        return self.kind == Kind.UNARY


#: The demo's `Call` (an empty `CallRequest` answers OK on `drill serve`).
DEMO = Target(drill_pb2_grpc.DemoStub, "Call", Kind.UNARY, drill_pb2.CallRequest())

_FACTORIES = {
    Kind.UNARY: "unary_unary",
    Kind.SERVER_STREAMING: "unary_stream",
    Kind.CLIENT_STREAMING: "stream_unary",
    Kind.BIDI_STREAMING: "stream_stream",
}


class _BytesStub:
    """A stub for one method: its multicallable without serializers (bytes in, bytes out)."""

    def __init__(self, channel, full: str, name: str, kind: str) -> None:
        setattr(self, name, getattr(channel, _FACTORIES[kind])(full))


def request_json(text: str) -> Any:
    """`--drill-request`: JSON text, or `@FILE` holding it (empty is refused: `{}` is the default message)."""
    text = text.strip()
    source = "--drill-request"
    if not text:
        raise BadInput("--drill-request is empty: give the request as a JSON object ({} for the default message)")
    if text.startswith("@"):
        path = pathlib.Path(text[1:])
        try:
            text = path.read_text()
        except OSError as exc:
            raise BadInput(f"--drill-request @{path}: cannot read it ({exc.strerror})") from None
        source = f"--drill-request @{path}"
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BadInput(f"{source} is not JSON: {exc}") from None


def resolve(opts: DrillOptions, address: str) -> Target:
    """The process's target for these options (resolved once per distinct input; raises DrillError)."""
    if not opts.method:
        return DEMO
    key = (address, opts.method, opts.request, opts.proto, opts.descriptor_set, opts.proto_path, opts.message_rate)
    got = _RESOLVED.get(key)
    if got is None:
        fields = dict(
            address=address, method=opts.method, request=request_json(opts.request), proto=opts.proto,
            descriptor_set=opts.descriptor_set, proto_path=list(opts.proto_path), message_rate=opts.message_rate,
        )  # fmt: skip
        # the stack file's own checks and resolver: an option takes and refuses what its key does
        call = edge.resolve_edge(edge.edge_spec(fields, LOCUST_NAMES), names=LOCUST_NAMES)
        name = call.method.rsplit("/", 1)[1]
        stub_class = functools.partial(_BytesStub, full=call.method, name=name, kind=call.kind)
        got = Target(stub_class, name, call.kind, call.request(""), call.messages(""), call.message_rate)
        _RESOLVED.clear()  # one target per process: a new run's options replace the old
        _RESOLVED[key] = got
    return got


_RESOLVED: dict[tuple, Target] = {}
#: the line a worker logged when its options did not resolve (its users stop instead of calling)
FAILED: dict[str, str] = {}


def check_or_exit(opts: DrillOptions, address: str | None, runner=None) -> None:
    """At Locust's start (standalone or master): resolve the target, or print one line and exit (2 bad input,
    1 an unreachable host)."""
    if not opts.method:
        return
    try:
        resolve(opts, _address(address))
    except DrillError as exc:
        exit_with(exc, runner)


def exit_with(exc: DrillError, runner=None) -> NoReturn:
    """One line on stderr, `drill: locust: …`, and the error's exit code (2 bad input, 1 unreachable).

    A master first ends the workers it forked itself (`--processes`): Locust's exit would leave them
    running (its exit hook stops waiting for them at once), and their shutdown lines would follow ours.
    """
    if runner is not None and hasattr(runner, "clients"):  # a master
        _end_forked_workers()
    say(str(exc))
    raise SystemExit(exc.exit_code)


def say(message: str) -> None:
    """`drill: locust: MESSAGE`, one line on stderr: how this locustfile reports what ends a run."""
    sys.stderr.write(f"drill: locust: {message}\n")
    sys.stderr.flush()


def _end_forked_workers(timeout_s: float = 5.0) -> None:
    """SIGTERM to this process's own children (the workers it forked), then wait until they exited, without
    reaping them: Locust's exit hook reaps its children and logs a traceback for any already reaped."""
    import os
    import signal
    import time

    import psutil  # a Locust dependency

    pids = [child.pid for child in psutil.Process().children()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    break
            except ChildProcessError:
                break
            time.sleep(0.05)


def check_or_log(opts: DrillOptions, address: str | None) -> None:
    """On a worker (its options came with the spawn message): resolve now, or log one line; its users stop."""
    FAILED.clear()
    if not opts.method:
        return
    try:
        resolve(opts, _address(address))
    except DrillError as exc:
        FAILED["error"] = str(exc)
        log.error("drill: locust: %s (this worker's users stop)", exc)


def _address(host: str | None) -> str:
    from loadtests.grpc_user import target_of

    try:
        return target_of(host)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
