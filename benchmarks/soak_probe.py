"""`drill serve` with a memory probe beside it: what the soak reads inside a server.

    python benchmarks/soak_probe.py --probe-out FILE [--interval 30] [--tracemalloc N] -- serve ARGS...

Runs `drill serve ARGS` in this process (the same code, `harness.demo.serve`) and a
sampler thread that appends one JSON line to FILE every `--interval` seconds:

- `rss`, and its highest value and the most calls in flight seen by a 1-s sampler
  since the previous line (`rss_max`, `inflight_max`): in flight = calls whose
  handler began and has not ended (`grpc_server_call_started_total` minus
  `drill_server_calls_total`, read from this process's registry), and `tasks`
  (live asyncio tasks);
- glibc's heap (`mallinfo2`: `arena` bytes taken from the system with brk, `mmap`
  bytes in mmapped chunks, `used` bytes allocated, `free` bytes freed but held):
  `free` is what the allocator keeps after a peak, `used` is what is still owned;
- Python's own allocator (`py_arenas`, `py_used`, `py_free`: its mmapped arenas, outside
  glibc's heap, and the bytes allocated and available in them);
- `objects`: live instances of the types a call creates or touches (scopes, plans,
  decisions, spans, breaker windows, asyncio tasks, grpc's servicer contexts),
  `metric_children` (labelled children in the Prometheus registry) and the `top`
  20 types by count;
- with `--tracemalloc N` (a separate diagnostic run: it costs memory and CPU of its
  own), the traced Python heap, and a tracemalloc snapshot dumped beside FILE
  (`FILE.snap-K`) for the soak to group by allocation site afterwards.

Each line also carries the 1-s sampler's readings since the previous line (`fast`:
wall time, RSS MB, glibc used MB, calls in flight) and the garbage collector's
collections per generation (`gc`).

SIGUSR2 writes three lines: `before_trim`; `after_collect`, after a full garbage
collection (with the number of `unreachable` objects it found: garbage cycles a
call left behind); `after_trim`, after glibc's `malloc_trim(0)` (which returns freed
heap pages to the system). RSS that falls at the trim, with nothing collected, was
the allocator's high-water mark, not memory anything still owns.

A benchmark tool: nothing here is imported by the harness.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import ctypes.util
import gc
import json
import os
import re
import signal
import sys
import threading
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PAGE = os.sysconf("SC_PAGE_SIZE")
MB = 2**20
FAST_S = 1.0
#: how often the loop-lag meter asks to be woken (s): its lateness is how late the loop runs anything
LAG_TICK_S = 0.05

#: Type names (`module.qualname`) whose live instances every sample counts.
WATCHED = (
    "harness.core.scope.CallScope",
    "harness.interceptors._server_pipeline.CallPlan",
    "harness.core.gate.Decision",
    "harness.resilience.breaker.CountWindow",
    "harness.resilience.breaker.TimeWindow",
    "opentelemetry.sdk.trace._Span",
    "opentelemetry.sdk.trace.ReadableSpan",
    "_asyncio.Task",
    "grpc._cython.cygrpc._ServicerContext",
    "grpc._cython.cygrpc.RPCState",
    "grpc.aio._call.UnaryUnaryCall",
    "grpc.aio._interceptor.InterceptedUnaryUnaryCall",
    "grpc.aio._call.AioRpcError",
    "coroutine",
    "frame",
)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
    )]  # fmt: skip


def _libc():
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        lib.mallinfo2.restype = _MallInfo2
        lib.malloc_trim.argtypes = [ctypes.c_size_t]
        lib.open_memstream.restype = ctypes.c_void_p
        lib.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t)]
        lib.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        lib.fclose.argtypes = [ctypes.c_void_p]
        lib.free.argtypes = [ctypes.c_void_p]
        return lib
    except (OSError, AttributeError):  # not glibc, or glibc < 2.33
        return None


LIBC = _libc()


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


def mallinfo() -> dict[str, int]:
    if LIBC is None:
        return {}
    mi = LIBC.mallinfo2()
    return {"arena": mi.arena, "mmap": mi.hblkhd, "used": mi.uordblks, "free": mi.fordblks}


def arenas() -> list[list[int]]:
    """glibc's heaps (`malloc_info`): [bytes taken from the system, bytes free in it] per arena."""
    if LIBC is None:
        return []
    text = _memstream(lambda fp: LIBC.malloc_info(0, fp))
    out = []
    for heap in re.findall(r'<heap nr="\d+">(.*?)</heap>', text, re.S):
        system = re.search(r'<system type="current" size="(\d+)"', heap)
        free = sum(int(x) for x in re.findall(r'<total type="(?:fast|rest)" count="\d+" size="(\d+)"', heap))
        out.append([int(system.group(1)) if system else 0, free])
    return out


