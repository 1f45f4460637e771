"""CPU the compose hops use at idle (no load: only their healthchecks and Prometheus' scrapes), under a
real Docker engine, with the engine's own processes beside them.

    docker compose -f compose/docker-compose.yml up -d --build --wait gateway order account ledger prometheus
    .venv/bin/python benchmarks/compose_idle_cpu.py [--seconds 60]

For `--seconds` it reads each hop container's cgroup CPU time (cgroup v1 `cpuacct.usage`, or v2
`cpu.stat`): a healthcheck's process runs inside its container, so its interpreter start and call
are counted there, with the hop's own work (answering checks and scrapes). dockerd, containerd and the
containerd-shims run every `docker exec` a healthcheck is; their CPU (from /proc) is the engine's share,
shared with whatever else the engine runs. Last line: CPU seconds per second of the four hops together
and of the engine, and the hops' share of the box.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._cpu import CLK_TCK, commit, load_average  # noqa: E402

HOPS = ("gateway", "order", "account", "ledger")
ENGINE = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2")


def container_ids() -> dict[str, list[str]]:
    out = {}
    for hop in HOPS:
        proc = subprocess.run(
            ["docker", "compose", "-f", "compose/docker-compose.yml", "ps", "-q", hop],
            cwd=ROOT, capture_output=True, text=True, check=True,
        )  # fmt: skip
        out[hop] = proc.stdout.split()
        if not out[hop]:
            raise SystemExit(f"no running {hop} container: bring the stack up first")
    return out


def cgroup_cpu_s(cid: str) -> float:
    v1 = pathlib.Path(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage")
    if v1.exists():
        return int(v1.read_text()) / 1e9
    for v2 in (f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat", f"/sys/fs/cgroup/docker/{cid}/cpu.stat"):
        path = pathlib.Path(v2)
        if path.exists():
            stats = dict(line.split() for line in path.read_text().splitlines())
            return int(stats["usage_usec"]) / 1e6
    raise SystemExit(f"no cgroup CPU accounting found for container {cid[:12]}")


def engine_cpu_s() -> float:
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if pathlib.Path(f"/proc/{pid}/comm").read_text().strip() not in ENGINE:
                continue
            fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    ids = container_ids()
    first = ids["ledger"][0]
    inspect = json.loads(subprocess.run(["docker", "inspect", first], capture_output=True, text=True).stdout)[0]
    print("# compose_idle_cpu")
    print(f"# command: {' '.join([os.path.relpath(sys.executable), *sys.argv])}")
    # the checkout the running image was built from (`docker compose … up --build` just before this run)
    print(f"# commit: {commit()}; image {inspect['Config']['Image']} ({inspect['Image'][7:19]})")
    print(f"# healthcheck: {' '.join(inspect['Config']['Healthcheck']['Test'][1:])} "
          f"every {inspect['Config']['Healthcheck']['Interval'] / 1e9:g} s")  # fmt: skip
    print(f"# cpus: {os.cpu_count()}; load average at start: {load_average()}", flush=True)
    flat = [(hop, cid) for hop, cids in ids.items() for cid in cids]
    before = {cid: cgroup_cpu_s(cid) for _, cid in flat}
    engine_before, t0 = engine_cpu_s(), time.monotonic()
    time.sleep(args.seconds)
    elapsed = time.monotonic() - t0
    used = {cid: cgroup_cpu_s(cid) - before[cid] for _, cid in flat}
    engine = (engine_cpu_s() - engine_before) / elapsed
    print(f"# load average at end: {load_average()}")
    for hop, cid in flat:
        print(f"{hop:<8} {cid[:12]}  {used[cid] / elapsed:6.3f} CPU s/s")
    hops = sum(used.values()) / elapsed
    print(f"engine (dockerd, containerd, shims): {engine:6.3f} CPU s/s")
    print(f"idle_cpu hops={hops:.3f} engine={engine:.3f} hops_box_share={hops / (os.cpu_count() or 1):.3f}")


if __name__ == "__main__":
    main()
