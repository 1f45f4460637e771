"""`drill client`: send tagged drill calls beside untagged organic calls and summarise what happened.

A quick, bounded way to see the fault interceptor work against any service
that speaks the demo proto (or `--spawn` a local `drill serve`): hits by mode,
status counts per traffic class, and the error rate with CANCELLED excluded.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import pathlib
import tempfile
import time
import urllib.request

from grpc import aio
from prometheus_client.parser import text_string_to_metric_families

from harness.core import cliargs
from harness.core import headers as h
from harness.core import limits as lim
from harness.core import metrics as m
from harness.core.errors import RunFailed
from harness.core.status import StatusClass, classify, error_rate, status_name
from harness.demo.proto import drill_pb2, drill_pb2_grpc
from harness.interceptors import DrillClientInterceptor, Tagging
from harness.procs.spawn import start_serve

DEFAULT_DIRECTIVES = ("delay:250", "abort:UNAVAILABLE", "drop:300")


def add_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--target", metavar="HOST:PORT", type=cliargs.host_port, help="a running service (demo proto)")
    where.add_argument("--spawn", action="store_true", help="start a local `drill serve` with faults on, then stop it")
    p.add_argument("--calls", type=cliargs.integer(1, lim.MAX_CLIENT_CALLS, "calls"), default=600,
                   help=f"calls per traffic class (default 600, max {lim.MAX_CLIENT_CALLS})")  # fmt: skip
    p.add_argument("--concurrency", type=cliargs.integer(1, lim.MAX_INFLIGHT, "calls in flight"), default=32,
                   help="calls in flight (default 32)")  # fmt: skip
    p.add_argument(
        "--directive",
        action="append", type=cliargs.directive,
        help=f"drill directive, repeatable (default {', '.join(DEFAULT_DIRECTIVES)})",
    )  # fmt: skip
    p.add_argument("--ratio", type=cliargs.integer(0, 100, "a percentage"), default=50,
                   help="x-fault-ratio for drill calls (default 50)")  # fmt: skip
    p.add_argument("--timeout", type=cliargs.number(0, lim.MAX_DEADLINE_S, "seconds", above=True), default=2.0,
                   help="per-call deadline in seconds (default 2)")  # fmt: skip
    p.add_argument("--cancel-ms", type=cliargs.number(0, lim.MAX_DEADLINE_S * 1000, "milliseconds", above=True),
                   default=100.0, help="cancel delayed drill calls after this many ms")  # fmt: skip
    p.add_argument("--metrics", metavar="URL", type=cliargs.http_url,
                   help="server /metrics URL to read hits from (set by --spawn)")  # fmt: skip
    p.add_argument("--seed", type=cliargs.seed, default=7, help="seed for --spawn (default 7)")


@contextlib.contextmanager
def spawned_server(seed: int):
    """A `drill serve` child on free loopback ports (harness.procs.spawn), stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="drill-client-") as tmp:
        args = ["--port", "0", "--metrics-port", "-1", "--enable-faults", "--seed", str(seed), "--service", "demo"]
        server = start_serve("demo", args, pathlib.Path(tmp), timeout_s=20)
        try:
            yield server.address, server.metrics_url
        finally:
            server.stop()


async def _drive(target: str, args: argparse.Namespace, directives: list[str]) -> dict:
    """Run both traffic classes concurrently; returns {(traffic, mode): Counter(status)}."""
    results: dict = collections.defaultdict(collections.Counter)
    sem = asyncio.Semaphore(args.concurrency)

    async def one(stub, key) -> None:
        async with sem:
            try:
                await stub.Call(drill_pb2.CallRequest(), timeout=args.timeout)
                results[key]["OK"] += 1
            except aio.AioRpcError as err:
                results[key][status_name(err.code())] += 1

    channels = []
    tasks = []
    organic = DrillClientInterceptor(service="drill-client")
    ch = aio.insecure_channel(target, interceptors=[organic])
    channels.append(ch)
    organic_stub = drill_pb2_grpc.DemoStub(ch)
    tasks += [one(organic_stub, ("organic", "none")) for _ in range(args.calls)]
    per = max(1, args.calls // len(directives))
    for directive in directives:
        cancel = args.cancel_ms if directive.startswith("delay") else None
        tag = Tagging(tenant=h.DEFAULT_DRILL_TENANT, directive=directive, ratio=args.ratio)
        ic = DrillClientInterceptor(tag, service="drill-client", cancel_after_ms=cancel)
        ch = aio.insecure_channel(target, interceptors=[ic])
        channels.append(ch)
        stub = drill_pb2_grpc.DemoStub(ch)
        tasks += [one(stub, ("drill", tag.fault_mode)) for _ in range(per)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for ch in channels:
            await ch.close()
    return results


def _server_hits(url: str) -> dict[str, float]:
    """Injected faults by mode, from the server's `drill_fault_hits_total`."""
    name = m.sample_name(m.FAULT_HITS, "_total")
    hits: dict[str, float] = collections.Counter()
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode("utf-8", "replace")
    except OSError as exc:  # URLError, HTTPError, a timeout
        raise RunFailed(f"client: cannot read metrics at {url}: {getattr(exc, 'reason', None) or exc}") from None
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name:
                    hits[sample.labels.get("mode", "")] += sample.value
    except ValueError:
        raise RunFailed(f"client: {url} does not serve Prometheus metrics") from None
    return hits


def _report(results: dict, hits: dict | None, elapsed: float) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"drill client: {sum(sum(c.values()) for c in results.values())} calls in {elapsed:.1f}s")
    for col in ("traffic", "fault mode", "calls", "OK", "CANCELLED", "errors (server-fault)", "error rate*"):
        table.add_column(col, justify="right" if col not in ("traffic", "fault mode") else "left")
    for (traffic, mode), counts in sorted(results.items()):
        rate = error_rate(counts)
        errors = sum(n for s, n in counts.items() if classify(s) is StatusClass.SERVER_FAULT)
        table.add_row(
            traffic, mode, str(sum(counts.values())), str(counts.get("OK", 0)), str(counts.get("CANCELLED", 0)),
            str(errors), "-" if rate is None else f"{rate:.1%}",
        )  # fmt: skip
    console.print(table)
    console.print("* error rate = server-fault / (all − CANCELLED); CANCELLED is never an error.")
    if hits is not None:
        console.print("server-side hits by mode: " + ", ".join(f"{m}={int(n)}" for m, n in sorted(hits.items())))


def run(args: argparse.Namespace) -> int:
    directives = args.directive or list(DEFAULT_DIRECTIVES)
    with contextlib.ExitStack() as stack:
        target, metrics_url = args.target, args.metrics
        if args.spawn:
            target, metrics_url = stack.enter_context(spawned_server(args.seed))
        t0 = time.perf_counter()
        results = asyncio.run(_drive(target, args, directives))
        elapsed = time.perf_counter() - t0
        hits = _server_hits(metrics_url) if metrics_url else None
    _report(results, hits, elapsed)
    answered = sum(n for c in results.values() for s, n in c.items() if s not in ("UNAVAILABLE", "DEADLINE_EXCEEDED"))
    if not answered:
        raise RunFailed(f"client: cannot reach {target}: no call was answered (UNAVAILABLE or timed out)")
    return 0
