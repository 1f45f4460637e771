"""What the soak makes of the memory probe's samples: attribution of an RSS step, tracemalloc's top sites.

`attribute` takes one server's probe lines and says, at the warm point, the highest
point and the end (after the traffic, before and after glibc's `malloc_trim(0)`):
RSS; glibc's heap (`used`: allocated and not freed, `free`: freed but held by the
allocator); the rest of RSS (Python's own arenas, libraries, stacks); the live
objects a call creates (scopes, plans, decisions, asyncio tasks, grpc contexts) and
the Prometheus children; and the most calls in flight seen by the 1-s sampler, in
the overload and in the quiet windows. An RSS step that `malloc_trim` gives back,
while our objects are back to their warm counts, is the allocator's high-water mark;
one held in `used` or in our objects is owned by someone, and the counts say whom.
"""

from __future__ import annotations

import asyncio
import collections
import tracemalloc

from benchmarks import soak_topology as topo_mod

MB = 2**20
#: Our own per-call types (probe's WATCHED names): none of them may outlive the traffic.
CALL_TYPES = (
    "harness.core.scope.CallScope",
    "harness.interceptors._server_pipeline.CallPlan",
    "harness.core.gate.Decision",
    "_asyncio.Task",
    "grpc._cython.cygrpc._ServicerContext",
)


async def trim_control(topo, timeout_s: float = 15.0) -> dict:
    """SIGUSR2 to every server's probe; wait for its before/after `malloc_trim` lines."""
    seen = {s.name: len(topo.probe(s.name)) for s in topo.servers}
    topo.trim()
    out: dict = {}
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while loop.time() < end and len(out) < len(seen):
        await asyncio.sleep(0.5)
        for name, n in seen.items():
            new = topo.probe(name)[n:]
            got = {x["event"]: x for x in new}
            if "after_trim" in got:
                out[name] = {k: round(got[k]["rss"] / MB, 1) for k in ("before_trim", "after_collect", "after_trim")}
                out[name]["unreachable"] = got["after_collect"].get("unreachable")
    return out


def _point(x: dict | None) -> dict:
    if x is None:
        return {}
    heap = x.get("arena", 0) + x.get("mmap", 0)
    out = {
        "t": x.get("t_traffic", x["t"]),
        "rss_mb": round(x["rss"] / MB, 1),
        "rss_max_mb": round(x.get("rss_max", x["rss"]) / MB, 1),
        "glibc_used_mb": round(x.get("used", 0) / MB, 1),
        "glibc_free_mb": round(x.get("free", 0) / MB, 1),
        "py_arenas_mb": round(x.get("py_arenas", 0) / MB, 1),
        "py_used_mb": round(x.get("py_used", 0) / MB, 1),
        "py_free_mb": round(x.get("py_free", 0) / MB, 1),
        "rest_mb": round((x["rss"] - heap - x.get("py_arenas", 0)) / MB, 1) if heap else None,
        "inflight": x.get("inflight"),
        "inflight_max": x.get("inflight_max"),
        "tasks": x.get("tasks"),
        "objects": {k.rsplit(".", 1)[-1]: v for k, v in x.get("objects", {}).items() if k in CALL_TYPES},
        "metric_children": x.get("metric_children"),
    }
    if "traced" in x:
        out["traced_mb"] = round(x["traced"] / MB, 1)
    return out


