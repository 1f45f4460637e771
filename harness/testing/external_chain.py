"""A 4-hop demo chain of `drill serve` processes started *outside* the drill runner, as a user's stack would be.

A stack's switch command (tests, and the saved run of benchmarks/stacks/external-chain.yaml):
`python -m harness.testing.external_chain up CONFIG --dir DIR --net 127.77.0` stops the chain it
started before (by the PIDs it recorded), starts gateway → order → account → ledger again with the
resilience configuration CONFIG (each hop on its own loopback address, fixed ports as a deployment
has them: 127.77.0.1:50051 is the gateway, :9464 its /metrics), waits until every hop serves,
records the switch in DIR/switches.log and returns; the processes stay. `down` stops them.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from harness.core.environ import environ_now

HOPS = ("gateway", "order", "account", "ledger")
ROOT = pathlib.Path(__file__).resolve().parents[2]


def address(net: str, i: int) -> str:
    return f"{net}.{i + 1}"


def stop(workdir: pathlib.Path) -> None:
    pids_file = workdir / "pids.json"
    pids = json.loads(pids_file.read_text()) if pids_file.exists() else []
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + 10
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    pids_file.unlink(missing_ok=True)


def hop_args(hop: str, bounded: bool) -> list[str]:
    """Capacity flags of one hop: the demo default, or with `bounded` the retry-storm plan's own (one source)."""
    if not bounded:
        return ["--work-ms", "1"]
    from harness.drills.plan.files import load_plan

    spec = next(h for h in load_plan("retry-storm").hops if h.name == hop)
    args = ["--work-ms", str(spec.work_ms), "--concurrency", str(spec.concurrency), "--queue", str(spec.queue)]
    return [*args, "--shed-code", spec.shed_code, *(["--admission"] if spec.admission else [])]


def up(config: str, workdir: pathlib.Path, net: str, bounded: bool = False) -> int:
    workdir.mkdir(parents=True, exist_ok=True)
    stop(workdir)
    env = environ_now(PYTHONPATH=str(ROOT), DRILL_CONFIG=config)
    pids, ready = [], []
    for i, hop in enumerate(HOPS):
        ready_file = workdir / f"{hop}.ready.json"
        ready_file.unlink(missing_ok=True)
        argv = [
            sys.executable, "-m", "harness.cli", "serve", "--host", address(net, i), "--port", "50051",
            "--metrics-port", "9464", "--service", hop, "--instance-id", f"{hop}-0", "--enable-faults", "--seed", "7",
            *hop_args(hop, bounded), "--ready-file", str(ready_file),
        ]  # fmt: skip
        if i + 1 < len(HOPS):
            argv += ["--downstream", f"{address(net, i + 1)}:50051", "--config", config]
        with open(workdir / f"{hop}.log", "ab") as log:  # appended: the audit lines of every switch stay
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    cwd=ROOT, start_new_session=True)  # fmt: skip
        pids.append(proc.pid)
        ready.append((hop, proc, ready_file))
    (workdir / "pids.json").write_text(json.dumps(pids))
    deadline = time.monotonic() + 60
    for hop, proc, ready_file in ready:
        while not ready_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                print(f"chain: {hop} did not start (see {workdir / hop}.log)", file=sys.stderr)
                return 1
            time.sleep(0.05)
    with open(workdir / "switches.log", "a") as fh:
        fh.write(config + "\n")
    print(f"chain: serving {config}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("action", choices=("up", "down"))
    p.add_argument("config", nargs="?", default="naive")
    p.add_argument("--dir", required=True)
    p.add_argument("--net", default="127.77.0")
    p.add_argument("--bounded", action="store_true", help="each hop's capacity as in the retry-storm plan")
    args = p.parse_args()
    workdir = pathlib.Path(args.dir)
    if args.action == "down":
        stop(workdir)
        return 0
    return up(args.config, workdir, args.net, args.bounded)


if __name__ == "__main__":
    sys.exit(main())
