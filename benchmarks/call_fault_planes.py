"""The drill's per-call faults on two data planes: `drill proxy` on grpc.aio (a call at a time) against `drill proxy
--plane link` (frame operations on a byte relay), the same decisions (one pipeline: the gate, the hit formula, the
bounds), side by side in one run; and `drill link --enable-faults`, the link that records only what it faults.

    .venv/bin/python benchmarks/call_fault_planes.py [--seconds 8 --rounds 3 --rates 500,2000]

A Go service (tests/proxy/goprobe, grpc-go) answers `Echo`; the open-loop Go client (benchmarks/goload, 4
connections, 1-s deadlines) shares one core with it; the plane under test has the other core to itself. Each
plane runs with injection on (DRILL_FAULT_ENABLED, the default tenant, one seed for all) and, per rate and
round, four loads: organic calls (no drill key), the drill's calls with `delay:20` (every one), with
`abort:UNAVAILABLE` at ratio 50 and with `abort:UNAVAILABLE@served` at ratio 50 (the service answers, then
the fault replaces its answer). Per plane, load and rate: the calls answered OK and UNAVAILABLE, the OK calls'
p50 and p99, and the plane's CPU per call from /proc.

Exactness across planes: goload's request ids are the same on each (`goload-I`), so the hit formula must fault
the same calls on each: the calls answered with the `x-drill-fault` trailer are counted per load, and those of
the two loads at ratio 50 compared in each round and rate where every plane answered every call OK or
UNAVAILABLE (a call a plane sheds, or one past its deadline, is never faulted). A call that ends otherwise is
counted as `other`, with the first message of its code. The last line is machine-readable: `call_fault_planes
<load>_<rate>_cpu_ratio=… …` (`--plane link`'s CPU per call over the aio plane's), `same_hits=…` (every round
compared marked as many calls on every plane) and `rounds_compared=…`.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._cpu import cores, cpu_seconds, header, popen_pinned, stop_all  # noqa: E402
from benchmarks.proxy_overhead import wait_file  # noqa: E402
from tests.proxy.probe import SERVICE, build, descriptor_set, go_build  # noqa: E402

#: (name, goload's drill arguments)
LOADS = (
    ("organic", []),
    ("delay", ["-fault", "delay:20", "-ratio", "100"]),
    ("abort", ["-fault", "abort:UNAVAILABLE", "-ratio", "50"]),
    ("served", ["-fault", "abort:UNAVAILABLE@served", "-ratio", "50"]),
)
#: (name, command, its options): drill proxy on each data plane, and the link with call faults alone (it records
#: only the calls it faults, where a proxy records every call it forwards: what a hop's metrics need)
PLANES = (
    ("drill proxy", "proxy", []),
    ("proxy --plane link", "proxy", ["--plane", "link"]),
    ("link --enable-faults", "link", ["--enable-faults"]),
)
#: the loads whose hits the formula draws (ratio 50): the same ids must be hit on both planes
DRAWN = ("abort", "served")


def load(goload: pathlib.Path, cpu: int, port: int, rate: float, seconds: float, pid: int, extra: list[str]) -> dict:
    argv = ["taskset", "-c", str(cpu), str(goload), "-addr", f"127.0.0.1:{port}", "-method", SERVICE + "Echo",
            "-rate", f"{rate:.0f}", "-seconds", str(seconds), "-timeout", "1", "-conns", "4", *extra]  # fmt: skip
    c0 = cpu_seconds(pid)
    out = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True, timeout=seconds + 70).stdout)
    sent = sum(out["status"].values())
    lat = out["latency_ms"].get("OK", {})
    ok, unavailable = out["status"].get("OK", 0), out["status"].get("Unavailable", 0)  # grpc-go's names of the codes
    return {"sent": sent, "ok": ok, "unavailable": unavailable, "other": sent - ok - unavailable,
            "marked": sum(out.get("marked", {}).values()),
            "why": {code: msg for code, msg in (out.get("messages") or {}).items() if code != "Unavailable"},
            "p50": lat.get("p50", float("nan")), "p99": lat.get("p99", float("nan")),
            "cpu_us": (cpu_seconds(pid) - c0) / sent * 1e6 if sent else float("nan")}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="seconds of load per plane, load, rate and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rates", default="500,2000", help="offered calls/s, comma-separated")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    server_cpu, client_cpu = cores()
    print(header("call_fault_planes"))
    print(f"# Go service and goload on cpu {client_cpu}, the plane on cpu {server_cpu}; {args.rounds} rounds of "
          f"{args.seconds:g} s per plane, load and rate; 4 connections, 64-byte bodies, 1-s deadlines; injection "
          "on, seed 7, tenant-drill", flush=True)  # fmt: skip
    goload = go_build(ROOT / "benchmarks" / "goload")
    procs = []
    results: dict[tuple[str, str, float], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        try:
            go = popen_pinned([str(build()), str(tmp / "go.port")], client_cpu, stderr=subprocess.DEVNULL)
            procs.append(go)
            upstream = f"127.0.0.1:{wait_file(tmp / 'go.port', go, 'the Go service')}"
            pb = str(descriptor_set(tmp / "probe.pb"))
            env = {**os.environ, "PYTHONPATH": str(ROOT), "DRILL_FAULT_ENABLED": "true", "DRILL_FAULT_SEED": "7",
                   "DRILL_FAULT_MAX_ACTIVE": "10000"}  # fmt: skip
            common = ["--upstream", upstream, "--port", "0", "--metrics-port", "0", "--service", "probe",
                      "--descriptor-set", pb]  # fmt: skip
            planes = {}
            for name, command, extra in PLANES:
                ready = tmp / f"{name.replace(' ', '-')}.json"
                argv = [sys.executable, "-m", "harness.cli", command, *common, "--ready-file", str(ready), *extra]
                proc = popen_pinned(argv, server_cpu, env=env, stderr=subprocess.DEVNULL)
                procs.append(proc)
                planes[name] = (json.loads(wait_file(ready, proc, name))["port"], proc.pid)
            for port, pid in planes.values():  # connections up, both planes warm
                load(goload, client_cpu, port, 300, 2, pid, [])
            for r in range(args.rounds):
                for rate in rates:
                    for lname, extra in LOADS:
                        for name, (port, pid) in planes.items():
                            res = load(goload, client_cpu, port, rate, args.seconds, pid, extra)
                            results.setdefault((name, lname, rate), []).append(res)
                            print(f"round {r + 1} {rate:>5.0f}/s {lname:8s} {name:20s} OK {res['ok']:>6d} "
                                  f"UNAVAILABLE {res['unavailable']:>6d} other {res['other']:>5d} marked "
                                  f"{res['marked']:>6d}  OK p50 "
                                  f"{res['p50']:8.3f} ms p99 {res['p99']:8.3f} ms  {res['cpu_us']:6.0f} µs CPU/call"
                                  + (f"  other: {res['why']}" if res["other"] else ""),
                                  flush=True)  # fmt: skip
        finally:
            stop_all(procs)

    def med(plane: str, lname: str, rate: float, key: str) -> float:
        return statistics.median(x[key] for x in results[(plane, lname, rate)])

    print("# medians over rounds")
    fields = []
    same, compared = True, 0
    for rate in rates:
        for lname, _extra in LOADS:
            for plane, _command, _extra in PLANES:
                print(f"{rate:>5.0f}/s {lname:8s} {plane:20s} OK {med(plane, lname, rate, 'ok'):>8.0f} UNAVAILABLE "
                      f"{med(plane, lname, rate, 'unavailable'):>7.0f} OK p50 {med(plane, lname, rate, 'p50'):8.3f} ms "
                      f"p99 {med(plane, lname, rate, 'p99'):8.3f} ms CPU/call "
                      f"{med(plane, lname, rate, 'cpu_us'):6.0f} µs")  # fmt: skip
            ratio = med("proxy --plane link", lname, rate, "cpu_us") / med("drill proxy", lname, rate, "cpu_us")
            fields.append(f"{lname}_{rate:.0f}_cpu_ratio={ratio:.2f}")
            if lname != "organic":
                counts = {p: [x["marked"] for x in results[(p, lname, rate)]] for p, _c, _e in PLANES}
                print(f"{rate:>5.0f}/s {lname:8s} calls marked x-drill-fault per round: "
                      + ", ".join(f"{p} {c}" for p, c in counts.items()))  # fmt: skip
                if lname in DRAWN:  # rounds where every plane answered every call (a call shed is never faulted)
                    for r in range(args.rounds):
                        runs = [results[(p, lname, rate)][r] for p, _c, _e in PLANES]
                        if all(x["other"] == 0 for x in runs):
                            compared += 1
                            same = same and len({x["marked"] for x in runs}) == 1
    print("call_fault_planes " + " ".join(fields) + f" same_hits={same} rounds_compared={compared}")


if __name__ == "__main__":
    main()
