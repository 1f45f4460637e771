"""After keepalive closes a blackholed connection, how long a grpc-python caller stays down once the blackhole is gone.

    .venv/bin/python benchmarks/blackhole_reconnect.py

The check behind docs/link-drills.md's reading of the compose run, where `keepalive-detects` never recovered in a
10-s recovery: a caller whose keepalive closes the silent connection reconnects at once, into the same blackhole
(`drill link`'s `timeout` 0 drops the bytes of every connection while it is set, the new one's HTTP/2 handshake
too), and a dropped handshake is given up only at gRPC's connect timeout (MIN_CONNECT_TIMEOUT, 20 s in its
connection-backoff protocol; grpc core reads it from `grpc.min_reconnect_backoff_ms`). Removing the toxic does not
bring the lost bytes back, so the caller waits that out after the fault too.

One `drill serve --service ledger` (permitting 1-s PINGs), one `drill link` in front of it (admin API), one caller
in this process on `harness/configs/keepalive-detect.yaml`'s channel options (keepalive 1 s, timeout 1 s, ping
timeout 1 s), sending a unary call every 100 ms (2-s deadline, open loop) for CLEAN_S, then `--fault-s` (FAULT_S)
with the blackhole set, then until a second's calls sent after the fault all answered OK, or for at most AFTER_S.
Per variant: when the caller first failed fast (UNAVAILABLE: keepalive closed the connection), how many
connections the link faulted, and how long after the toxic was removed the first OK and the last failure came.
Variants: the shipped configuration; with `reconnect: {connectTimeout: 2s}` (`grpc.min_reconnect_backoff_ms`
2000); with `reconnect: {connectTimeout: 2s, maxBackoff: 2s}` (`grpc.max_reconnect_backoff_ms` 2000 too). The
wait between attempts grows 1.6 times per failed attempt up to its longest, so after a long blackhole a short
connect timeout alone can leave the next attempt far off. The last line is machine-readable.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
import yaml  # noqa: E402

from benchmarks._cpu import header  # noqa: E402
from harness.core.environ import environ_now  # noqa: E402
from harness.procs.spawn import stop_processes  # noqa: E402
from harness.resilience import from_dict  # noqa: E402

CONFIG = ROOT / "harness/configs/keepalive-detect.yaml"
METHOD = "/drill.v1.Demo/Call"
RATE = 10  # calls/s
DEADLINE_S = 2.0
CLEAN_S, FAULT_S, AFTER_S = 3.0, 10.0, 40.0
#: each variant's `reconnect` section added to keepalive-detect.yaml
VARIANTS = {"shipped": None, "connect-timeout-2s": {"connectTimeout": "2s"},
            "reconnect-2s": {"connectTimeout": "2s", "maxBackoff": "2s"}}  # fmt: skip


def channel_options(reconnect: dict | None) -> tuple:
    """The caller's channel options: keepalive-detect.yaml with `reconnect` as its reconnect section."""
    raw = yaml.safe_load(CONFIG.read_text())
    if reconnect is not None:
        raw["reconnect"] = reconnect
    return from_dict(raw, str(CONFIG)).channel_options()


def _start(argv: list[str], ready: pathlib.Path, log: pathlib.Path) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *argv, "--ready-file", str(ready)], cwd=ROOT,
                            env=environ_now(PYTHONPATH=str(ROOT)), stderr=log.open("w"),
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_processes([proc])
            raise SystemExit(f"blackhole_reconnect: {argv[0]} did not start: {log.read_text()[-500:]}")
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())


def _admin(port: int, method: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=5) as r:
        text = r.read()
    return json.loads(text) if text.strip() else {}