def _memstream(write) -> str:
    """What `write(FILE*)` prints, through glibc's open_memstream (no file descriptor is touched)."""
    buf, size = ctypes.c_char_p(), ctypes.c_size_t()
    fp = LIBC.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not fp:
        return ""
    try:
        write(fp)
    finally:
        LIBC.fclose(fp)
    text = ctypes.string_at(buf, size.value).decode(errors="replace")
    LIBC.free(ctypes.cast(buf, ctypes.c_void_p))
    return text


def pymalloc() -> dict[str, int]:
    """Python's own small-object allocator (`_PyObject_DebugMallocStats`): `py_arenas` bytes in its
    arenas (mmapped, outside glibc's heap), `py_used` bytes in allocated blocks, `py_free` bytes in
    available blocks. An arena goes back to the system only when every block in it is free."""
    if LIBC is None:
        return {}
    try:
        stats = ctypes.pythonapi._PyObject_DebugMallocStats
        stats.argtypes, stats.restype = [ctypes.c_void_p], ctypes.c_int
        text = _memstream(stats)
    except (AttributeError, OSError):
        return {}

    def value(pattern: str) -> int:
        found = re.search(pattern + r"\s*=\s*([\d,]+)", text)
        return int(found.group(1).replace(",", "")) if found else 0

    return {
        "py_arenas": value(r"\d+ arenas \* \d+ bytes/arena"),
        "py_used": value(r"# bytes in allocated blocks"),
        "py_free": value(r"# bytes in available blocks"),
    }


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _type_name(t: type) -> str:
    mod = getattr(t, "__module__", "") or ""
    name = getattr(t, "__qualname__", t.__name__)
    return f"{mod}.{name}" if mod and mod != "builtins" else name


def object_counts() -> tuple[dict[str, int], list[tuple[str, int]]]:
    """(counts of the WATCHED types, top 20 types by count) among gc-tracked objects."""
    counts: collections.Counter[type] = collections.Counter(type(o) for o in gc.get_objects())
    by_name: collections.Counter[str] = collections.Counter()
    for t, n in counts.items():
        by_name[_type_name(t)] += n
    return {k: by_name.get(k, 0) for k in WATCHED}, by_name.most_common(20)


def metric_children() -> int:
    from prometheus_client import REGISTRY

    total = 0
    for collector in list(REGISTRY._collector_to_names):  # a diagnostic may read the private map
        total += len(getattr(collector, "_metrics", {}) or {})
    return total


def in_flight() -> int:
    """Calls whose handler began and has not ended, from this process's registry."""
    from harness.core import metrics as m

    def total(metric, name: str) -> float:
        return sum(s.value for fam in metric.collect() for s in fam.samples if s.name == name)

    started = total(m.GRPC_SERVER_CALL_STARTED, "grpc_server_call_started_total")
    ended = total(m.SERVER_CALLS, "drill_server_calls_total")
    return int(started - ended)