def attribute(lines: list[dict], plan, t_warm: float, traffic_wall: float) -> dict:
    """Warm, highest and end points of one server's probe, the deltas between them, in-flight maxima."""
    samples = [x for x in lines if x["event"] == "sample"]
    for x in lines:
        x["t_traffic"] = round(x["wall"] - traffic_wall, 1)
    if not samples:
        return {}
    in_traffic = [x for x in samples if 0 <= x["t_traffic"] <= plan.seconds]
    warm = min(in_traffic or samples, key=lambda x: abs(x["t_traffic"] - t_warm))
    high = max(samples, key=lambda x: x.get("rss_max", x["rss"]))
    before = next((x for x in lines if x["event"] == "before_trim"), samples[-1])
    collected = next((x for x in lines if x["event"] == "after_collect"), None)
    after = next((x for x in lines if x["event"] == "after_trim"), None)

    def window_max(pred) -> int:
        # a sample's maxima cover the interval before it: judge it by its midpoint
        vals = [x.get("inflight_max", 0) for x in in_traffic if pred(x["t_traffic"] - plan.interval_s / 2)]
        return max(vals, default=0)

    overloaded = plan.share if plan.overload else (lambda t: 0.6)
    out = {
        "warm": _point(warm),
        "high": _point(high),
        "end": _point(before),
        "after_collect": _point(collected),
        "after_trim": _point(after),
        "inflight_max_overload": window_max(lambda t: overloaded(t) > 1.0),
        "inflight_max_quiet": window_max(lambda t: overloaded(t) <= 1.0),
        "loop_lag_max_s": max((x.get("loop_lag_max_s", 0.0) for x in in_traffic), default=0.0),
        "series": [
            [
                x["t_traffic"],
                round(x["rss"] / MB, 1),
                round(x.get("used", 0) / MB, 1),
                round(x.get("free", 0) / MB, 1),
                round(x.get("py_arenas", 0) / MB, 1),
                round(x.get("py_used", 0) / MB, 1),
                x.get("inflight_max"),
                x.get("tasks_max"),
            ]
            for x in samples
        ],  # fmt: skip
        "series_columns": [
            "t",
            "rss_mb",
            "glibc_used_mb",
            "glibc_free_mb",
            "py_arenas_mb",
            "py_used_mb",
            "inflight_max",
            "tasks_max",
        ],  # fmt: skip
    }
    w, e = out["warm"], out["end"]
    out["end_minus_warm_mb"] = {
        k: round(e[k] - w[k], 1)
        for k in ("rss_mb", "glibc_used_mb", "glibc_free_mb", "py_arenas_mb", "py_used_mb", "py_free_mb", "rest_mb")
        if e.get(k) is not None and w.get(k) is not None
    }
    if collected and after:
        out["unreachable_at_end"] = collected.get("unreachable")
        out["collect_returned_mb"] = round((before["rss"] - collected["rss"]) / MB, 1)
        out["trim_returned_mb"] = round((collected["rss"] - after["rss"]) / MB, 1)
    return out


def _site_sizes(path: str) -> dict[str, tuple[int, int]]:
    """(bytes, blocks) per allocation site (file:line of the innermost frame) of a dumped snapshot."""
    stats = tracemalloc.Snapshot.load(path).statistics("lineno")
    return {f"{s.traceback[0].filename}:{s.traceback[0].lineno}": (s.size, s.count) for s in stats}


def top_sites(lines: list[dict], n: int = 15) -> dict:
    """The `n` allocation sites whose traced size grew most from the first to the last third of the samples."""
    samples = [x for x in lines if x["event"] == "sample" and x.get("snapshot")]
    if len(samples) < 3:
        return {}
    third = len(samples) // 3

    def mean(group: list[dict]) -> dict[str, tuple[float, float]]:
        size: collections.Counter = collections.Counter()
        count: collections.Counter = collections.Counter()
        for x in group:
            for site, (s, c) in _site_sizes(x["snapshot"]).items():
                size[site] += s
                count[site] += c
        return {k: (size[k] / len(group), count[k] / len(group)) for k in size}

    first, last = mean(samples[:third]), mean(samples[-third:])
    zero = (0.0, 0.0)
    growth = sorted(
        ((site, last.get(site, zero)[0] - first.get(site, zero)[0]) for site in set(first) | set(last)),
        key=lambda kv: -kv[1],
    )[:n]
    return {
        "samples_per_third": third,
        "traced_mb_first_third": round(sum(x["traced"] for x in samples[:third]) / third / MB, 2),
        "traced_mb_last_third": round(sum(x["traced"] for x in samples[-third:]) / third / MB, 2),
        "sites": [
            {
                "site": site,
                "growth_kb": round(g / 1024, 1),
                "first_kb": round(first.get(site, zero)[0] / 1024, 1),
                "last_kb": round(last.get(site, zero)[0] / 1024, 1),
                "first_blocks": round(first.get(site, zero)[1]),
                "last_blocks": round(last.get(site, zero)[1]),
            }
            for site, g in growth
        ],  # fmt: skip
    }


