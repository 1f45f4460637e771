"""`drill proxy --workers N`: N proxy processes behind one listening port, for more than one core.

One proxy process is one Python event loop, so one core at most, on either data plane (`--plane aio`, the
grpc.aio handlers of `harness.proxy`; `--plane link`, the frame relay of `harness.link.plane`): both planes call
this supervisor, which sits below them, after their own checks of the command line. With `--workers N`
this process becomes a supervisor: it reserves the port, starts N ordinary `drill
proxy` processes that each bind it with SO_REUSEPORT (the kernel spreads new
connections over them; a connection stays with the worker that accepted it, as a
gRPC channel stays on one connection), and owns their lifetime:

- the ready file is written once every worker serves: `port`, `metrics_ports` (one
  /metrics per worker: a stack lists them all as the hop's replicas), `pids`;
- SIGUSR1 (the one-way stop, `drill stop`) is passed to every worker at once;
- SIGINT/SIGTERM stop every worker; a worker that exits stops the others and the
  supervisor exits 1 with one line, so the port never serves with fewer workers than
  it says.

Each worker is a whole proxy: the same pipeline, its own metrics, the same audit
stream (their stderr is the supervisor's).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time

from harness.core.errors import RunFailed
from harness.demo.lifecycle import announce

#: How long the workers may take to serve, together.
READY_TIMEOUT_S = 60.0


def reserve(host: str, port: int) -> socket.socket:
    """A bound, not listening, SO_REUSEPORT socket on `port` (0: a free one): the workers bind beside it and
    nobody else takes the port meanwhile (another user's socket without SO_REUSEPORT is refused)."""
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        s.bind((host, port))
    except OSError as exc:
        s.close()
        raise RunFailed(f"proxy: cannot listen on {host}:{port}: {exc.strerror}") from None
    return s


def worker_argv(args: argparse.Namespace, index: int, port: int, ready: pathlib.Path) -> list[str]:
    """Worker `index`'s command: this one's options, the shared port, its own /metrics port and ready file."""
    metrics_port = args.metrics_port + index if args.metrics_port > 0 else args.metrics_port
    argv = [sys.executable, "-m", "harness.cli", "proxy", "--upstream", args.upstream, "--host", args.host,
            "--port", str(port), "--reuse-port", "--metrics-port", str(metrics_port), "--service", args.service,
            "--ready-file", str(ready), "--plane", getattr(args, "plane", "aio")]  # fmt: skip
    if args.enable_faults:
        argv.append("--enable-faults")
    if args.seed is not None:
        argv += ["--seed", str(args.seed)]
    if args.instance_id:
        argv += ["--instance-id", f"{args.instance_id}-{index}"]
    if args.max_in_flight is not None:  # else each worker reads DRILL_MAX_IN_FLIGHT as this process would
        argv += ["--max-in-flight", str(args.max_in_flight)]
    if args.max_backlog is not None:
        argv += ["--max-backlog", str(args.max_backlog)]
    for flag, value in (("--descriptor-set", args.descriptor_set), ("--proto", args.proto)):
        if value:
            argv += [flag, value]
    for path in args.proto_path:
        argv += ["--proto-path", path]
    return argv


def supervise(args: argparse.Namespace) -> int:
    """Run `args.workers` proxies on one port until SIGINT/SIGTERM; 0, or RunFailed when a worker fails."""
    held = reserve(args.host, args.port)
    port = held.getsockname()[1]
    stopping = False

    def on_stop(sig, frame) -> None:
        nonlocal stopping
        stopping = True

    procs: list[subprocess.Popen] = []

    def on_usr1(sig, frame) -> None:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGUSR1)

    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGUSR1, on_usr1)
    with tempfile.TemporaryDirectory(prefix="drill-proxy-") as tmp:
        readies = [pathlib.Path(tmp) / f"worker-{i}.json" for i in range(args.workers)]
        try:
            for i, ready in enumerate(readies):
                procs.append(subprocess.Popen(worker_argv(args, i, port, ready), stdin=subprocess.DEVNULL))
            infos = _wait_ready(procs, readies, lambda: stopping)
            held.close()  # the workers listen: the reservation has done its job
            if infos is None:
                return 0
            _write_ready(args, port, infos)
            while not stopping:
                for i, p in enumerate(procs):
                    if p.poll() is not None:
                        raise RunFailed(f"proxy: worker {i} (pid {p.pid}) exited with {p.returncode}; the others "
                                        "were stopped")  # fmt: skip
                time.sleep(0.2)
            return 0
        finally:
            held.close()
            _stop(procs)


def _wait_ready(procs, readies, stopping) -> list[dict] | None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(r.exists() for r in readies):
        if stopping():
            return None
        for i, p in enumerate(procs):
            if p.poll() is not None:
                raise RunFailed(f"proxy: worker {i} exited with {p.returncode} at start (its line above says why)")
        if time.monotonic() > deadline:
            raise RunFailed(f"proxy: the workers did not serve within {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.05)
    return [json.loads(r.read_text()) for r in readies]


def _write_ready(args: argparse.Namespace, port: int, infos: list[dict]) -> None:
    ports = [i["metrics_port"] for i in infos]
    announce(args, port, {"metrics_port": ports[0], "metrics_ports": ports, "pids": [i["pid"] for i in infos]})


def _stop(procs: list[subprocess.Popen], grace_s: float = 5.0) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