class Probe:
    def __init__(self, out: str, interval_s: float, frames: int) -> None:
        self.out = out
        self.interval_s = interval_s
        self.frames = frames
        self.loop: asyncio.AbstractEventLoop | None = None
        self.trim = threading.Event()
        self.t0 = time.monotonic()
        self._rss_max = 0
        self._inflight_max = 0
        self._tasks_max = 0
        #: the event loop's longest lateness since the last sample (s): a call the loop is late to
        #: cancel stays in its handler past its deadline by that much
        self.lag_max = 0.0
        self._fast: list[list] = []
        self._snaps = 0

    def tasks(self) -> int:
        if self.loop is None:
            return 0
        try:
            return len(asyncio.all_tasks(self.loop))
        except RuntimeError:
            return -1

    def sample(self, event: str = "sample") -> dict:
        rec: dict = {"t": round(time.monotonic() - self.t0, 1), "wall": round(time.time(), 2), "event": event}
        rec["rss"] = rss_bytes()
        rec.update(mallinfo())
        rec["rss_max"] = max(self._rss_max, rec["rss"])
        rec["inflight"] = in_flight()
        rec["inflight_max"] = max(self._inflight_max, rec["inflight"])
        rec["tasks"] = self.tasks()
        rec["tasks_max"] = max(self._tasks_max, rec["tasks"])
        rec["loop_lag_max_s"], self.lag_max = round(self.lag_max, 3), 0.0
        self._rss_max = self._inflight_max = self._tasks_max = 0
        rec["fast"], self._fast = self._fast, []
        rec["gc"] = [st["collections"] for st in gc.get_stats()]
        t = time.perf_counter()
        rec.update(pymalloc())
        rec["threads"] = threads()
        rec["arenas"] = arenas()
        rec["objects"], rec["top"] = object_counts()
        rec["metric_children"] = metric_children()
        if self.frames:
            rec["traced"], rec["traced_peak"] = tracemalloc.get_traced_memory()
            self._snaps += 1
            path = f"{self.out}.snap-{self._snaps}"
            tracemalloc.take_snapshot().dump(path)  # grouped later, outside this process (grouping here is traced)
            rec["snapshot"] = path
        rec["probe_ms"] = round((time.perf_counter() - t) * 1000, 1)
        return rec

    def write(self, rec: dict) -> None:
        with open(self.out, "a") as fh:
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")

    def fast(self) -> None:
        rss = rss_bytes()
        self._rss_max = max(self._rss_max, rss)
        try:
            flying = in_flight()
        except Exception:  # noqa: BLE001 - a sampler must not die on a race
            flying = -1
        self._inflight_max = max(self._inflight_max, flying)
        self._tasks_max = max(self._tasks_max, self.tasks())
        used = mallinfo().get("used", 0)
        self._fast.append([round(time.time(), 1), round(rss / MB, 2), round(used / MB, 2), flying])

    def run(self) -> None:
        next_at = time.monotonic() + self.interval_s
        while True:
            if self.trim.wait(FAST_S):
                self.trim.clear()
                self.write(self.sample("before_trim"))
                unreachable = gc.collect()
                rec = self.sample("after_collect")
                rec["unreachable"] = unreachable
                self.write(rec)
                if LIBC is not None:
                    LIBC.malloc_trim(0)
                self.write(self.sample("after_trim"))
                continue
            self.fast()
            if time.monotonic() >= next_at:
                next_at += self.interval_s
                self.write(self.sample())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--")
    own, serve_argv = argv[:split], argv[split + 1 :]
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--probe-out", required=True)
    ap.add_argument("--interval", type=float, default=30.0)
    ap.add_argument("--tracemalloc", type=int, default=0, help="frames per traced allocation (0 = off)")
    args = ap.parse_args(own)
    if args.tracemalloc:
        tracemalloc.start(args.tracemalloc)
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    from harness.cli import build_parser
    from harness.demo import serve

    probe = Probe(args.probe_out, args.interval, args.tracemalloc)
    signal.signal(signal.SIGUSR2, lambda *_: probe.trim.set())
    ns = build_parser(only="serve").parse_args(serve_argv)
    original = serve._serve

    async def lag_meter(loop: asyncio.AbstractEventLoop) -> None:
        while True:
            due = loop.time() + LAG_TICK_S
            await asyncio.sleep(LAG_TICK_S)
            probe.lag_max = max(probe.lag_max, loop.time() - due)

    async def with_probe(a):
        probe.loop = asyncio.get_running_loop()
        threading.Thread(target=probe.run, name="soak-probe", daemon=True).start()
        meter = asyncio.ensure_future(lag_meter(probe.loop))
        try:
            return await original(a)
        finally:
            meter.cancel()

    serve._serve = with_probe
    return serve.run(ns)


if __name__ == "__main__":
    sys.exit(main())