def inflight_bound(r: dict) -> int:
    """Calls that may hold a gateway handler at once: a slot or a queue place each, and no more
    than arrive within one deadline at the overload rate. An open-loop generator that fell behind
    by `late_max_s` sends what it owes at once, so one deadline's window can hold the arrivals of
    deadline + late_max_s seconds; and a call stays in the gateway's handler until the gateway's event
    loop gets to cancel it, its deadline + the loop's lag later (both measured, not assumed)."""
    late = r["books"].get("late_max_s", 0.0)
    lag = r["memory"].get("gateway", {}).get("loop_lag_max_s", 0.0)
    by_deadline = int(r["overload_rate_per_s"] * (2.0 + late + lag)) + 1
    return min(topo_mod.CONCURRENCY + topo_mod.QUEUE, by_deadline)


#: RSS a server may keep per call it had in flight at its peak (the allocators' high-water mark).
#: Measured at the naive gateway in 1-minute runs: 54-107 KB of RSS per call in flight above the warm
#: value (each holds its request, grpc's call state, a task, up to 4 attempts' client calls, and the
#: garbage cycles grpc.aio leaves per aborted call until the next full collection); 128 KiB bounds them.
PER_CALL_IN_FLIGHT = 128 * 1024

#: Native memory grpc.aio keeps for good per call whose caller left (grpc/grpc#43360, open in grpcio
#: 1.85.3: a batch's `grpc_op` array is freed only when the awaiting coroutine reads the batch's
#: event, so a batch whose awaiter is cancelled, or that fails, leaks it). At the gateway one caller
#: that left costs a cancelled downstream attempt (the handler is cancelled while it awaits the
#: ledger) and at most one status sent after the client left; at the ledger, a cancelled attempt.
#: `benchmarks/soak_grpc_cancel_leak.py` measures each with plain grpcio, twice 3,000 calls
#: (benchmarks/results/soak-grpc-cancel-leak.txt): 975-983 bytes per cancelled client call and
#: 207-437 per status sent after the client left, the same in both halves (a leak, not a
#: high-water mark); a call that simply expires in its handler keeps 28-53. 1.5 KiB bounds the sum.
DEPENDENCY_LEAK_PER_LEFT_CALL = 1536


def check_rss(r: dict) -> list[str]:
    """RSS back within 10 % of warm, or within the allocators' high-water mark of the peak in flight
    (warm + PER_CALL_IN_FLIGHT x peak); and what is still owned (allocated in glibc's heap and in
    Python's arenas, after a full collection) back within 10 % + 2 MB of the warm, in-traffic value.
    Both allow grpc's own leak for calls whose caller left (`dependency_leak_mb`), and nothing more."""
    bad = []
    for name, m in r["memory"].items():
        warm, end = r["rss_warm_mb"].get(name), r["rss_end_mb"].get(name)
        if warm is None or not m.get("warm"):
            bad.append(f"no warm-up RSS for {name} (run shorter than its warm-up)")
            continue
        peak = held_peak(r, name)
        leak = dependency_leak_mb(r, name)
        bound = round(max(warm * 1.10, warm + peak * PER_CALL_IN_FLIGHT / MB) + leak, 1)
        m["rss_bound_mb"], m["dependency_leak_mb"] = bound, round(leak, 1)
        if end > bound:
            bad.append(
                f"RSS of {name} grew {warm} -> {end} MB (bound {bound}: 10 %, or {peak} held at once x 128 KiB;"
                f" + {leak:.1f} MB grpc keeps for callers that left)"
            )
        owned = m.get("after_collect") or {}
        for k in ("glibc_used_mb", "py_used_mb"):
            w, e = m["warm"].get(k), owned.get(k)
            if w is None or e is None:
                continue
            native_leak = leak if k == "glibc_used_mb" else 0.0  # grpc's leak is native, never Python's
            if e > w * 1.10 + 2.0 + native_leak:
                bad.append(
                    f"{name}: {k} {w} -> {e} MB after the traffic and a full collection (owned memory grew;"
                    f" bound {w * 1.10 + 2.0 + native_leak:.1f} MB with grpc's {native_leak:.1f} MB for callers"
                    " that left)"
                )
    return bad


def _handlers_peak(m: dict) -> int:
    return max(m.get("inflight_max_overload", 0), m.get("inflight_max_quiet", 0))


def held_peak(r: dict, server: str) -> int:
    """Most calls `server` held at once. The probe counts calls in handlers; calls grpc core has
    accepted and not yet handed to a handler are not seen. The gateway's are few (its handlers
    start at once; its queue is ours, in the handler); the ledger's wait in grpc core behind its
    one busy worker, and are at most the attempts the gateway has out towards it: one per gateway
    handler (the naive caller sends one attempt at a time)."""
    mem = r["memory"]
    own = _handlers_peak(mem.get(server, {}))
    return max(own, _handlers_peak(mem.get("gateway", {}))) if server == "ledger" else own


