"""The server pipeline's own Python cost per call, in-process: no transport, no other process involved.

    .venv/bin/python benchmarks/pipeline_cost.py [--calls 20000 --repeats 7] [--tree DIR]

Drives the aio interceptor the way grpc.aio does for one unary call (intercept,
then the returned handler with a stand-in servicer context) for an organic call
with a request id, pinned to one core, and prints the CPU µs per call of each
mode minus that of the bare handler, as the minimum over `--repeats` runs (the
least disturbed run: noise only ever adds time). This is what the interceptor
itself costs; `interceptor_overhead.py` measures what a real server then spends.
Last line: `pipeline_us off=… on=… on_trace=… on_trace_unsampled=…`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


class _Context:
    """The parts of grpc.aio's servicer context the pipeline touches on an organic call."""

    def time_remaining(self):
        return 1.9

    def code(self):
        return None

    def trailing_metadata(self):
        return ()

    def set_trailing_metadata(self, md) -> None:
        pass


class _Details:
    method = "/drill.v1.Demo/Call"
    invocation_metadata = (
        ("user-agent", "grpc-python/1.85.3 grpc-c/51.0.0 (linux; chttp2)"),
        ("x-request-id", "plan-7-organic3-12"),
    )


def measure(mode: str, calls: int, repeats: int) -> float:
    import grpc

    from harness.core.settings import FaultSettings
    from harness.interceptors import FaultServerInterceptor

    async def behavior(request, context):
        return request

    handler = grpc.unary_unary_rpc_method_handler(behavior)
    tracer = None
    if mode.startswith("on-trace"):
        os.environ["OTEL_TRACES_SAMPLER"] = (
            "parentbased_always_off" if mode == "on-trace-unsampled" else "parentbased_always_on"
        )
        from opentelemetry.sdk.trace import TracerProvider

        from harness.core import tracing

        provider = TracerProvider()  # reads OTEL_TRACES_SAMPLER; no span processor, as `setup_tracing("none")`
        tracer = provider.get_tracer("bench")
        wrap = getattr(tracing, "HarnessTracer", None)  # older checkouts use the SDK tracer as it is
        tracer = wrap(tracer) if wrap is not None else tracer
    interceptor = FaultServerInterceptor(
        FaultSettings(enabled=mode != "off", seed=1, service=f"cost-{mode}"), metrics=None, tracer=tracer
    )
    details, context = _Details(), _Context()

    async def continuation(_details):
        return handler

    async def run() -> float:
        best = float("inf")
        for _ in range(repeats):
            t0 = time.process_time()
            for _ in range(calls):
                if mode == "handler":
                    h = await continuation(details)
                else:
                    h = await interceptor.intercept_service(continuation, details)
                await h.unary_unary(None, context)
            best = min(best, (time.process_time() - t0) / calls * 1e6)
        return best

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tree", default=str(ROOT), help="checkout whose interceptors to measure")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from benchmarks._cpu import cores, header, load_average

    sys.path.insert(0, str(pathlib.Path(args.tree).resolve()))
    print(header("pipeline_cost"), flush=True)
    os.sched_setaffinity(0, {cores()[1]})
    base = measure("handler", args.calls, args.repeats)
    out = {}
    for mode in ("off", "on", "on-trace", "on-trace-unsampled"):
        out[mode] = measure(mode, args.calls, args.repeats) - base
        print(f"{mode:<20}{out[mode]:7.1f} µs per call above the bare handler ({base:.1f} µs)", flush=True)
    print(f"# load average at end: {load_average()}")
    print("pipeline_us " + " ".join(f"{k.replace('-', '_')}={v:.1f}" for k, v in out.items()))


if __name__ == "__main__":
    main()
