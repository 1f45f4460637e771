"""Where a Locust process's time goes per unary call: py-spy samples split by layer.

    .venv/bin/pip install py-spy   # a profiler, not a dependency of the harness
    .venv/bin/python benchmarks/locust_profile.py [--seconds 6] [--users 20] [--tree DIR]

Starts `drill serve` pinned to one core and one closed-loop Locust process of
organic users (the `throughput` profile) pinned to another, samples the Locust
process with py-spy (`--nonblocking`, idle threads left out, so samples follow
CPU) once it is warm, and splits the samples by the layer of the innermost frame
that belongs to a known layer: grpc's Python and C core (`grpc/`), gevent's hub
and threadpool (`gevent/`, greenlet), Locust's task loop and stats (`locust/`),
the harness's tagging and counting (`harness/`, `loadtests/`, `prometheus_client/`),
other. Multiplied by the run's CPU per call, each share is µs per call.
`--tree DIR` profiles another checkout's Locust user (before/after).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._cpu import (  # noqa: E402
    cores,
    cpu_seconds,
    header,
    load_average,
    popen_pinned,  # noqa: E402
)
from benchmarks.locust_throughput import WARMUP_S, locust_cmd, locust_env, scrape_calls, wait_ports  # noqa: E402
from harness.procs.spawn import start_serve  # noqa: E402

LAYERS = (
    ("gevent hub + hand-off", ("gevent/", "greenlet", "loadtests/grpc_gevent.py")),
    ("harness tagging + metrics", ("/harness/", "/loadtests/", "prometheus_client/")),
    ("Locust loop + stats", ("locust/",)),
    ("grpc (Python + C core)", ("grpc/", "cygrpc")),
)


def layer_of(stack: list[str]) -> str:
    """The layer of the innermost frame that belongs to one (frames are outermost first)."""
    for frame in reversed(stack):
        for name, needles in LAYERS:
            if any(n in frame for n in needles):
                return name
    return "other"


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread of `pid` by kind: grpc's own C-core threads (no Python frames, so py-spy
    never samples them) and the threads that run Python."""
    out = {"grpc core threads": 0.0, "python threads": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        kind = "grpc core threads" if name.startswith(("event_engine", "grpc_", "lifeguard")) else "python threads"
        out[kind] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def split(raw: pathlib.Path) -> dict[str, float]:
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if stack:
            counts[layer_of(stack.split(";"))] += int(n)
    total = sum(counts.values()) or 1
    return {name: counts[name] / total for name, _ in (*LAYERS, ("other", ()))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--tree", default=str(ROOT))
    args = ap.parse_args()
    pyspy = shutil.which("py-spy", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("py-spy")
    if not pyspy:
        print("locust_profile: py-spy not found (.venv/bin/pip install py-spy)", file=sys.stderr)
        return 2
    tree = pathlib.Path(args.tree).resolve()
    print(header("locust_profile"), flush=True)
    server_core, client_core = cores()
    work = pathlib.Path(tempfile.mkdtemp(prefix="drill-profile-"))
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {server_core})
    try:
        server = start_serve("bench", ["--port", "0", "--metrics-port", "-1", "--service", "bench"], work)
    finally:
        os.sched_setaffinity(0, saved)
    try:
        ports = work / "ports"
        run_s = WARMUP_S + args.seconds + 4
        cmd = locust_cmd(
            tree, server.address, "throughput", run_s, str(work / "run"), "-u", str(args.users), "-r",
            str(args.users), "--drill-metrics-port", "0", "--drill-ports-dir", str(ports), "OrganicUser",
        )  # fmt: skip
        proc = popen_pinned(
            cmd, client_core, cwd=tree, env=locust_env(tree), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        port = wait_ports(ports, proc)
        time.sleep(WARMUP_S)
        c0, n0, t0, k0 = cpu_seconds(proc.pid), scrape_calls(port), time.monotonic(), thread_cpu(proc.pid)
        raw = work / "profile.txt"
        subprocess.run(
            [pyspy, "record", "-p", str(proc.pid), "-o", str(raw), "-f", "raw", "-r", "200",
             "-d", f"{args.seconds:g}", "--nonblocking"],
            capture_output=True, check=True,
        )  # fmt: skip
        c1, n1, t1, k1 = cpu_seconds(proc.pid), scrape_calls(port), time.monotonic(), thread_cpu(proc.pid)
        proc.wait(timeout=run_s + 30)
    finally:
        server.stop()
    calls = max(n1 - n0, 1)
    us = (c1 - c0) / calls * 1e6
    core_us = (k1["grpc core threads"] - k0["grpc core threads"]) / calls * 1e6
    python_us = us - core_us  # threads that exited meanwhile are counted here, with the Python threads
    shares = split(raw)
    per_call = {name: share * python_us for name, share in shares.items()}
    per_call["grpc core threads"] = core_us
    print(f"\n{tree.name}: {calls / (t1 - t0):.0f} calls/s, Locust process CPU {us:.0f} µs per call "
          f"(threads running Python {python_us:.0f}, split by py-spy samples; grpc's C-core threads {core_us:.0f})")
    for name, value in per_call.items():
        print(f"  {name:<28}{value:6.0f} µs/call")
    print(f"# load average at end: {load_average()}; raw samples: {raw}")
    print("profile " + json.dumps({"cpu_us_per_call": round(us), **{k: round(v) for k, v in per_call.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
