"""Did the drill's fault land as planned? One judgement per trial, from every witness the run has.

The witnesses, strongest first:
- the services' audit lines (`hits.observed` with the local topology or `stack.audit`): the ids every hop hit;
- the `x-drill-fault` marker on the answers the load got (`hits.marked`, the runner's own load): the ids the
  edge hit. The hop that injects sets it and no hop relays it, and a call that outlives its deadline never
  gets it, so it speaks only for a fault at the edge that answers in time;
- the hops' own `drill_fault_hits_total` in the trial's series: how many faults were injected, without ids;
- the target hop's gates (`drill_fault_switch`, `drill_fault_skipped_total{reason}`,
  `drill_fault_rejected_total{reason}` by `service` label, read from its /metrics before and after the trial
  when the runner did not start it): which gate refused the drill's calls, and under which name.

What may differ from the prediction without anything being wrong: a target behind the edge (no marker), calls
shed or expired before they reached the target, skips over DRILL_FAULT_MAX_ACTIVE, replicas left out by
`fault.instances`, attempt-scope retries that draw again. Those give a note. What did not land as planned
(exit 4, `FaultNotLanded`): no predicted hit landed by any witness (unless `fault.instances` leaves replicas
out on purpose); ids hit that the plan's seed does not predict (the service's seed is not the plan's); or the
target's gates refused drill calls during the trial (its name, its switch, its tenant allowlist, a token, the
directive itself).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence

from prometheus_client.parser import text_string_to_metric_families

from harness.core import metrics as m
from harness.core.faults import RejectReason
from harness.core.gate import SkipReason
from harness.drills.plan.outputs import SeriesKey
from harness.drills.plan.sections import Fault
from harness.drills.readings.scraper import fetch

SWITCH = m.sample_name(m.FAULT_SWITCH)
SKIPPED = m.sample_name(m.FAULT_SKIPPED, "_total")
REJECTED = m.sample_name(m.FAULT_REJECTED, "_total")
HITS = m.sample_name(m.FAULT_HITS, "_total")

#: Gates that refuse a drill's calls only when the target is set up wrong (never by the plan's own design).
REFUSALS = (SkipReason.TARGET.value, SkipReason.SWITCH.value, SkipReason.TENANT.value, SkipReason.TOKEN.value)


@dataclasses.dataclass
class Gates:
    """One /metrics read of a hop's drill series, by `service` label: switch gauges and counters."""

    switch: dict[str, float] = dataclasses.field(default_factory=dict)
    skipped: dict[tuple[str, str], float] = dataclasses.field(default_factory=dict)
    rejected: dict[tuple[str, str], float] = dataclasses.field(default_factory=dict)
    hits: dict[str, float] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Gates:
        g = cls()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                svc = s.labels.get("service", "")
                if s.name == SWITCH:
                    g.switch[svc] = s.value
                elif s.name == SKIPPED:
                    key = (svc, s.labels.get("reason", ""))
                    g.skipped[key] = g.skipped.get(key, 0.0) + s.value
                elif s.name == REJECTED:
                    key = (svc, s.labels.get("reason", ""))
                    g.rejected[key] = g.rejected.get(key, 0.0) + s.value
                elif s.name == HITS:
                    g.hits[svc] = g.hits.get(svc, 0.0) + s.value
        return g

    def since(self, before: Gates | None) -> Gates:
        """What moved since `before` (counters; a counter that went down restarted from 0); gauges as now."""
        if before is None:
            return self

        def moved(now: Mapping, then: Mapping) -> dict:
            return {k: v - then.get(k, 0.0) if v >= then.get(k, 0.0) else v for k, v in now.items()}

        return Gates(dict(self.switch), moved(self.skipped, before.skipped), moved(self.rejected, before.rejected),
                     moved(self.hits, before.hits))  # fmt: skip

    def moved(self) -> bool:
        return any(v > 0 for v in (*self.skipped.values(), *self.rejected.values(), *self.hits.values()))


async def read_gates(urls: Sequence[str]) -> dict[str, Gates | None]:
    """Each URL's drill gates now (None: it did not answer)."""
    texts = await asyncio.gather(*(fetch(u) for u in urls), return_exceptions=True)
    return {u: None if isinstance(t, BaseException) else Gates.parse(t) for u, t in zip(urls, texts, strict=True)}


def gates_during(before: Mapping[str, Gates | None], after: Mapping[str, Gates | None]) -> dict[str, Gates | None]:
    return {u: None if g is None else g.since(before.get(u)) for u, g in after.items()}