def trial(name: str, reconnect: dict | None, work: pathlib.Path, fault_s: float) -> dict:
    serve, s = _start(["serve", "--service", "ledger", "--port", "0", "--metrics-port", "-1", "--config", str(CONFIG)],
                      work / f"{name}-serve.json", work / f"{name}-serve.log")  # fmt: skip
    link, ln = _start(["link", "--upstream", f"127.0.0.1:{s['port']}", "--port", "0", "--name", "ledger-1",
                       "--admin-port", "0"], work / f"{name}-link.json", work / f"{name}-link.log")  # fmt: skip
    options = channel_options(reconnect)
    calls: list[tuple[float, float, str]] = []  # (sent, ended, code), times from the start
    try:
        with grpc.insecure_channel(f"127.0.0.1:{ln['link_port']}", options=options) as channel:
            call = channel.unary_unary(METHOD)
            call(b"", timeout=10, wait_for_ready=True)  # connected before the clock starts
            t0 = time.monotonic()
            pending, n, removed_at, set_at = [], 0, None, None
            while True:
                now = time.monotonic() - t0
                if set_at is None and now >= CLEAN_S:
                    _admin(ln["admin_port"], "POST", "/proxies/ledger-1/toxics",
                           {"name": "blackhole", "type": "timeout", "attributes": {"timeout": 0}})  # fmt: skip
                    set_at = now
                if removed_at is None and now >= CLEAN_S + fault_s:
                    touched = _admin(ln["admin_port"], "GET", "/proxies/ledger-1/toxics/blackhole/connections")
                    _admin(ln["admin_port"], "DELETE", "/proxies/ledger-1/toxics/blackhole")
                    removed_at = now
                if removed_at is not None:
                    last = sorted(calls)[-RATE:]  # the last second's calls, by when they were sent
                    if (len(last) == RATE and last[0][0] >= removed_at and all(c[2] == "OK" for c in last)) or \
                            now >= CLEAN_S + fault_s + AFTER_S:  # fmt: skip
                        break
                sent = t0 + n / RATE
                time.sleep(max(0.0, sent - time.monotonic()))
                future = call.future(b"", timeout=DEADLINE_S)
                pending.append((sent - t0, future))
                n += 1
                still = []
                for at, f in pending:
                    if f.done():
                        code = f.code() if f.exception() is not None else grpc.StatusCode.OK
                        calls.append((at, time.monotonic() - t0, code.name))
                    else:
                        still.append((at, f))
                pending = still
            for at, f in pending:
                f.exception(timeout=DEADLINE_S + 1)
                code = f.code() if f.exception() is not None else grpc.StatusCode.OK
                calls.append((at, time.monotonic() - t0, code.name))
    finally:
        stop_processes([link, serve])
    calls.sort()
    fast = [c for c in calls if c[0] >= set_at and c[2] == "UNAVAILABLE"]
    after = [c for c in calls if c[0] >= removed_at]
    first_ok = next((c[0] for c in after if c[2] == "OK"), None)
    failed_after = [c for c in after if c[2] != "OK"]
    return {
        "variant": name, "calls": len(calls),
        "first_unavailable_s": None if not fast else round(fast[0][1] - set_at, 2),
        "failed_during_fault": sum(1 for c in calls if set_at <= c[0] < removed_at and c[2] != "OK"),
        "failed_after_removal": len(failed_after),
        "first_ok_after_removal_s": None if first_ok is None else round(first_ok - removed_at, 2),
        "last_failure_after_removal_s": None if not failed_after else round(failed_after[-1][0] - removed_at, 2),
        "codes_after_removal": sorted({c[2] for c in failed_after}),
        "connections_faulted": len(touched["connections"]),
        "faulted_closed_s": [c.get("closed_s") for c in touched["connections"]],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--fault-s", type=float, default=FAULT_S,
                    help=f"how long the blackhole lasts (default {FAULT_S:g})")  # fmt: skip
    args = ap.parse_args()
    print(header("blackhole_reconnect", pinned=False))
    print(f"# grpc-python {grpc.__version__}; {RATE} calls/s, {DEADLINE_S:g}-s deadline; clean {CLEAN_S:g} s, "
          f"blackhole {args.fault_s:g} s, then up to {AFTER_S:g} s; channel options of {CONFIG.relative_to(ROOT)}")
    for name, reconnect in VARIANTS.items():
        print(f"# {name}: reconnect {reconnect or 'left to gRPC'}: {dict(channel_options(reconnect))}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, reconnect in VARIANTS.items():
                work = pathlib.Path(tmp, f"round-{r + 1}")
                work.mkdir(exist_ok=True)
                got = trial(name, reconnect, work, args.fault_s)
                results.append(got)
                print(f"round {r + 1} {json.dumps(got)}", flush=True)
    for name in VARIANTS:
        mine = [g["first_ok_after_removal_s"] for g in results if g["variant"] == name]
        print(f"blackhole_reconnect variant={name} first_ok_after_removal_s={mine}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
