"""Client CPU per unary call of one Locust process, measured apart from the server; organic p50 shift.

    .venv/bin/python benchmarks/locust_throughput.py [--seconds 8] [--users 20] [--rounds 3] [--json out.json]

One `drill serve` (fault switch on) pinned to one core, every load generator to
another (`os.sched_setaffinity`), CPU of each read from /proc over a window after
warm-up, calls counted from the Locust process's own `drill_client_calls_total`
at both ends of the window (scraped from the port it bound itself):

* **locust**: the `throughput` profile (organic users, closed loop, as fast as
  possible), `--rounds` runs per wait mode of the gRPC user, alternated
  (`native`, the default, and `greenlet`, `loadtests/grpc_gevent.py`): requests/s,
  Locust CPU µs per call, server CPU µs per call, medians;
* **hand-off designs without Locust** (`_client_variants.py`): the same calls from
  bare clients, one persistent process per design, alternated over `--rounds`
  rounds: Locust's blocking recipe on the hub threadpool, the future API with
  grpc's spin greenlet or with the native poller, plain OS threads and grpc.aio
  (grpc's own floor on this machine);
* **organic p50 shift**: two Locust processes at once (same noise for both), 20
  users at 5 calls/s each, one with `delay:250` on every drill call and one
  without; organic p50 of the delayed run minus that of the quiet one, median of
  `--pairs` pairs.

* **the user for any service** (`--drill-method`, `loadtests/method_target.py`): the same
  organic users calling the same `Demo/Call` as a method found by the server's reflection,
  with a JSON request (`{}`), through grpc's bytes multicallables, runs paired with the demo
  user's (`native`) in every round, their order swapped every other round: the ratio of
  their Locust CPU per call, per round and its median. `--generic-only` runs just those pairs.

The last line is machine-readable: `locust cpu_us_per_call=N rps=N organic_p50_shift_ms=N
generic_over_demo=R` (the default wait mode's medians; the p50 shift is left out with
`--generic-only`). `--tree DIR` runs the Locust parts from another checkout (e.g. an export
of an older commit) for before/after figures (no user for any service there).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._cpu import cores, cpu_seconds, header, load_average, popen_pinned  # noqa: E402
from harness.procs.spawn import start_serve  # noqa: E402

BIN = pathlib.Path(sys.executable).parent
WARMUP_S = 3.0
WAIT_MODES = ("native", "greenlet")
VARIANTS = ("threadpool", "greenlet", "native", "threads", "aio")


def scrape_calls(port: int) -> float:
    """Sum of `drill_client_calls_total` on a Locust process's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("drill_client_calls_total{")
    )


def wait_ports(ports_dir: pathlib.Path, proc: subprocess.Popen, timeout: float = 60.0) -> int:
    """The /metrics port the standalone Locust process announced (it binds port 0 itself)."""
    end = time.monotonic() + timeout
    path = ports_dir / "local.json"
    while time.monotonic() < end:
        if path.exists():
            return int(json.loads(path.read_text())["metrics_port"])
        if proc.poll() is not None:
            raise RuntimeError(f"locust exited with {proc.returncode} before announcing its port")
        time.sleep(0.05)
    raise TimeoutError(f"no port announced in {ports_dir}")


def locust_cmd(tree: pathlib.Path, host: str, profile: str, run_s: float, csv_prefix: str, *args: str) -> list[str]:
    cmd = [str(BIN / "locust"), "--config", str(tree / "loadtests" / "profiles" / f"{profile}.conf")]
    cmd += ["--host", host, "--headless", "-t", f"{run_s:g}s", "--csv", csv_prefix, "--exit-code-on-error", "0"]
    return cmd + list(args)


