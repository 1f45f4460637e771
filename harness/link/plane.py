"""`drill proxy --plane link`: drill proxy's options and promises, carried by a link (one decision pipeline, two
executors).

The proxy's own plane (`harness.proxy`) runs the interceptors' pipeline (`ServerCore`) around grpc.aio handlers
that forward each call; this one runs the same `ServerCore` on `drill link`'s HTTP/2 frame relay
(`harness.link.calls`, as `drill link --enable-faults` does) with what a hop needs on top (`LinkCalls(hop=True)`):
every stream recorded as the call it is (the per-call metrics drill proxy exports, organic calls too, each with the
server's grpc-status read from its trailers), and the in-flight limit (`--max-in-flight` / DRILL_MAX_IN_FLIGHT:
past it a new stream is refused at once with RESOURCE_EXHAUSTED, never forwarded, counted and audited as drill proxy
counts one). The settings, each method's kind (`harness.protos.method_kinds`: --descriptor-set, --proto, else the
upstream's reflection), the ready and port files, the one-way stop and the error lines are drill proxy's, and so
is `--workers N` (`harness.demo.workers`: N link-plane processes on one port, SO_REUSEPORT).
Not carried (refused as bad input, so nobody believes it is on): `--max-backlog` (the link has no grpc core
queue: its bound is the in-flight limit). Spans: a SERVER span per call when OTEL_TRACES_EXPORTER names an
exporter, child of the caller's context, as the aio plane writes them (the service's own span is its sibling on both
planes: neither rewrites the caller's `traceparent`).
The choice between the planes is `harness.cli`'s (`PLANES`): this module imports nothing of `harness.proxy`.
"""

from __future__ import annotations

import argparse
import logging
import os

from harness.core.errors import BadInput, RunFailed
from harness.core.settings import FaultSettings
from harness.demo.lifecycle import STOP_GRACE_S, announce, check_free, serve_metrics, settings_from_args, tracer_for
from harness.link.calls import LinkCalls
from harness.link.cli import run_loop, wire_stop
from harness.link.links import LinkSet
from harness.link.toxics import ToxicError
from harness.protos import method_kinds

log = logging.getLogger("drill.proxy")


def run(args: argparse.Namespace) -> int:
    """`drill proxy --plane link` until SIGINT or SIGTERM."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.max_backlog is not None:
        raise BadInput("proxy: --max-backlog: it bounds grpc's core queue, which --plane link has not (its bound is "
                       "--max-in-flight): drop it or use --plane aio")  # fmt: skip
    if args.tap:
        if args.enable_faults:
            raise BadInput("proxy: --tap injects nothing: drop --enable-faults (or --tap)")
        os.environ["DRILL_FAULT_ENABLED"] = "0"
    # local inputs first (a missing --proto or a bad DRILL_* value is bad input whatever the port), then the port,
    # then the network: as the aio plane
    local = bool(args.descriptor_set or args.proto or args.proto_path)
    kinds = method_kinds(args) if local else {}
    settings = settings_from_args(args, "proxy")
    if args.workers > 1:  # each worker is this command with --reuse-port, its checks passed here once
        from harness.demo.workers import supervise

        return supervise(args)
    if not args.reuse_port:
        check_free(args.host, args.port, "proxy")
    if not local:
        kinds = method_kinds(args)
    return run_loop("auto", _serve(args, settings, kinds))


async def start_plane(upstream: str, *, host: str = "127.0.0.1", port: int = 0, settings: FaultSettings,
                      method_kinds: dict | None = None, metrics: bool = True,
                      reuse_port: bool = False, tracer=None) -> tuple[LinkSet, int]:  # fmt: skip
    """Start a link-plane proxy in front of `upstream` (what `drill proxy --plane link` runs); (its links, the bound
    port). `reuse_port`: share the port with the other workers of `--workers`; `tracer`: a SERVER span per call, as
    the aio plane writes. `await links.close()` ends it."""
    calls = LinkCalls(settings, kinds=method_kinds, metrics=metrics, hop=True, tracer=tracer)
    links = LinkSet(seed=settings.seed, drill_tenants=settings.tenants, calls=calls)
    link = await links.add("proxy", f"{host}:{port}", upstream, reuse_port=reuse_port)
    return links, link.port


async def _serve(args: argparse.Namespace, settings: FaultSettings, kinds: dict) -> int:
    metrics_port = serve_metrics(args, "proxy")
    try:
        links, port = await start_plane(args.upstream, host=args.host, port=args.port, settings=settings,
                                        method_kinds=kinds, reuse_port=args.reuse_port,
                                        tracer=tracer_for(settings))  # fmt: skip
    except (OSError, ToxicError) as exc:  # ToxicError: the link's bind failed (a port in use)
        raise RunFailed(f"proxy: cannot listen on {args.host}:{args.port} (port in use or not allowed)") from exc
    done = wire_stop(links, settings)
    log.warning("proxy %s on %s:%d → %s (plane link, faults %s, seed %d, %d methods known, at most %d in flight), "
                "metrics on :%s", settings.service, args.host, port, args.upstream,
                "ON" if settings.enabled else "off", settings.seed, len(kinds), settings.max_in_flight,
                metrics_port or "-")  # fmt: skip
    announce(args, port, {"metrics_port": metrics_port})
    await done.wait()
    await links.drain(STOP_GRACE_S)  # calls in flight get the grace the aio plane gives them
    await links.close()
    return 0
