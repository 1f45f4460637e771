"""The reach probe: proof, before the first fault, that the drill's calls arrive at the hop that injects.

A drill travels in its calls: the tenant, the directive, the target and the rest are keys each hop forwards to
the next (contracts §2). A hop that is not ours and propagates nothing (a Go or Node service without
OpenTelemetry's propagation, a plain forwarder) drops them, and every hop behind it sees organic calls: the run
would inject nothing and say so only after its trials (exit 4). This module asks first.

What it sends: `PROBE_CALLS` calls through the edge, one after another, tagged exactly as the load tags a drill
call (`CallTags`, the function the Locust user and `outgoing_metadata` share: the plan's tenant, directive,
target, instance share, scope and attempts) with one change, `x-fault-ratio: 0`. Every hop's gate takes such a
call as drill traffic (the tenant is on its allowlist); a hop that is not the target forwards the keys; the
target's gate runs every check of its own (its name, its bounds, the method's kind, its instance) and stops at
the ratio: at 0 no id is hit (`faults.is_hit`), so nothing is injected, no marker is set and no audit line is
written (a hop audits hits and refusals, never a ratio skip). The ids are `PLAN-probe-N`, outside the load's
form (`PLAN-SEED-USER-N-MIX`, `harness.core.ids`): no trial tags them, so none is in a trial's expected or
observed hits whatever the services say of them.

What it reads: each hop's `drill_server_calls_total{traffic="drill"}`, summed over the hop's `/metrics` URLs
(its replicas) or over its Prometheus selector, before the probe and after it. A hop that counted at least one
call as drill traffic was reached. In chain order up to the target, the first hop that counted none is named:
a hop before it (one with no readings of its own, not listed in the plan, or a listed one) carried the call
but not the drill. Hops behind the target are not asked: the target forwards no directive. The target's gates
(`drill_fault_skipped_total`, `drill_fault_rejected_total` by reason) must not have refused the probe's
directive either: skipped as another hop's (the target calls itself another name) or refused (a delay over its
bound, …), it would inject nothing; the cause is worded as `analysis.landing` words it after a trial.

Bounds: each call at most `CALL_TIMEOUT_S` (or the plan's shorter timeout), so the calls take at most
PROBE_CALLS × that; a `/metrics` read at most `READ_TIMEOUT_S`. A hop read from Prometheus shows the probe only
once Prometheus has scraped it after the probe: after it by `SETTLE_S`, since a server counts a call when its
handling ends, after the caller has its answer (a stall of a busy box widens that gap; a scrape inside it reads
the count without the probe), so the wait is one scrape interval of its config, a second for the scrape itself
(`readings.scrapes.scrape_interval_s`) and `SETTLE_S`, said before it starts. A read in which a target's last
scrape failed holds no count (its series went stale): such a read waits for the next scrape, before the probe as
after. A trial's counters start after all this (the runner reads its baseline after the preflight), so the probe
is in none of them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from grpc import aio

from harness.core import metrics as m
from harness.core.metrics import method_label
from harness.drills.plan.model import Variant
from harness.drills.stack.edge import EdgeCall
from harness.interceptors._client_core import CallTags

if TYPE_CHECKING:
    from harness.drills.stack.targets import DrillTarget
    from harness.drills.trials.preflight import Preflight

#: How many probe calls: a few, so a hop with replicas behind a balancer is likely asked through more than one.
PROBE_CALLS = 3
#: The longest one probe call may take (the plan's `traffic.timeout_s` when shorter).
CALL_TIMEOUT_S = 5.0
#: The longest one `/metrics` read may take.
READ_TIMEOUT_S = 5.0
#: How long after the probe's last answer a scrape must start to be sure to count it (see the module's docstring):
#: the server's own bookkeeping after it answered takes microseconds; this covers a stall of a busy box to 0.5 s
SETTLE_S = 0.5
#: The counter a hop's interceptor moves for every call it served, by traffic class (contracts §7).
CALLS = m.sample_name(m.SERVER_CALLS, "_total")
#: What a hop that carries nothing of the drill says, worded once (the run's and the dry run's line).
PROPAGATION = ("a hop before it forwards neither baggage nor the x-* keys (OpenTelemetry propagation fixes it: "
               "docs/fleet.md)")  # fmt: skip


def probe_id(plan: str, n: int) -> str:
    """The request id of probe call `n`: `PLAN-probe-N`, a form no load generates."""
    return f"{plan}-probe-{n}"


def probe_tags(variant: Variant, call: EdgeCall) -> CallTags:
    """The load's drill tags of `variant` (`Fault.tagging`) at ratio 0: drill traffic that no gate hits."""
    tagging = dataclasses.replace(variant.fault.tagging(), ratio=0)
    return CallTags(tagging, method_label(call.method), frozenset({variant.fault.tenant}))