def dependency_leak_mb(r: dict, server: str) -> float:
    """What grpc.aio may keep at `server` for the calls whose caller left (grpc/grpc#43360)."""
    return left_calls(r, server) * DEPENDENCY_LEAK_PER_LEFT_CALL / MB


def left_calls(r: dict, server: str) -> int:
    """Calls whose caller left while `server` still held them: every call the generator saw expire
    at its deadline (the gateway's handler was cancelled), plus, at the ledger, every gateway attempt
    cut off by its per-attempt timeout."""
    return expired_calls(r) + (r.get("gateway_attempts_timed_out", 0) if server == "ledger" else 0)


def expired_calls(r: dict) -> int:
    """Calls the generator saw end DEADLINE_EXCEEDED (organic and drill)."""
    return sum(v for k, v in r["books"]["other_errors"].items() if k.endswith("DEADLINE_EXCEEDED"))


def check_objects(r: dict) -> list[str]:
    """Nothing a call creates outlives it: after the traffic and a full collection, no scope, plan or
    servicer context is alive, and no more decisions and tasks than the warm, in-traffic sample held."""
    bad = []
    for name, m in r["memory"].items():
        if not m.get("high"):
            bad.append(f"no probe samples for {name}")
            continue
        left = m.get("after_collect", {}).get("objects")
        if left is None:
            bad.append(f"{name}: no after-collection sample (the trim control did not answer)")
            continue
        for k, v in left.items():
            allowed = m["warm"]["objects"].get(k, 0) if k in ("Decision", "Task") else 0
            if v > allowed:
                bad.append(f"{name}: {v} {k} alive after the traffic and a full collection (allowed {allowed})")
    return bad


def check_overload(r: dict) -> list[str]:
    bad = []
    if not expired_calls(r):
        bad.append("no call expired at its deadline: the overload was not reproduced")
    gw = r["memory"].get("gateway", {})
    bound = inflight_bound(r)
    if gw.get("inflight_max_overload", 0) > bound:
        late, lag = r["books"].get("late_max_s", 0.0), gw.get("loop_lag_max_s", 0.0)
        bad.append(
            f"gateway calls in flight reached {gw['inflight_max_overload']} (bound {bound}:"
            f" {r['overload_rate_per_s']}/s x (2-s deadline + generator late {late:.3f} s"
            f" + gateway loop lag {lag:.3f} s))"
        )
    return bad


def summary(r: dict) -> list[str]:
    lines = []
    for name, m in r.get("memory", {}).items():
        if not m:
            continue
        w, hi, e = m["warm"], m["high"], m["end"]
        lines.append(
            f"soak: {name} memory: warm {w['rss_mb']} MB (glibc used {w['glibc_used_mb']}, free {w['glibc_free_mb']}) "
            f"-> highest {hi['rss_max_mb']} MB at t={hi['t']} s -> end {e['rss_mb']} MB (used {e['glibc_used_mb']}, "
            f"free {e['glibc_free_mb']}); a full gc found {m.get('unreachable_at_end')} unreachable objects and "
            f"returned {m.get('collect_returned_mb')} MB, malloc_trim then {m.get('trim_returned_mb')} MB; "
            f"Python arenas {w['py_arenas_mb']} -> {e['py_arenas_mb']} MB "
            f"(used {w['py_used_mb']} -> {e['py_used_mb']}); "
            f"in flight max "
            f"{m['inflight_max_overload']} overloaded / {m['inflight_max_quiet']} quiet; our objects warm "
            f"{w['objects']} end {e['objects']}, after a full collection {m['after_collect'].get('objects')}"
        )
    for name, t in r.get("tracemalloc_top", {}).items():
        if t:
            lines.append(f"soak: {name} traced heap first third {t['traced_mb_first_third']} MB, last third "
                         f"{t['traced_mb_last_third']} MB; top sites by growth:")  # fmt: skip
            lines += [f"soak:   {s['growth_kb']:>9} KB  {s['site']} ({s['first_blocks']} -> {s['last_blocks']} blocks)"
                      for s in t["sites"]]  # fmt: skip
    return lines
