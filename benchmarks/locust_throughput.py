"""Requests/s per Locust process for unary calls against `drill serve`, and where the time goes.

Starts `drill serve` (fault switch on) and runs headless Locust subprocesses on
127.0.0.1, bounded in time:

* throughput: the `throughput` profile (organic users, as fast as possible), one
  Locust process, with the hub threadpool tracking the users (the default) and
  pinned at gevent's 10; reports req/s and CPU microseconds per request of the
  Locust process and of the server (the machine is shared: both compete for CPU);
* raw: the same calls from a bare gevent + grpc loop (no Locust, with and
  without the harness client interceptor), the ceiling Locust sits on;
* blast radius: organic p50 without faults vs with delay:250 on drill users;
* hit share: drill failures / drill calls for abort:UNAVAILABLE at ratio 30.

    .venv/bin/python benchmarks/locust_throughput.py [--seconds 10] [--users 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psutil

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
PROFILES = ROOT / "loadtests" / "profiles"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(port)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def cpu_s(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def locust(host: str, profile: str, seconds: float, *args: str, server: psutil.Process | None = None) -> dict:
    """One headless Locust run; returns its CSV rows and CPU seconds (Locust, server)."""
    with tempfile.TemporaryDirectory() as tmp:
        prefix = f"{tmp}/run"
        cmd = [str(BIN / "locust"), "--config", str(PROFILES / f"{profile}.conf"), "--host", host]
        cmd += ["--headless", "-t", f"{seconds:g}s", "--csv", prefix, "--exit-code-on-error", "0", *args]
        server_before = cpu_s(server) if server else 0.0
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        ps = psutil.Process(proc.pid)
        locust_cpu = 0.0
        try:
            while proc.poll() is None:
                try:
                    locust_cpu = cpu_s(ps)
                except psutil.Error:
                    break
                time.sleep(0.2)
            proc.wait(timeout=seconds + 30)
        finally:
            stop(proc)
        server_cpu = cpu_s(server) - server_before if server else 0.0
        with open(f"{prefix}_stats.csv", newline="") as fh:
            rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(fh)}
    return {"rows": rows, "locust_cpu_s": locust_cpu, "server_cpu_s": server_cpu}


RAW = r"""
import sys, time, resource
from gevent import monkey; monkey.patch_all()
import grpc.experimental.gevent as g; g.init_gevent()
import gevent, grpc
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import SyncDrillClientInterceptor
host, users, seconds, icpt = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
gevent.get_hub().threadpool.maxsize = users + 8
count = [0]
def user(end):
    ch = grpc.insecure_channel(host)
    if icpt:
        ch = grpc.intercept_channel(ch, SyncDrillClientInterceptor(service="bench"))
    stub = drill_pb2_grpc.DemoStub(ch)
    while time.monotonic() < end:
        stub.Call(drill_pb2.CallRequest(), timeout=2)
        count[0] += 1
r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.monotonic()
gevent.joinall([gevent.spawn(user, t0 + seconds) for _ in range(users)])
el = time.monotonic() - t0; r1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
print(count[0] / el, cpu / max(count[0], 1) * 1e6)
"""


RAW_THREADS = r"""
import sys, time, resource, threading
import grpc
from harness.demo.proto import drill_pb2, drill_pb2_grpc
host, users, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
count = [0]
lock = threading.Lock()
def user(end):
    stub = drill_pb2_grpc.DemoStub(grpc.insecure_channel(host))
    n = 0
    while time.monotonic() < end:
        stub.Call(drill_pb2.CallRequest(), timeout=2)
        n += 1
    with lock:
        count[0] += n
r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.monotonic()
ts = [threading.Thread(target=user, args=(t0 + seconds,)) for _ in range(users)]
[t.start() for t in ts]; [t.join() for t in ts]
el = time.monotonic() - t0; r1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
print(count[0] / el, cpu / max(count[0], 1) * 1e6)
"""


def raw(host: str, users: int, seconds: float, interceptor: bool, script: str = RAW) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-c", script, host, str(users), str(seconds), "1" if interceptor else "0"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=True,
    )
    rps, us = out.stdout.split()
    return float(rps), float(us)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    port, mport = free_port(), free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "serve", "--port", str(port), "--metrics-port", str(mport)]
        + ["--enable-faults", "--seed", "7", "--service", "bench"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    host = f"127.0.0.1:{port}"
    results: dict = {"cpus": os.cpu_count(), "load_avg_1m_at_start": os.getloadavg()[0], "users": args.users}
    try:
        wait_port(port)
        sp = psutil.Process(server.pid)
        u, s = str(args.users), args.seconds
        for label, pool in (("threadpool=auto", "0"), ("threadpool=10", "10")):
            r = locust(host, "throughput", s, "-u", u, "-r", u, "--drill-threadpool", pool, "OrganicUser", server=sp)
            agg = r["rows"][("", "Aggregated")]
            n = int(agg["Request Count"]) or 1
            results[f"locust {label}"] = {
                "req_per_s": round(float(agg["Requests/s"])),
                "p50_ms": float(agg["50%"]),
                "locust_cpu_us_per_req": round(r["locust_cpu_s"] / n * 1e6),
                "server_cpu_us_per_req": round(r["server_cpu_s"] / n * 1e6),
            }
        for icpt in (False, True):
            rps, us = raw(host, args.users, s, icpt)
            name = "raw gevent+grpc" + (" +interceptor" if icpt else "")
            results[name] = {"req_per_s": round(rps), "cpu_us_per_req": round(us)}
        rps, us = raw(host, args.users, s, False, RAW_THREADS)
        results["raw OS threads grpc (no gevent)"] = {"req_per_s": round(rps), "cpu_us_per_req": round(us)}
        common = ("-u", u, "-r", u, "--drill-rate", "5", "--drill-ratio", "100", "--drill-cancel-share", "0")
        for label, pool in (("auto", "0"), ("pinned 10", "10")):
            p50 = {}
            for d in ("", "delay:250"):
                r = locust(host, "smoke", s, *common, f"--drill-directive={d}", "--drill-threadpool", pool)
                p50[d or "none"] = float(r["rows"][("grpc", "organic/Call")]["50%"])
            results[f"organic p50 ms, threadpool {label}"] = p50
        for ratio in (10, 30, 70):
            r = locust(host, "smoke", s, "-u", u, "-r", u, "--drill-ratio", str(ratio), "--drill-cancel-share", "0")
            row = r["rows"][("grpc", "drill/Call")]
            share = int(row["Failure Count"]) / max(int(row["Request Count"]), 1)
            results[f"drill hit share at ratio {ratio}"] = {
                "share": round(share, 3),
                "calls": int(row["Request Count"]),
            }
    finally:
        stop(server)
    results["load_avg_1m_at_end"] = os.getloadavg()[0]
    for k, v in results.items():
        print(f"{k:40} {v}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