async def send(edges: Sequence[str], call: EdgeCall, tags: CallTags, plan: str, timeout_s: float) -> list[str]:
    """PROBE_CALLS calls to the edge (round the edge's addresses), one at a time; each call's status."""
    codes: list[str] = []
    channels = {addr: aio.insecure_channel(addr) for addr in edges}
    try:
        for n in range(PROBE_CALLS):
            rid = probe_id(plan, n)
            method = call.multicallable(channels[edges[n % len(edges)]])
            md = tags.metadata(rid, timeout_s)
            try:
                if call.streams_in:
                    request = iter(call.messages(rid))
                else:
                    request = call.request(rid)
                rpc = method(request, timeout=timeout_s, metadata=md)
                if call.streams_out:
                    async for _ in rpc:
                        pass
                else:
                    await rpc
                codes.append("OK")
            except aio.AioRpcError as err:
                codes.append(err.code().name)
    finally:
        for ch in channels.values():
            await ch.close()
    return codes


def drill_calls(text: str) -> float:
    """`drill_server_calls_total{traffic="drill"}` summed over every series of one `/metrics` text."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == CALLS and s.labels.get("traffic") == "drill":
                total += s.value
    return total


async def read_urls(urls: Sequence[str]) -> float:
    """A hop's drill calls, summed over its `/metrics` URLs (OSError/TimeoutError when one does not answer)."""
    from harness.drills.readings.scraper import fetch

    texts = await asyncio.gather(*(fetch(url, timeout_s=READ_TIMEOUT_S) for url in urls))
    return sum(drill_calls(t) for t in texts)


def with_label(selector: str, matcher: str) -> str:
    """`{job="x"}` + `traffic="drill"` → `{job="x",traffic="drill"}`."""
    inner = selector.strip().removeprefix("{").removesuffix("}").strip().rstrip(",")
    return "{" + (f"{inner},{matcher}" if inner else matcher) + "}"


class SelectorRead(NamedTuple):
    """A hop's drill calls as Prometheus holds them now, and what that count is worth."""

    calls: float
    #: the time of the oldest target's last scrape, when every target's last scrape succeeded; else None
    scraped: float | None
    #: how many of the hop's targets failed their last scrape (`up` 0): their counters are stale, so `calls`
    #: lacks them
    down: int


def read_selector(url: str, selector: str) -> SelectorRead:
    """A hop's drill calls as Prometheus holds them now, with the time of the scrape they came from.

    One query for count, time and health, so all come from one snapshot of what Prometheus holds (its storage
    isolates a query from appends under way). Asked one after the other, a scrape that landed between them paired
    the time of that scrape with the count of the one before it: the probe then read as not counted a hop that
    had (a false exit 4). A failed scrape (`up` 0: a timeout, an error) marks the target's series stale, so the
    count drops to nothing while its `up` has a new time: such a read is no count at all (`scraped` None), else
    it read as a hop that counted none after the probe (a false exit 4) or as none before it (a false pass)."""
    from harness.procs.prometheus import api_get

    drill = with_label(selector, 'traffic="drill"')
    query = (f'label_replace(sum({CALLS}{drill}), "read", "calls", "", "") '
             f'or label_replace(min(timestamp(up{selector})), "read", "scraped", "", "") '
             f'or label_replace(count(up{selector} == 0), "read", "down", "", "")')  # fmt: skip
    got = {r["metric"].get("read"): float(r["value"][1]) for r in api_get(url, "query", [("query", query)],
                                                                             READ_TIMEOUT_S)["result"]}  # fmt: skip
    down = int(got.get("down", 0))
    return SelectorRead(got.get("calls", 0.0), None if down else got.get("scraped"), down)


def selector_gates(url: str, selector: str) -> dict:
    """`{selector: Gates}`: the hop's drill gates as Prometheus holds them now, by `service` and `reason` as a
    `/metrics` read gives them (`analysis.landing.Gates.parse`)."""
    from harness.drills.analysis.landing import REJECTED, SKIPPED, SWITCH, Gates
    from harness.procs.prometheus import api_get

    def ask(expr: str) -> list[dict]:
        return api_get(url, "query", [("query", expr)], READ_TIMEOUT_S)["result"]

    g = Gates()
    for r in ask(f"max by (service) ({SWITCH}{selector})"):
        g.switch[r["metric"].get("service", "")] = float(r["value"][1])
    for name, into in ((SKIPPED, g.skipped), (REJECTED, g.rejected)):
        for r in ask(f"sum by (service, reason) ({name}{selector})"):
            into[(r["metric"].get("service", ""), r["metric"].get("reason", ""))] = float(r["value"][1])
    return {selector: g}


