"""CPU of one container healthcheck: the grpcio health client (what compose ran before) against the
stdlib probe (compose/grpc_health_probe.py, `python3 -I -S`), both against a real `drill serve` hop.

    .venv/bin/python benchmarks/healthcheck_cost.py [--checks 40 --rounds 3]

The hop is the compose ledger (`--admission --work-ms 8 --concurrency 1 --queue 32`), pinned to one
core; each check runs as its own process, one after the other, pinned to the other core. A check's
CPU is the children's user + system time (`resource.getrusage(RUSAGE_CHILDREN)`) over `--checks`
checks, divided by their number, so an interpreter start, its imports and the call are all counted;
the hop's own CPU per check is read from /proc. Variants run interleaved, `--rounds` times; the
figures are medians over the rounds. The last lines give, at the compose interval (one check every
2 s in each of 4 hops), the share of a 2-core box the checks take at idle.
"""

from __future__ import annotations

import argparse
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._cpu import cores, cpu_seconds, header, load_average, pinned, popen_pinned  # noqa: E402

#: The healthcheck compose ran before (compose/grpc_healthcheck.py), verbatim but for the argv parsing.
GRPCIO_CHECK = """
import sys
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
with grpc.insecure_channel(sys.argv[1]) as channel:
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=2.0)
sys.exit(0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1)
"""
PROBE = str(ROOT / "compose" / "grpc_health_probe.py")
#: The compose healthcheck's interval and the number of hops that run it.
INTERVAL_S, HOPS, BOX_CORES = 2.0, 4, 2


def variants(python: str, target: str) -> dict[str, list[str]]:
    return {
        "grpcio client (before)": [python, "-c", GRPCIO_CHECK, target],
        "stdlib probe, site on": [python, PROBE, target],
        "stdlib probe -I -S (after)": [python, "-I", "-S", PROBE, target],
    }


def commit() -> str:
    """HEAD, and whether the files this measures differ from it (a saved run must name committed code)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "compose", "benchmarks/healthcheck_cost.py", "harness"],
        cwd=ROOT, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    return head.stdout.strip() + (" + uncommitted changes" if dirty else "")


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_checks(argv: list[str], n: int, cpu: int, hop_pid: int) -> tuple[float, float, float]:
    """(CPU ms per check, hop CPU ms per check, wall ms per check) over `n` checks that must all pass."""
    before, hop_before, t0 = children_cpu(), cpu_seconds(hop_pid), time.perf_counter()
    for _ in range(n):
        proc = subprocess.run(argv, capture_output=True, preexec_fn=pinned(cpu), timeout=30)  # noqa: PLW1509
        if proc.returncode != 0:
            raise SystemExit(f"check failed: {argv[-1]}: {proc.stderr.decode()[-500:]}")
    wall = time.perf_counter() - t0
    return (
        (children_cpu() - before) / n * 1e3,
        (cpu_seconds(hop_pid) - hop_before) / n * 1e3,
        wall / n * 1e3,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checks", type=int, default=40, help="checks per variant and round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(header("healthcheck_cost"))
    print(f"# commit: {commit()}", flush=True)
    hop_cpu, check_cpu = cores()
    with tempfile.TemporaryDirectory() as tmp:
        port_file = pathlib.Path(tmp) / "port"
        hop = popen_pinned(
            [sys.executable, "-m", "harness.cli", "serve", "--port", "0", "--metrics-port", "0",
             "--service", "ledger", "--admission", "--work-ms", "8", "--concurrency", "1", "--queue", "32",
             "--port-file", str(port_file)],
            hop_cpu, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while not port_file.exists() or not port_file.read_text():
                if hop.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("drill serve did not start")
                time.sleep(0.05)
            target = f"127.0.0.1:{port_file.read_text()}"
            got: dict[str, list[tuple[float, float, float]]] = {}
            for r in range(args.rounds):
                for name, argv in variants(sys.executable, target).items():
                    got.setdefault(name, []).append(run_checks(argv, args.checks, check_cpu, hop.pid))
                    cpu_ms, hop_ms, wall_ms = got[name][-1]
                    print(f"round {r + 1}: {name:<28} {cpu_ms:7.1f} ms CPU/check  hop {hop_ms:5.2f} ms  "
                          f"wall {wall_ms:7.1f} ms")  # fmt: skip
        finally:
            hop.terminate()
            hop.wait(timeout=10)
    print(f"# load average at end: {load_average()}")
    print(f"\n{args.checks} checks x {args.rounds} rounds per variant; medians over the rounds")
    print(f"{'variant':<28} {'CPU ms/check':>12} {'hop ms/check':>12} {'wall ms':>8} {'box share':>10}")
    share = {}
    for name, runs in got.items():
        cpu_ms, hop_ms, wall_ms = (statistics.median(x[i] for x in runs) for i in range(3))
        # every hop checks itself once per interval: CPU s per s, over the box's cores
        share[name] = (cpu_ms + hop_ms) / 1e3 / INTERVAL_S * HOPS / BOX_CORES
        print(f"{name:<28} {cpu_ms:12.1f} {hop_ms:12.2f} {wall_ms:8.1f} {share[name]:10.3f}")
    before, after = share["grpcio client (before)"], share["stdlib probe -I -S (after)"]
    print(f"healthcheck_cpu_share before={before:.3f} after={after:.3f} ratio={before / after:.1f}")


if __name__ == "__main__":
    main()
