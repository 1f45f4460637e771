"""`drill proxy --workers N`: N processes on one port (SO_REUSEPORT), one supervisor that owns them, on either
data plane (`--plane aio`, `--plane link`).

Against the Go probe: the connections of many channels spread over both workers (the kernel hashes each
new connection to one listener: 16 connections all on one of two workers has a chance of 2 / 2**16), each
worker counts its own calls on its own /metrics, SIGUSR1 to the supervisor stops injection in every worker,
SIGTERM stops them all.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
import urllib.request

import pytest
from grpc import aio

from harness.core import headers as h
from tests.conftest import drill_process
from tests.proxy.probe import SERVICE, build, descriptor_set, drill_proxy, go_service, message_class

CHANNELS = 16


def _calls(metrics_port: int, pattern: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(v) for v in re.findall(pattern + r".* ([0-9.e+]+)$", text, re.M))


@pytest.mark.parametrize("plane", ["aio", "link"])
def test_two_workers_share_the_port_each_count_their_calls_and_stop_together(tmp_path, plane):
    binary = build()
    ds = descriptor_set(tmp_path / "probe.pb")
    msg = message_class(ds)
    with go_service(binary, tmp_path) as upstream:
        args = ("--upstream", upstream, "--port", "0", "--metrics-port", "-1", "--service", "probe",
                "--enable-faults", "--workers", "2", "--descriptor-set", str(ds), "--plane", plane)  # fmt: skip
        with drill_proxy(tmp_path, *args) as (proc, info):
            assert len(info["pids"]) == 2 and len(set(info["metrics_ports"])) == 2, info
            hit = ((h.TENANT, "tenant-drill"), (h.FAULT, "abort:UNAVAILABLE"), (h.FAULT_RATIO, "100"),
                   (h.FAULT_TARGET, "probe"))  # fmt: skip

            async def round_of_calls() -> list[str]:
                """One tagged call on each of CHANNELS connections of their own (no shared subchannel)."""
                out = []
                for i in range(CHANNELS):
                    options = [("grpc.use_local_subchannel_pool", 1)]
                    async with aio.insecure_channel(f"127.0.0.1:{info['port']}", options=options) as channel:
                        try:
                            await channel.unary_unary(SERVICE + "Echo")(
                                msg(id=f"w{i}").SerializeToString(), metadata=(*hit, (h.REQUEST_ID, f"w{i}")),
                                timeout=10)  # fmt: skip
                            out.append("OK")
                        except aio.AioRpcError as e:
                            out.append(e.code().name)
                return out

            assert asyncio.run(round_of_calls()) == ["UNAVAILABLE"] * CHANNELS
            per_worker = [_calls(p, r'drill_fault_hits_total\{[^}]*service="probe"') for p in info["metrics_ports"]]
            assert sum(per_worker) == CHANNELS and all(n > 0 for n in per_worker), per_worker
            proc.send_signal(signal.SIGUSR1)  # passed to every worker: none injects any more
            for _ in range(100):
                if asyncio.run(round_of_calls()) == ["OK"] * CHANNELS:
                    break
                time.sleep(0.05)
            assert asyncio.run(round_of_calls()) == ["OK"] * CHANNELS
    assert proc.returncode == 0  # terminated: the supervisor stopped its workers and exits 0
    for pid in info["pids"]:  # the workers went with their supervisor
        assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()


def test_workers_out_of_range_is_one_line_exit_2():
    proc = drill_process("proxy", "--upstream", "127.0.0.1:1", "--workers", "0")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("drill: "), proc.stderr