async def read_gates(hop: Hop, prometheus: str | None) -> dict:
    from harness.drills.analysis.landing import read_gates as read

    return await read(hop.urls) if hop.urls else await asyncio.to_thread(selector_gates, prometheus, hop.selector)


def scrape_wait_s(url: str) -> float:
    """One scrape interval of the Prometheus at `url` and a second (`readings.scrapes.scrape_wait_s`)."""
    from harness.drills.readings import scrapes

    return scrapes.scrape_wait_s(url, READ_TIMEOUT_S)


@dataclasses.dataclass
class Hop:
    """One hop in chain order and what it counted: by its `/metrics` URLs or its selector."""

    name: str
    urls: tuple[str, ...] = ()
    selector: str = ""
    before: float = 0.0
    after: float = 0.0
    #: read from Prometheus with no scrape after the probe within the bound: its count says nothing yet
    stale: bool = False
    #: read from Prometheus with a target still failing its scrapes before the probe: no count to start from
    no_baseline: bool = False
    #: the target's drill gates (`analysis.landing.Gates`) by URL or selector, before and after the probe
    gates_before: dict = dataclasses.field(default_factory=dict)
    gates_after: dict = dataclasses.field(default_factory=dict)

    @property
    def counted(self) -> float:
        """The calls counted between the reads; a counter that went down was reset (the hop restarted, or a
        switch replaced it), and counts from 0 since, as Prometheus' `increase` takes it."""
        return self.after - self.before if self.after >= self.before else self.after


def hops_to_target(variant: Variant, order: Sequence[str], endpoints: Sequence[tuple[str, str]],
                   selectors: dict[str, str]) -> list[Hop]:  # fmt: skip
    """The hops from the edge to the target, in chain order, each with its readings (a hop with none is left out:
    it cannot be asked)."""
    target = variant.fault.target or order[0]
    names = list(order[: order.index(target) + 1]) if target in order else list(order[:1])
    hops = [Hop(n, tuple(u for s, u in endpoints if s == n), selectors.get(n, "")) for n in names]
    return [hop for hop in hops if hop.urls or hop.selector]


async def check(pf: Preflight, variant: Variant, target: DrillTarget | None = None) -> None:
    """The probe of `variant`'s fault through the running stack the plan names (its edge, its hops' `/metrics` and
    selectors), or through `target`, a stack the runner started; the verdict on `pf`."""
    from harness.core.errors import DrillError

    stack = pf.plan.stack
    if target is not None:
        call, edges, endpoints, selectors = target.edge_call(variant), target.edge(), target.endpoints(), \
            target.selectors()  # fmt: skip
        order = [h.name for h in variant.hops] if stack is None else pf.plan.hop_names
    else:
        if pf.edge_call is None:  # a stack with its own load and no directive option: not resolved yet
            from harness.drills.stack.edge import resolve_edge

            try:
                pf.edge_call = await asyncio.to_thread(resolve_edge, stack.edge)
            except DrillError as exc:
                pf.warn(f"the reach probe was not sent: the edge's method does not resolve ({exc})")
                return
        call, edges, order = pf.edge_call, [stack.edge.address], pf.plan.hop_names
        endpoints = [(h.name, url) for h in stack.hops for url in h.metrics]
        selectors = {h.name: h.selector for h in stack.hops if h.selector}
    await check_reach(pf, variant, edges=edges, call=call, order=order, endpoints=endpoints, selectors=selectors,
                      prometheus=stack.prometheus if stack else None)  # fmt: skip


