"""`drill run PLAN --dry-run`: what a run would do, checked against the stack, without doing any of it.

It takes the run's preflight (`trials.preflight`: the same checks, in the same order, the same one-line
errors and exit codes; a bad input is refused before anything is printed) and prints the timeline of
every trial, the planned load, the expected hits of each trial (the ids the aio load
will tag in it, `load.schedule.tagged_ids`: each trial of each configuration draws its
own, `harness.core.ids`; through the hit function `harness.core.faults.is_hit`: what
`drill hits` says for them, and what a real run with the same seed reports as
`hits.expected`), the guards, each check's verdict as it is decided
(a wait for the edge says what it waits for at once) and how long the run will take. It runs no
switch, emergency-stop or audit command and sends no drill call but the reach probe of a running stack
(`trials.reach`: a few calls tagged as the load's drill calls at ratio 0, which every hop counts as drill
traffic and none faults, the last check): health checks and reflection are probes the interceptors pass
untouched, outside every drill series. The **local topology** is
started by each trial of a run with that trial's configuration, so a dry run starts none of it; the
one process it may start is a Prometheus under `--prometheus auto`, for a moment, to ask each guard
that asks the run's Prometheus. What it writes to prove `--out` writable, it removes.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Callable

from harness.core.faults import is_hit
from harness.drills.load.schedule import calls_of, ids_digest, planned_rps, tagged_ids, users
from harness.drills.plan.guards import PrometheusGuard, WallClockGuard
from harness.drills.plan.model import Plan, Variant
from harness.drills.trials import link_fault
from harness.drills.trials.guard import describe, name_of, prometheus_guards
from harness.drills.trials.preflight import Preflight, prometheus_binary

#: Seconds a local trial takes beyond its phases: the chain's start and stop, the load's start on the next
#: whole second, the last calls and the final reads. The saved 9-trial retry-storm runs took 4.1–5.5 s per
#: trial more than their phases (`duration_s` of benchmarks/results/retry-storm-3trials*.results.json).
LOCAL_TRIAL_OVERHEAD_S = 5.0


def predicted_hits(plan: Plan, variant: Variant, trial: int = 1) -> dict | None:
    """The ids trial `trial` of `variant` tags and those it hits, as a run reports them (`hits.expected`,
    `hits.expected_digest`); None for a load whose ids only its own processes know (Locust, a command).
    `spans`: each drill user's tagged calls, one run of call numbers (its calls in the fault phase), the
    same in every trial (only the ids' mix, and so which of them are hit, differs)."""
    if plan.stack is not None and plan.stack.load is not None or variant.traffic.driver != "aio":
        return None
    f, ph = variant.fault, plan.phases
    tagged = tagged_ids(plan.name, plan.seed, variant.name, trial, variant.traffic, f, ph)
    hit = [r for r in tagged if is_hit(plan.seed, r, f.directive, f.ratio)]
    spans = {}
    for user, kind, rate, offset in users(variant.traffic) if tagged else ():
        ns = [n for n in range(calls_of(ph, rate)) if ph.at(offset + n / rate) == "fault"]
        if kind == "drill" and ns:
            spans[user] = (ns[0], ns[-1])
    return {"tagged": len(tagged), "expected": len(hit), "expected_digest": ids_digest(hit), "spans": spans}


def trial_order(plan: Plan) -> list[tuple[Variant, int]]:
    """Every trial in the order a run takes them: interleaved, A B C A B C …"""
    return [(v, k) for k in range(1, plan.trials + 1) for v in plan.variants]


def _mmss(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m}:{s:02d}"


def _duration(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s" if m else f"{s} s"


# --- the printout -----------------------------------------------------------------------------------
def head(plan: Plan, *, command: str | None = None, asks_prometheus: bool = False) -> str:
    """The dry run's text before its checks: plan, load, timeline of every trial, expected hits, guards."""
    ph, tr, f = plan.phases, plan.traffic, plan.fault
    command = command or f"drill run {plan.name}"
    but = [w for w, on in (("a Prometheus, for the guards", asks_prometheus),
                           ("the stack's drill proxy, for the checks", plan.stack is not None and plan.stack.proxy),
                           ("the stack's processes, for the checks", plan.stack is not None and plan.stack.processes))
           if on]  # fmt: skip
    started = f"nothing was started (but {' and '.join(but)})" if but else "nothing was started"
    probe = plan.stack is not None and any(v.fault.directive for v in plan.variants)
    sent = " or sent, but the reach probe (calls at ratio 0: no hop faults them)" if probe else " or sent"
    lines = [f"{command} --dry-run: {started}, switched{sent}", ""]
    source = os.path.relpath(plan.source) if plan.source and not os.path.relpath(plan.source).startswith("..") else (
        plan.source or "built in")  # fmt: skip
    lines.append(f"plan      {plan.name} ({source}), seed {plan.seed}, {plan.trials} trial"
                 f"{'s' if plan.trials > 1 else ''} of each of {len(plan.variants)} configuration"
                 f"{'s' if len(plan.variants) > 1 else ''}")  # fmt: skip
    if plan.stack is None:
        chain = " → ".join(f"{h.name}×{h.replicas}" for h in plan.hops)
        lines.append(f"target    the local topology {chain}, started by each trial with its configuration")
    else:
        lines.append(f"target    the running stack at {plan.stack.edge.address} ({plan.stack.edge.method}); hops "
                     + " → ".join(h.name for h in plan.stack.hops))  # fmt: skip
    target = f", target {f.target}" if f.target else " (the first hop)"
    if f.link is not None:
        lines.append(f"fault     {link_fault.describe(plan)}")
    else:
        lines.append(f"fault     {f.directive or '(none: a probe)'}, ratio {f.ratio} %{target}, tenant {f.tenant}, "
                     f"scope {f.scope}" + (f", first {f.attempts} attempts" if f.attempts else ""))  # fmt: skip
    rps = planned_rps(tr)
    load = "a command per trial: " + plan.stack.load.command if plan.stack and plan.stack.load else tr.driver
    lines.append(f"load      {load}: organic {tr.organic_users} × {tr.organic_rate:g}/s = {rps['organic']:g} req/s, "
                 f"drill {tr.drill_users} × {tr.drill_rate:g}/s = {rps['drill']:g} req/s, timeout {tr.timeout_s:g} s, "
                 f"{round(ph.total * (rps['organic'] + rps['drill']))} calls a trial")  # fmt: skip
    slo = plan.slo
    lines.append(f"SLO       {slo.traffic} error rate ≤ {slo.max_error_rate:.1%} over {slo.window_s} s"
                 + (f", p99 ≤ {slo.max_p99_s:g} s" if slo.max_p99_s else "") + f", held {slo.hold_s} s")  # fmt: skip
    lines.append(f"timeline  seconds from a trial's first call: warmup 0–{ph.warmup:g} · fault {ph.warmup:g}–"
                 f"{ph.warmup + ph.fault:g} · recovery {ph.warmup + ph.fault:g}–{ph.total:g}")  # fmt: skip
    hits = {(v.name, k): predicted_hits(plan, v, k) for v, k in trial_order(plan)}
    lines += ["", _trials_table(plan, hits), ""]
    lines += _hits_lines(plan, hits)
    lines += [""] + _guard_lines(plan)
    return "\n".join(lines)


def _trials_table(plan: Plan, predicted: dict[tuple[str, int], dict | None]) -> str:
    per = plan.phases.total + (LOCAL_TRIAL_OVERHEAD_S if plan.stack is None else 0.0)
    rows = [("#", "configuration", "trial", "starts", "fault on–off", "tagged", "expected hits")]
    for i, (v, k) in enumerate(trial_order(plan)):
        at = i * per
        hits = predicted[v.name, k]
        fault = f"+{_mmss(at + plan.phases.warmup)}–{_mmss(at + plan.phases.warmup + plan.phases.fault)}"
        rows.append((str(i + 1), v.name, str(k), f"+{_mmss(at)}", fault,
                     "?" if hits is None else str(hits["tagged"]), "?" if hits is None else str(hits["expected"])))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    if plan.stack is None:
        head = f"(start times from the phases and ~{LOCAL_TRIAL_OVERHEAD_S:g} s per trial to start and stop the chain)"
    else:
        head = "(start times from the phases alone: each trial's switch and ready checks add to them)"
    head = f"trials, in the order a run takes them {head}"
    table = ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join([head, *table])


def _hits_lines(plan: Plan, predicted: dict[tuple[str, int], dict | None]) -> list[str]:
    """Per configuration: trial 1's expected hits, digest and the ids it tags; with more trials, each trial's
    count on a line below (each trial draws its own ids: harness.core.ids)."""
    whose = "; the digest is trial 1's, each trial draws its own ids" if plan.trials > 1 else ""
    out = ["expected hits of each trial (results.json hits.expected and hits.expected_digest of a run with seed "
           f"{plan.seed}{whose}; a guard's trip ends a trial's tagging early):"]  # fmt: skip
    for v in plan.variants:
        hits = predicted[v.name, 1]
        if hits is None:
            out.append(f"  {v.name}: known after each trial (the load's own processes log the ids they tag)")
            continue
        if not hits["tagged"]:
            out.append(f"  {v.name}: none (no directive, or no drill user in the fault phase)")
            continue
        spans = ", ".join(f"{u} {lo}–{hi}" for u, (lo, hi) in hits["spans"].items())
        out.append(f"  {v.name}: {hits['expected']} of {hits['tagged']} tagged ids (digest {hits['expected_digest']}):"
                   f" ids {plan.name}-{plan.seed}-USER-N-MIX for {spans}")  # fmt: skip
        if plan.trials > 1:
            counts = ", ".join(str(predicted[v.name, k]["expected"]) for k in range(1, plan.trials + 1))
            out.append(f"    trials 1–{plan.trials}: {counts} of {hits['tagged']} hit")
    first = next((v for v in plan.variants if (predicted[v.name, 1] or {}).get("spans")), None)
    if first is not None:
        user, (lo, hi) = next(iter(predicted[first.name, 1]["spans"].items()))
        f = first.fault
        ids = (f"python3 -c 'from harness.core.ids import request_id as r; [print(r(\"{plan.name}\", {plan.seed}, "
               f"\"{first.name}\", 1, \"{user}\", n)) for n in range({lo}, {hi + 1})]'")  # fmt: skip
        out.append(f"  the same with drill hits ({first.name}, trial 1, {user}): {ids} | drill hits --seed {plan.seed} "
                   f"--directive '{f.directive}' --ratio {f.ratio} --summary")  # fmt: skip
    return out


def _guard_lines(plan: Plan) -> list[str]:
    if plan.guard is None:
        return ["guards    none (nothing stops a trial while it runs; `guard:` in the plan adds stop conditions)"]
    out = ["guards    checked every second of every trial; the first that holds stops the fault at once:"]
    for g in plan.guard.stop_when:
        when = ""
        if isinstance(g, WallClockGuard):
            ph = plan.phases
            if g.after_s >= ph.total + 1:
                when = " (after every trial's end: it never trips on schedule)"
            elif g.after_s < ph.warmup + ph.fault:
                cut = max(0.0, ph.warmup + ph.fault - g.after_s)
                when = f" (trips in every trial, {g.after_s:g} s in: {cut:g} s of fault cut)"
        elif isinstance(g, PrometheusGuard):
            when = "" if g.unreachable_s is None else f" (or when unanswered for {g.unreachable_s} s)"
        out.append(f"  {name_of(g)}: {describe(g, plan.slo)}{when}")
    skip = plan.guard.after_trip == "skip"
    out.append("  after a trip: " + ("the configuration's later trials are skipped" if skip else
                                      "the configuration's later trials still run"))  # fmt: skip
    reach = ("SIGUSR1 to the trial's hops" if plan.stack is None else
             f"the stack's emergency stop: {plan.stack.emergency_stop}" if plan.stack.emergency_stop else
             "no emergency stop command for this stack (stack.emergency_stop): only the load's directive stops")
    out.append(f"  on a trip: the load stops tagging and cancels its tagged calls in flight; {reach}")
    return out


def _not_run(plan: Plan, prometheus: str, grafana: str | None) -> list[str]:
    """What the dry run names but does not run or contact."""
    out = []
    if plan.stack is not None:
        for c in plan.stack.configs:
            if c.switch:
                out.append(f"switch to {c.name} (not run): {c.switch}")
        if plan.stack.load is not None:
            out.append(f"load command (not run): {plan.stack.load.command}")
        if plan.stack.audit is not None and plan.stack.audit.command:
            out.append(f"audit command (not run): {plan.stack.audit.command}")
    if prometheus == "auto":
        found = shutil.which(prometheus_binary())
        none = "no prometheus on PATH: a run goes on without the cross-check"
        out.append("--prometheus auto: " + (f"{found}, started by the run to watch it" if found else none))
    if grafana:
        out.append(f"--grafana {grafana}: annotations posted during the run (not contacted)")
    return out


def _duration_line(plan: Plan, chain_s: float | None = None) -> str:
    """`chain_s`: how long the stack's processes took to start in this dry run (a chain the runner starts)."""
    n = len(trial_order(plan))
    phases = n * plan.phases.total
    if chain_s is not None and not any(c.switch for c in plan.stack.configs):
        per = plan.phases.total + chain_s + LOCAL_TRIAL_OVERHEAD_S
        return (f"duration  about {_duration(n * per)}: {n} trial{'s' if n > 1 else ''} × ({plan.phases.total:g} s of "
                f"phases + {chain_s:.0f} s to start the chain, as it took here, + ~{LOCAL_TRIAL_OVERHEAD_S:g} s to "
                "start the load, stop and read)")  # fmt: skip
    if plan.stack is None:
        return (f"duration  about {_duration(phases + n * LOCAL_TRIAL_OVERHEAD_S)}: {n} trial{'s' if n > 1 else ''} × "
                f"({plan.phases.total:g} s of phases + ~{LOCAL_TRIAL_OVERHEAD_S:g} s to start and stop the chain)")
    slowest = max(c.switch_timeout_s for c in plan.stack.configs if c.switch) if any(
        c.switch for c in plan.stack.configs) else 0.0  # fmt: skip
    extra = f", each switch command up to {slowest:g} s" if slowest else ""
    return (f"duration  at least {_duration(phases)}: {n} trial{'s' if n > 1 else ''} × {plan.phases.total:g} s of "
            f"phases, plus each trial's readiness checks{extra} and the reads after it")  # fmt: skip


def dry_run(plan: Plan, preflight: Preflight, *, prometheus: str, grafana: str | None,
            command: str | None = None, say: Callable[[str], None] = print) -> None:
    """Print what a run would do, then its preflight's checks as each is decided (the local ones already
    passed: a bad input is refused before anything is printed), what it does not run, and the duration.
    A failing check raises what the run would raise, after its line."""
    asks = prometheus == "auto" and any(url == "auto" for _, url in prometheus_guards(plan, "auto"))
    say(head(plan, command=command, asks_prometheus=asks))
    say("")
    say("checks")
    for v in preflight.verdicts:
        say(preflight.format(v))
    preflight.say = say
    run_url = prometheus if prometheus not in ("off", "auto", "") else None
    if asks:
        say("        --prometheus auto: starting a Prometheus for a moment to ask each guard (stopped after)")
        from harness.procs.prometheus import LocalPrometheus

        with LocalPrometheus() as prom:  # a temporary TSDB, removed on stop
            preflight.sources(prom.url)
    else:
        preflight.sources(run_url)
    chain_s = asyncio.run(_stack(preflight)) if plan.stack is not None else None
    for c in _not_run(plan, prometheus, grafana):
        say(f"  --  {c}")
    say("")
    say(_duration_line(plan, chain_s))


async def _stack(preflight: Preflight) -> float | None:
    """The stack's checks; how long its processes took to start, when the plan has them (None otherwise)."""
    plan = preflight.plan
    if plan.stack.proxy is None and not plan.stack.processes:
        await preflight.wait_edge()
        await preflight.stack()
        return None
    # the edge is a proxy or a chain of processes a run starts for each trial: started (the chain with the first
    # configuration) for these checks and stopped after (no call carries a directive in a dry run), so they read
    # what a trial would: its /metrics, the services behind it
    from harness.core.errors import RunFailed
    from harness.drills.stack.targets import target_for

    say = lambda text: preflight.say(f"        {text} (for the checks, stopped after)")  # noqa: E731
    target = target_for(plan, say)
    with tempfile.TemporaryDirectory(prefix="drill-dry-stack-") as tmp:
        try:
            try:
                started = time.monotonic()
                if plan.stack.processes:
                    await asyncio.to_thread(target.chain.start, plan.variants[0].name, 1, pathlib.Path(tmp), say)
                chain_s = time.monotonic() - started if plan.stack.processes else None
                if plan.stack.proxy is not None:
                    await asyncio.to_thread(target.start_proxy, pathlib.Path(tmp))
            except RunFailed as exc:  # a process or the proxy that did not start: its one line
                preflight.fail(str(exc), 1)
            await preflight.wait_edge()
            await preflight.stack()
        finally:
            await target.down()
    return chain_s