def locust_env(tree: pathlib.Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.update(extra or {})
    return env


#: The user for any service calling the demo's own method (types by reflection, JSON request): what a user
#: of their own service runs, against the same server and call as the demo user.
GENERIC_ARGS = ("--drill-method", "drill.v1.Demo/Call", "--drill-request", "{}")
#: The runs of each round: name -> (wait mode, extra Locust arguments).
RUNS = {"native": ("native", ()), "greenlet": ("greenlet", ()), "generic": ("native", GENERIC_ARGS)}


def throughput(
    tree: pathlib.Path, host: str, server_pid: int, users: int, seconds: float, mode: str, extra: tuple = ()
) -> dict:
    """One closed-loop Locust run; CPU and calls over [warm-up, warm-up + seconds]."""
    _, client_core = cores()
    with tempfile.TemporaryDirectory() as tmp:
        ports = pathlib.Path(tmp) / "ports"
        cmd = locust_cmd(
            tree, host, "throughput", WARMUP_S + seconds + 2, f"{tmp}/run",
            "-u", str(users), "-r", str(users), "--drill-metrics-port", "0", "--drill-ports-dir", str(ports),
            *extra, "OrganicUser",
        )  # fmt: skip
        proc = popen_pinned(
            cmd, client_core, cwd=tree, env=locust_env(tree, {"DRILL_LOCUST_WAIT": mode}),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            port = wait_ports(ports, proc)
            time.sleep(WARMUP_S)
            t0, c0, s0, n0 = time.monotonic(), cpu_seconds(proc.pid), cpu_seconds(server_pid), scrape_calls(port)
            time.sleep(seconds)
            t1, c1, s1, n1 = time.monotonic(), cpu_seconds(proc.pid), cpu_seconds(server_pid), scrape_calls(port)
            proc.wait(timeout=WARMUP_S + seconds + 60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    n = max(n1 - n0, 1.0)
    return {
        "rps": n / (t1 - t0),
        "client_us": (c1 - c0) / n * 1e6,
        "server_us": (s1 - s0) / n * 1e6,
    }


def organic_p50s(tree: pathlib.Path, host: str, users: int, seconds: float) -> tuple[float, float]:
    """(organic p50 without faults, with delay:250 on drill calls), two Locust processes at once."""
    _, client_core = cores()
    common = (
        "-u", str(users), "-r", str(users), "--drill-weights", "organic=1,drill=1", "--drill-rate", "5",
        "--drill-ratio", "100", "--drill-cancel-share", "0", "--drill-cancel-ms", "",
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        procs = {}
        for tag, directive in (("base", ""), ("delay", "delay:250")):
            cmd = locust_cmd(tree, host, "smoke", seconds, f"{tmp}/{tag}", *common, f"--drill-directive={directive}")
            procs[tag] = popen_pinned(
                cmd, client_core, cwd=tree, env=locust_env(tree),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        p50 = {}
        for tag, proc in procs.items():
            proc.wait(timeout=seconds + 60)
            with open(f"{tmp}/{tag}_stats.csv", newline="") as fh:
                row = next(r for r in csv.DictReader(fh) if r["Type"] == "grpc" and r["Name"] == "organic/Call")
            p50[tag] = float(row["50%"])
    return p50["base"], p50["delay"]


def variants(host: str, users: int, seconds: float, rounds: int) -> dict[str, dict]:
    """The hand-off designs without Locust, one persistent process each, alternated in rounds."""
    _, client_core = cores()
    script = str(ROOT / "benchmarks" / "_client_variants.py")
    procs = {
        v: popen_pinned(
            [sys.executable, script, host, v, str(users)], client_core,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=locust_env(ROOT),
        )  # fmt: skip
        for v in VARIANTS
    }
    got: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    try:
        for r in range(rounds):
            for v in VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS)):
                p = procs[v]
                p.stdin.write(f"go {seconds}\n")
                p.stdin.flush()
                calls, cpu = p.stdout.readline().split()
                got[v].append((int(calls) / seconds, float(cpu) / max(int(calls), 1) * 1e6))
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
    return {
        v: {"rps": statistics.median(r for r, _ in got[v]), "client_us": statistics.median(c for _, c in got[v])}
        for v in VARIANTS
    }


def start_pinned_serve():
    """`drill serve` (faults on, seed 7) pinned to the server core: it inherits the core, every thread it starts."""
    server_core, _ = cores()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="drill-bench-"))
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {server_core})
    try:
        serve_args = ["--port", "0", "--metrics-port", "-1", "--enable-faults", "--seed", "7", "--service", "bench"]
        return start_serve("bench", serve_args, workdir)
    finally:
        os.sched_setaffinity(0, saved)