async def check_reach(pf: Preflight, variant: Variant, *, edges: Sequence[str], call: EdgeCall,
                      order: Sequence[str], endpoints: Sequence[tuple[str, str]], selectors: dict[str, str],
                      prometheus: str | None) -> None:  # fmt: skip
    """Send the probe, read every hop up to the target, give the verdict on `pf` (a fail raises exit 4)."""
    from harness.procs.prometheus import PrometheusError

    plan = pf.plan
    hops = hops_to_target(variant, order, endpoints, selectors)
    where = f"{variant.name}: " if len(plan.variants) > 1 else ""
    if not hops or not edges:
        pf.warn(f"{where}the reach probe was not sent: no hop up to the target has readings of its own")
        return
    timeout_s = min(CALL_TIMEOUT_S, variant.traffic.timeout_s)
    target = variant.fault.target or order[0]
    try:
        waits = [hop for hop in hops if not hop.urls]
        wait_s = await asyncio.to_thread(scrape_wait_s, prometheus) + SETTLE_S if waits else 0.0
        before_by = time.monotonic() + wait_s
        for hop in hops:
            if hop.urls:
                hop.before = await read_urls(hop.urls)
                continue
            while (read := await asyncio.to_thread(read_selector, prometheus, hop.selector)).down:
                if time.monotonic() >= before_by:  # a baseline without a failing target's calls: none at all
                    hop.no_baseline = True
                    break
                await asyncio.sleep(0.5)  # a failed scrape holds no count: the next one will
            hop.before = read.calls
            if hop.name == target:
                hop.gates_before = await read_gates(hop, prometheus)
        codes = await send(edges, call, probe_tags(variant, call), plan.name, timeout_s)
        sent_at = time.time() + SETTLE_S
        if waits:
            pf._progress(f"reach probe: waiting for {prometheus} to scrape {', '.join(h.name for h in waits)} after "
                         f"it (at most {wait_s:g} s: one scrape interval from its config, a second and "
                         f"{SETTLE_S:g} s for the hops to count it)")  # fmt: skip
        deadline = time.monotonic() + wait_s
        for hop in hops:
            if hop.urls:
                hop.after = await read_urls(hop.urls)
                continue
            while True:  # until a scrape after the probe is held, or the bound
                hop.after, scraped, _ = await asyncio.to_thread(read_selector, prometheus, hop.selector)
                if scraped is not None and scraped >= sent_at:
                    break
                if time.monotonic() >= deadline:
                    hop.stale = True
                    break
                await asyncio.sleep(0.5)
        for hop in hops:
            if hop.name == target:
                hop.gates_after = await read_gates(hop, prometheus)
    except (OSError, asyncio.TimeoutError, TimeoutError, PrometheusError, ValueError) as exc:
        pf.fail(f"{where}reach probe: a hop's readings do not answer ({exc or 'timeout'}): the run cannot prove "
                "the drill reaches its target; nothing was sent but the probe", 1)  # fmt: skip
    _verdict(pf, variant, hops, codes, where)


def _verdict(pf: Preflight, variant: Variant, hops: list[Hop], codes: list[str], where: str) -> None:
    n = len(codes)
    answered = ", ".join(f"{codes.count(c)} {c}" for c in dict.fromkeys(codes))
    for i, hop in enumerate(hops):
        if hop.no_baseline:  # what it counted would include what a failing target counted before the probe
            pf.fail(f"{where}reach probe: a target of hop {hop.name} ({hop.selector}) failed its scrapes (`up` 0) "
                    "for a scrape interval before the probe, so what the hop had counted before it is unknown: the "
                    "run cannot prove the drill reaches it; no fault was sent", 1)  # fmt: skip
        if hop.counted >= 1:
            continue
        if hop.stale:
            pf.fail(f"{where}reach probe: Prometheus holds no scrape of hop {hop.name} ({hop.selector}) from the "
                    "scrape interval after the probe in which every target answered (a target not scraped yet, or "
                    "failing its scrapes: its `up` is 0): the run cannot prove the drill reaches it; no fault was "
                    "sent", 1)  # fmt: skip
        proven = f"; hop {hops[i - 1].name} counted it as drill traffic" if i else ""
        cause = PROPAGATION if i or hop.name != pf.plan.hop_names[0] else \
            f"it does not take tenant {variant.fault.tenant} as drill traffic (DRILL_FAULT_TENANTS), or it has a " \
            "drill secret the calls do not carry"  # fmt: skip
        pf.fail(f"{where}the drill does not reach hop {hop.name}: {cause}{proven} ({n} probe calls at ratio 0, "
                f"answered {answered}; {hop.name} counted none as drill traffic); no fault was sent", 4)  # fmt: skip
    counts = ", ".join(f"{hop.name} {hop.counted:g}" for hop in hops)
    target = variant.fault.target or pf.plan.hop_names[0]
    reached = hops[-1].name
    if reached == target and (cause := refusal(hops[-1], variant)):
        pf.fail(f"{where}the drill reaches hop {target}, and it would not inject: {cause} ({n} probe calls at ratio "
                "0); no fault was sent", 4)  # fmt: skip
    last = f"the target {target}" if reached == target else f"{reached} (the last hop up to {target} with readings)"
    pf.ok(f"{where}the drill reaches {last}: {n} probe calls at ratio 0 ({pf.plan.name}-probe-N, answered "
          f"{answered}) counted as drill traffic by {counts}")  # fmt: skip


def refusal(hop: Hop, variant: Variant) -> str | None:
    """Why the target's gates refused the probe's directive (its name, its switch, its allowlist, a token, the
    directive itself: `analysis.landing`'s causes of a fault that did not land), or None when none did."""
    from harness.drills.analysis import landing

    during = landing.gates_during(hop.gates_before, hop.gates_after)
    return landing._refusal(during, variant.fault, hop.name)