def injected(values: Mapping[SeriesKey, Sequence[float | None]]) -> float | None:
    """Faults the hops counted over a trial (`drill_fault_hits_total`, every hop and name), None: no counter."""
    keys = [k for k in values if k.kind == "hits"]
    return sum(v or 0.0 for k in keys for v in values[k]) if keys else None


@dataclasses.dataclass
class Witnesses:
    """What one trial can tell about where its fault landed."""

    expected: set[str]
    #: ids the services' audit lines report (None: no audit)
    audited: set[str] | None = None
    #: ids answered with the `x-drill-fault` marker (None: the load cannot tell)
    marked: set[str] | None = None
    #: faults the hops counted (None: no counter read)
    injected: float | None = None
    #: the target hop's gates during the trial, per /metrics URL (None: not read)
    gates: dict[str, Gates | None] | None = None


def judge(w: Witnesses, fault: Fault, *, seed: int, hops: Sequence[str]) -> tuple[bool | None, str | None]:
    """(as planned?, one line saying what differs and its likely cause) — (None, None): nothing predicted."""
    n = len(w.expected)
    if n == 0:
        return None, None
    target = fault.target or hops[0]
    at_edge = target == hops[0]
    if w.audited is not None:
        verb, landed = "audited", w.audited
    elif w.marked is not None and at_edge:
        verb, landed = "marked", w.marked
    else:
        verb, landed = "landed", None
    seen = (w.audited or set()) | (w.marked or set())
    count = len(landed & w.expected) if landed is not None else 0
    head = f"{target}: {count} of {n} predicted hits {verb}"
    refused = _refusal(w.gates, fault, target) if w.gates else None
    if fault.scope == "request" and seen - w.expected:
        extra = len(seen - w.expected)
        return False, (f"{head} and {extra} the seed does not predict — the service's seed is not the plan's: "
                       f"set DRILL_FAULT_SEED={seed}")  # fmt: skip
    if refused:
        return False, f"{head} — {refused}"
    if not seen and not (w.injected or 0) > 0.5:
        cause = _why_none(w.gates, fault, target, at_edge)
        if fault.instances is not None and fault.instances < 100 and cause is None:
            return True, f"{head} — x-fault-instances {fault.instances} may leave every replica out"
        return False, f"{head} — {cause or _generic(fault, target, at_edge)}"
    if verb == "marked" and (w.injected or 0) >= n:
        return True, None  # the service counted them all: answers that outlived their deadline carry no marker
    if landed is not None and count < n:
        return True, f"{head} — {_why_short(w, verb, at_edge)}"
    return True, None


def _named(gates: Mapping[str, Gates | None], reason: str) -> list[tuple[str, str, float]]:
    """(URL, service label, count) of each skip for `reason` that moved."""
    return [(u, svc, v) for u, g in gates.items() if g for (svc, r), v in g.skipped.items() if r == reason and v > 0]


def _refusal(gates: Mapping[str, Gates | None], fault: Fault, target: str) -> str | None:
    """The target's gates refused drill calls in the trial: the first refusal, as the cause."""
    for url, svc, _ in _named(gates, SkipReason.TARGET.value):
        # a process that also serves `target` passes other services' calls on: only a URL without it is misnamed
        if svc != target and target not in (gates[url].switch if gates[url] else {}):
            return (f"the service at {url} calls itself {svc!r}, not {target!r} "
                    f'(drill_fault_skipped_total{{reason="target"}}): set DRILL_SERVICE={target}')  # fmt: skip
    for url, svc, _ in _named(gates, SkipReason.SWITCH.value):
        return (f"injection is off in {svc!r} at {url} (drill_fault_switch 0: DRILL_FAULT_ENABLED=1 is not set, "
                "or an emergency stop turned it off)")  # fmt: skip
    for url, svc, _ in _named(gates, SkipReason.TENANT.value):
        return (f"{svc!r} at {url} does not allowlist {fault.tenant} "
                f'(drill_fault_skipped_total{{reason="tenant"}}): add it to DRILL_FAULT_TENANTS')  # fmt: skip
    for url, svc, _ in _named(gates, SkipReason.TOKEN.value):
        return (f"{svc!r} at {url} has a drill secret (DRILL_FAULT_SECRET) and the calls carry no valid "
                f'x-drill-token (drill_fault_skipped_total{{reason="token"}})')  # fmt: skip
    for url, g in gates.items():
        for (svc, reason), v in (g.rejected.items() if g else ()):
            if v > 0:
                over = reason == RejectReason.OVER_MAX.value
                why = ": its DRILL_FAULT_MAX_DELAY_MS is below the delay" if over else ""
                return (f"{svc!r} at {url} refuses the directive {fault.directive!r} "
                        f'(drill_fault_rejected_total{{reason="{reason}"}}){why}')  # fmt: skip
    return None


