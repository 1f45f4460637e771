"""`drill proxy --plane link` as a user starts it, in front of the Go probe: a hop's readings for every call it
carries (organic ones too, each with the service's own status), the in-flight limit, the one-way stop, and the
options it does not carry refused in one line."""

from __future__ import annotations

import asyncio
import re
import signal
import time
import urllib.request

from grpc import aio

from harness.core import headers as h
from tests.conftest import drill_process
from tests.proxy.probe import SERVICE, drill_proxy
from tests.proxy.test_forward import probe, service  # noqa: F401 - fixtures

ECHO = "probe.v1.Probe/Echo"


def _metric(text: str, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 when none)."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            total += float(match.group(2))
    return total


def _scrape(info: dict) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{info['metrics_port']}/metrics", timeout=10).read().decode()


async def _echo(channel, msg, rid: str, mode: str = "", md: tuple = (), timeout: float = 10) -> tuple[str, str]:
    try:
        await channel.unary_unary(SERVICE + "Echo")(msg(id=rid, mode=mode).SerializeToString(), metadata=md,
                                                    timeout=timeout)  # fmt: skip
        return "OK", ""
    except aio.AioRpcError as e:
        return e.code().name, e.details() or ""


def _drill(rid: str) -> tuple:
    return ((h.TENANT, "tenant-drill"), (h.FAULT, "abort:UNAVAILABLE"), (h.FAULT_RATIO, "100"),
            (h.FAULT_TARGET, "probe"), (h.REQUEST_ID, rid))  # fmt: skip


def test_every_call_is_a_hops_reading_with_the_services_own_status_and_sigusr1_stops_injecting(service, probe,  # noqa: F811
                                                                                               tmp_path):  # fmt: skip
    """Organic calls are counted as drill proxy counts them (started, finished with the status the service put in
    its trailers: OK, and the probe's own FAILED_PRECONDITION), a drill call is faulted and counted as one; after
    `kill -USR1` the same drill call reaches the service."""
    _, ds, msg, _ = probe
    args = ("--upstream", service, "--port", "0", "--metrics-port", "-1", "--service", "probe", "--enable-faults",
            "--descriptor-set", str(ds), "--plane", "link")  # fmt: skip
    with drill_proxy(tmp_path, *args) as (proc, info):

        async def calls() -> list:
            async with aio.insecure_channel(f"127.0.0.1:{info['port']}") as channel:
                return [await _echo(channel, msg, "ok-1"), await _echo(channel, msg, "ok-2"),
                        await _echo(channel, msg, "ok-3"), await _echo(channel, msg, "fail-1", "fail"),
                        await _echo(channel, msg, "drill-1", md=_drill("drill-1"))]  # fmt: skip

        got = asyncio.run(calls())
        assert [c for c, _ in got] == ["OK", "OK", "OK", "FAILED_PRECONDITION", "UNAVAILABLE"], got
        text = _scrape(info)
        common = {"service": "probe", "grpc_method": ECHO}
        assert _metric(text, "drill_server_calls_total", **common, grpc_status="OK", traffic="organic",
                       fault_mode="none") == 3, text  # fmt: skip
        assert _metric(text, "drill_server_calls_total", **common, grpc_status="FAILED_PRECONDITION",
                       traffic="organic") == 1, text  # fmt: skip
        assert _metric(text, "drill_server_calls_total", **common, grpc_status="UNAVAILABLE", traffic="drill",
                       fault_mode="abort") == 1, text  # fmt: skip
        assert _metric(text, "grpc_server_call_started_total", grpc_method=ECHO) == 5, text
        assert _metric(text, "drill_server_latency_seconds_count", **common, traffic="organic") == 4, text
        proc.send_signal(signal.SIGUSR1)

        async def drill() -> str:
            async with aio.insecure_channel(f"127.0.0.1:{info['port']}") as channel:
                return (await _echo(channel, msg, "drill-2", md=_drill("drill-2")))[0]

        for _ in range(100):  # the signal is handled between the loop's steps: at most a few
            if asyncio.run(drill()) == "OK":
                break
            time.sleep(0.05)
        assert asyncio.run(drill()) == "OK"