def commit_line(tree: pathlib.Path) -> str:
    """`# commit: SHA` of the checkout that ran (`+uncommitted` when its work tree differs from it)."""
    try:
        sha = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "# commit: unknown (not a git checkout)"
    return f"# commit: {sha}{' +uncommitted' if dirty else ''}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="measurement window per Locust run")
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3, help="Locust runs per wait mode, and rounds of the variants")
    ap.add_argument("--pairs", type=int, default=2, help="pairs of runs for the organic p50 shift")
    ap.add_argument("--tree", default=str(ROOT), help="checkout whose loadtests/ Locust runs (default: this one)")
    ap.add_argument("--skip-variants", action="store_true", help="only the Locust figures")
    ap.add_argument("--generic-only", action="store_true",
                    help="only the user for any service against the demo user, paired, --rounds rounds")  # fmt: skip
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()
    if args.pairs < 1 or args.rounds < 1:
        ap.error("--rounds and --pairs take 1 or more (the last line reports a median of each)")
    tree = pathlib.Path(args.tree).resolve()
    if args.generic_only and tree != ROOT:
        ap.error("--generic-only measures this checkout's user for any service (no --tree)")
    print(header("locust_throughput"), flush=True)
    print(commit_line(tree), flush=True)
    results: dict = {"load_average_start": load_average(), "users": args.users, "tree": str(tree)}
    server = start_pinned_serve()
    shift = None
    try:
        host = server.address
        if tree != ROOT:
            modes: tuple[str, ...] = ("default",)
        elif args.generic_only:
            modes = ("native", "generic")
        else:
            modes = tuple(RUNS)
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else tuple(reversed(modes)):  # pairs: each order half the rounds
                wait, extra = RUNS.get(mode, (mode, ()))
                runs[mode].append(throughput(tree, host, server.proc.pid, args.users, args.seconds, wait, extra))
        print(f"\nlocust: {args.users} organic users, closed loop, {args.seconds:g}-s windows, {args.rounds} runs")
        print(f"{'run':<12}{'req/s':>8}{'locust µs/call':>16}{'server µs/call':>16}   runs (locust µs/call)")
        for mode in modes:
            med = {k: statistics.median(r[k] for r in runs[mode]) for k in ("rps", "client_us", "server_us")}
            results[f"locust {mode}"] = {**{k: round(v, 1) for k, v in med.items()}, "runs": runs[mode]}
            each = " ".join(f"{r['client_us']:.0f}" for r in runs[mode])
            print(f"{mode:<12}{med['rps']:>8.0f}{med['client_us']:>16.0f}{med['server_us']:>16.0f}   {each}")
        if "generic" in runs:
            ratios = [g["client_us"] / d["client_us"] for d, g in zip(runs["native"], runs["generic"], strict=True)]
            results["generic_over_demo"] = {"median": round(statistics.median(ratios), 3), "rounds": ratios}
            print(f"\nuser for any service (drill.v1.Demo/Call by reflection, request {{}}) ÷ demo user, Locust CPU "
                  f"per call, paired by round: {' '.join(f'{x:.3f}' for x in ratios)}; median "
                  f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]")  # fmt: skip
        if not args.skip_variants and not args.generic_only:
            n = max(args.rounds, 3) * 2
            var = variants(host, args.users, 2.0, n)
            results["variants"] = var
            print(f"\nwithout Locust: {args.users} closed-loop callers, medians of {n} rounds x 2 s")
            print(f"{'client':<12}{'calls/s':>8}{'client µs/call':>16}")
            for v, r in var.items():
                print(f"{v:<12}{r['rps']:>8.0f}{r['client_us']:>16.0f}")
        if not args.generic_only:
            shifts, pairs = [], []
            for _ in range(args.pairs):
                base, delayed = organic_p50s(tree, host, args.users, 10.0)
                pairs.append((base, delayed))
                shifts.append(delayed - base)
            shift = statistics.median(shifts)
            results["organic_p50_ms"] = pairs
            print(f"\norganic p50 without / with delay:250 on drill calls (ms): {pairs}; shift median {shift:+.1f} ms")
    finally:
        server.stop()
    results["load_average_end"] = load_average()
    print(f"# load average at end: {results['load_average_end']}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2))
    main_mode = results[f"locust {modes[0]}"]
    us, rps = main_mode["client_us"], main_mode["rps"]
    line = f"locust cpu_us_per_call={us:.0f} rps={rps:.0f}"
    if shift is not None:
        line += f" organic_p50_shift_ms={shift:.1f}"
    if "generic_over_demo" in results:
        line += f" generic_over_demo={results['generic_over_demo']['median']:.3f}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