def _why_none(gates: Mapping[str, Gates | None] | None, fault: Fault, target: str, at_edge: bool) -> str | None:
    """Why nothing landed, as far as the target's /metrics tell (None: they tell nothing)."""
    if not gates:
        return None
    read = {u: g for u, g in gates.items() if g is not None}
    if not read:
        return None
    bare = [u for u, g in read.items() if not g.switch]
    if len(bare) == len(read):
        return (f"{bare[0]} exports no drill_fault_* series: the interceptors are not installed, or not switched on "
                "(server_interceptors() adds none unless DRILL_FAULT_ENABLED=1)")  # fmt: skip
    off = [(u, s) for u, g in read.items() for s, v in g.switch.items() if v == 0]
    if off:
        return (f"injection is off in {off[0][1]!r} at {off[0][0]} (drill_fault_switch 0: DRILL_FAULT_ENABLED=1 "
                "is not set, or an emergency stop turned it off)")  # fmt: skip
    if _named(read, SkipReason.MAX_ACTIVE.value):
        return 'every one passed untouched over DRILL_FAULT_MAX_ACTIVE (drill_fault_skipped_total{reason="max_active"})'
    if _named(read, SkipReason.INSTANCE.value):
        return None  # fault.instances left this replica out: the plan's own doing
    if not any(g.moved() for g in read.values()):
        if at_edge:
            return f"no drill call reached the service at {next(iter(read))} (its drill_fault_* counters did not move)"
        return ("no drill directive reached it (its drill_fault_* counters did not move): the hops before it do not "
                "forward the drill keys, or the calls failed before it")  # fmt: skip
    return None


def _generic(fault: Fault, target: str, at_edge: bool) -> str:
    name = f"does not call itself {target!r} (set DRILL_SERVICE={target}), " if fault.target else ""
    text = (f"the service {name}is not switched on (DRILL_FAULT_ENABLED=1) or does not allowlist {fault.tenant} "
            "(DRILL_FAULT_TENANTS)")  # fmt: skip
    return text if at_edge else text + ", or the hops before it do not forward the drill keys"


def _why_short(w: Witnesses, verb: str, at_edge: bool) -> str:
    """Some predicted hits landed: what the counters say about the rest (none of it a failure)."""
    skipped = sum(v for _, _, v in _named(w.gates or {}, SkipReason.MAX_ACTIVE.value))
    if skipped:
        return f"{skipped:.0f} passed untouched over DRILL_FAULT_MAX_ACTIVE"
    if verb == "audited" and w.marked and not w.audited:
        return f"{len(w.marked)} marked by the service: does stack.audit read its logs?"
    if verb == "marked":
        return "the rest were shed or expired before the service answered"
    return "the rest were shed or expired" + ("" if at_edge else ", or failed before they reached it")


def _grouped(configs: Mapping[str, Mapping]) -> list[tuple[bool, str, list[str]]]:
    """(did not land as planned?, note, the trials that say it) for each distinct trial note."""
    where: dict[tuple[bool, str], list[str]] = {}
    for name, c in configs.items():
        for t in c.get("trials") or [c]:
            h = t.get("hits") or {}
            if h.get("note"):
                where.setdefault((h.get("as_planned") is False, h["note"]), []).append(f"{name} #{t.get('trial', 1)}")
    return [(failed, note, trials) for (failed, note), trials in where.items()]


def _line(failed: bool, note: str, trials: list[str]) -> str:
    shown = ", ".join(trials) if len(trials) <= 3 else f"{', '.join(trials[:3])} and {len(trials) - 3} more"
    return f"{'the fault did not land as planned' if failed else 'hits'} ({shown}): {note}"


def summary(configs: Mapping[str, Mapping]) -> list[str]:
    """results.json's notes about the hits: one line per distinct trial note, naming its trials."""
    return [_line(*g) for g in _grouped(configs)]


def problem(results: Mapping) -> str | None:
    """The one line of a run whose fault did not land as planned (exit 4); None: every judged trial landed."""
    bad = [_line(*g) for g in _grouped(results.get("configs") or {}) if g[0]]
    if not bad:
        return None
    return bad[0] + (f" (and {len(bad) - 1} other notes in results.json)" if len(bad) > 1 else "")