def test_past_the_in_flight_limit_a_new_call_is_refused_at_once_and_never_reaches_the_service(service, probe,  # noqa: F811
                                                                                              tmp_path):  # fmt: skip
    """Two calls the probe holds fill `--max-in-flight 2`: a third is RESOURCE_EXHAUSTED while both are still held
    (at once: not after either ends), with the proxy's details, counted under reason in_flight with its audit line,
    and the probe never saw it; a health check still passes (to the probe, which serves none: UNIMPLEMENTED); once
    the held calls are cancelled (and counted so), a call passes again."""
    _, ds, msg, _ = probe
    args = ("--upstream", service, "--port", "0", "--metrics-port", "-1", "--service", "probe",
            "--descriptor-set", str(ds), "--plane", "link", "--max-in-flight", "2")  # fmt: skip
    with drill_proxy(tmp_path, *args) as (_proc, info):

        def until(name: str, value: float, **labels: str) -> None:  # the link's own count, read as a scrape does
            deadline = time.monotonic() + 20
            while _metric(_scrape(info), name, **labels) != value:
                assert time.monotonic() < deadline, (name, labels, _scrape(info))
                time.sleep(0.05)

        async def main():
            async with aio.insecure_channel(f"127.0.0.1:{info['port']}") as channel:
                first = await _echo(channel, msg, "warm")  # the connection's SETTINGS exchanged
                held = [asyncio.ensure_future(_echo(channel, msg, f"held-{i}", "hold", timeout=30)) for i in range(2)]
                await asyncio.to_thread(until, "grpc_server_call_started_total", 3, grpc_method=ECHO)  # 2 in flight
                refused = await _echo(channel, msg, "over", timeout=10)
                still_held = not any(t.done() for t in held)
                try:  # a health check is never refused by the limit: it reaches the probe, which serves no health
                    await channel.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=5)
                    health = "OK"
                except aio.AioRpcError as e:
                    health = e.code().name
                for t in held:
                    t.cancel()
                await asyncio.gather(*held, return_exceptions=True)
                await asyncio.to_thread(until, "drill_server_calls_total", 2, grpc_method=ECHO, grpc_status="CANCELLED")
                after = await _echo(channel, msg, "after")
                seen = await channel.unary_unary(SERVICE + "Seen")(msg(id="over").SerializeToString(), timeout=5)
                return first, refused, still_held, health, after, msg.FromString(seen).body

        first, refused, still_held, health, after, seen = asyncio.run(main())
        assert first == ("OK", "") and after == ("OK", "")
        assert refused == ("RESOURCE_EXHAUSTED", "drill: in-flight limit 2 reached")
        assert still_held  # answered by the link while the two calls it counted were in flight
        assert health == "UNIMPLEMENTED"
        assert seen in (b"", b"null"), seen  # the probe has no record of it
        text = _scrape(info)
        assert _metric(text, "drill_server_refused_total", service="probe", grpc_method=ECHO, reason="in_flight") == 1
        assert _metric(text, "drill_server_calls_total", service="probe", grpc_method=ECHO,
                       grpc_status="RESOURCE_EXHAUSTED") == 1, text  # fmt: skip
    log = (tmp_path / "proxy.log").read_text()
    assert log.count("call_refused") == 1 and "in_flight" in log, log


def test_options_the_link_plane_does_not_carry_are_one_line_exit_2():
    for extra in (("--max-backlog", "8"), ("--workers", "2", "--max-backlog", "8")):  # refused before any worker
        proc = drill_process("proxy", "--upstream", "127.0.0.1:1", "--port", "0", "--plane", "link", *extra,
                             timeout=60)  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("drill: proxy: --max-backlog"), proc.stderr


def test_as_a_tap_it_injects_nothing_and_still_reads_every_call(service, probe, tmp_path):  # noqa: F811
    """`--tap --plane link` with DRILL_FAULT_ENABLED=1 in its environment: a call with a directive reaches the service,
    and the hop still counts it (a drill call, no fault) beside an organic one; its fault switch reads 0."""
    _, ds, msg, _ = probe
    args = ("--upstream", service, "--port", "0", "--metrics-port", "-1", "--service", "probe", "--tap",
            "--descriptor-set", str(ds), "--plane", "link")  # fmt: skip
    with drill_proxy(tmp_path, *args, env={"DRILL_FAULT_ENABLED": "1"}) as (_proc, info):

        async def calls() -> list:
            async with aio.insecure_channel(f"127.0.0.1:{info['port']}") as channel:
                return [await _echo(channel, msg, "tap-1", md=_drill("tap-1")), await _echo(channel, msg, "tap-2")]

        assert [c for c, _ in asyncio.run(calls())] == ["OK", "OK"]
        text = _scrape(info)
        common = {"service": "probe", "grpc_method": ECHO, "grpc_status": "OK", "fault_mode": "none"}
        assert _metric(text, "drill_server_calls_total", **common, traffic="drill") == 1, text
        assert _metric(text, "drill_server_calls_total", **common, traffic="organic") == 1, text
        assert _metric(text, "drill_fault_switch", service="probe") == 0, text
