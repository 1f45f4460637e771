"""`drill run PLAN --dry-run`: what a run would do, checked against the stack, without doing any of it.

It loads the plan, the `--fail-on` conditions and the outputs' directory exactly as a
run does (the same one-line errors, the same exit codes), then prints the timeline of
every trial, the planned load, the expected hits of each configuration's trials (the
ids the aio load will tag, `load.schedule.tagged_ids`, through the hit function
`harness.core.faults.is_hit`: what `drill hits` says for them, and what a real run
with the same seed reports as `hits.expected`), the guards and how long the run will
take. Against a running **stack** it checks what a trial needs from it: the edge
answers its health check and its method and request resolve (server reflection, a
descriptor set or a .proto), each hop's `/metrics` answers or its selector names a
target the stack's Prometheus scrapes, and a `prometheus` guard's expression parses
and is quiet. It runs no switch, emergency-stop or audit command and sends no drill
call: health checks and reflection are probes the interceptors pass untouched, outside
every drill series. The **local topology** is started by each trial of a run with that
trial's configuration, so a dry run starts nothing (no process, no port) and writes
nothing: everything those processes take is in the plan it checked.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil

from harness.core.errors import BadInput, GuardTripped, RunFailed
from harness.core.faults import is_hit
from harness.drills.load.schedule import calls_of, ids_digest, planned_rps, request_id, tagged_ids, users
from harness.drills.plan.guards import PrometheusGuard, WallClockGuard
from harness.drills.plan.model import Plan, Variant
from harness.drills.trials.guard import describe, name_of, prometheus_guards

#: Seconds a local trial takes beyond its phases: the chain's start and stop, the load's start on the next
#: whole second, the last calls and the final reads. The saved 9-trial retry-storm runs took 4.1–5.5 s per
#: trial more than their phases (`duration_s` of benchmarks/results/retry-storm-3trials*.results.json).
LOCAL_TRIAL_OVERHEAD_S = 5.0


def predicted_hits(plan: Plan, variant: Variant) -> dict | None:
    """The ids a trial of `variant` tags and those it hits, as a run reports them (`hits.expected`,
    `hits.expected_digest`); None for a load whose ids only its own processes know (Locust, a command)."""
    if plan.stack is not None and plan.stack.load is not None or variant.traffic.driver != "aio":
        return None
    f = variant.fault
    tagged = tagged_ids(plan.name, plan.seed, variant.traffic, f, plan.phases)
    hit = [r for r in tagged if is_hit(plan.seed, r, f.directive, f.ratio)]
    spans, known = {}, set(tagged)
    for user, kind, rate, _ in users(variant.traffic):
        ns = [n for n in range(calls_of(plan.phases, rate)) if request_id(plan.name, plan.seed, user, n) in known]
        if kind == "drill" and ns:  # a user's tagged calls are one run of n: its calls in the fault phase
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


# --- checks against a running stack ---------------------------------------------------------------
async def check_stack(plan: Plan) -> list[str]:
    """What a trial needs from a running stack, asked once; raises what a run would (exit 1 or 2)."""
    from harness.drills.readings.scraper import fetch, reduce_text
    from harness.drills.stack.edge import resolve_edge
    from harness.drills.stack.targets import wait_ready

    stack = plan.stack
    said = []
    config = stack.configs[0]  # its readiness probe, as the first trial asks it (after a switch a dry run skips)
    await wait_ready(stack.edge.address, config)
    said.append(f"edge {stack.edge.address}: passes its gRPC health check {config.ready.checks} times in a row")
    if stack.load is None:  # the runner's own load types the request; a command's load does its own
        call = await asyncio.to_thread(resolve_edge, stack.edge)
        source = ("descriptor set" if stack.edge.descriptor_set else ".proto" if stack.edge.proto
                  else "server reflection")  # fmt: skip
        said.append(f"edge method {call.describe()} and its request resolve by {source}")
    for hop in stack.hops:
        for url in hop.metrics:
            try:
                text = await fetch(url, timeout_s=5.0)
            except (OSError, asyncio.TimeoutError, TimeoutError) as exc:
                raise RunFailed(f"hop {hop.name}: /metrics at {url} does not answer ({exc or 'timeout'})") from None
            switch = _switch(text)
            snap = reduce_text(text, config=None, service=hop.name, edge=False)
            said.append(f"hop {hop.name}: {url} answers ({len(snap)} drill series{switch})")
        if hop.selector:
            said.append(f"hop {hop.name}: " + await asyncio.to_thread(_selector, stack.prometheus, hop.selector))
    if stack.load is not None and stack.load.selector:
        from harness.procs.prometheus import api_get

        await asyncio.to_thread(api_get, stack.prometheus, "query", [("query", "vector(1)")], 10.0)
        said.append(f"load read from {stack.prometheus} by {stack.load.selector} after each trial")
    return said


def _switch(text: str) -> str:
    """`, injection on|OFF` from a hop's `drill_fault_switch` (empty when it exports none)."""
    values = [line.rsplit(" ", 1)[-1] for line in text.splitlines() if line.startswith("drill_fault_switch")]
    if not values:
        return ""
    on = any(v.strip() not in ("0", "0.0") for v in values)
    return ", injection on" if on else ", injection OFF (its switch is off or its emergency stop tripped)"


def _selector(url: str, selector: str) -> str:
    """How many targets a hop's selector names in the stack's Prometheus (`up{…}`); none is a failed run."""
    from harness.procs.prometheus import api_get

    result = api_get(url, "query", [("query", f"up{selector}")], 10.0)["result"]
    up = sum(1 for r in result if r["value"][1] == "1")
    if not result:
        raise RunFailed(f"selector {selector} names no target {url} scrapes (up{selector} is empty)")
    return f"{selector}: {len(result)} target{'s' if len(result) > 1 else ''} in {url}, {up} up"


def check_prometheus_guards(plan: Plan, run_url: str | None) -> list[str]:
    """Ask each `prometheus` guard once: a bad expression is bad input, one that already returns series would
    trip in a run's first second (exit 5, as the run would end)."""
    from harness.procs.prometheus import PrometheusError, api_get

    said = []
    for g, url in prometheus_guards(plan, run_url):
        if not url.startswith(("http://", "https://")):
            said.append(f"guard {name_of(g)}: asked of the Prometheus the run starts (--prometheus auto)")
            continue
        try:
            result = api_get(url, "query", [("query", g.expr)], 10.0)["result"]
        except PrometheusError as exc:
            if "bad_data" in str(exc):
                raise BadInput(f"guard {name_of(g)!r}: {url} refuses the expression: {exc}") from None
            raise
        if result:
            raise GuardTripped(f"guard {name_of(g)!r} would trip in the first second: {g.expr!r} already returns "
                               f"{len(result)} series at {url}")  # fmt: skip
        said.append(f"guard {name_of(g)}: {url} answers {g.expr!r} with nothing (quiet now)")
    return said


# --- the printout -----------------------------------------------------------------------------------
def report(plan: Plan, *, checks: list[str], out: str, prometheus: str, grafana: str | None) -> str:
    """The dry run's text: plan, load, timeline of every trial, expected hits, guards, checks, duration."""
    ph, tr, f = plan.phases, plan.traffic, plan.fault
    lines = [f"drill run {plan.name} --dry-run: nothing was started, switched or sent", ""]
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
    lines += ["", _trials_table(plan), ""]
    lines += _hits_lines(plan)
    lines += [""] + _guard_lines(plan) + [""]
    lines.append("checks")
    lines.append(f"  ok  the plan, its {len(plan.variants)} configuration{'s' if len(plan.variants) > 1 else ''} and "
                 "the --fail-on conditions")  # fmt: skip
    lines.append(f"  ok  --out {out}: a directory a run can write")
    lines += [f"  ok  {c}" for c in checks]
    lines += [f"  --  {c}" for c in _not_run(plan, prometheus, grafana)]
    lines += ["", _duration_line(plan)]
    return "\n".join(lines)


def _trials_table(plan: Plan) -> str:
    per = plan.phases.total + (LOCAL_TRIAL_OVERHEAD_S if plan.stack is None else 0.0)
    rows = [("#", "configuration", "trial", "starts", "fault on–off", "tagged", "expected hits")]
    for i, (v, k) in enumerate(trial_order(plan)):
        at = i * per
        hits = predicted_hits(plan, v)
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


def _hits_lines(plan: Plan) -> list[str]:
    out = ["expected hits of each trial (results.json hits.expected and hits.expected_digest of a run with seed "
           f"{plan.seed}; a guard's trip ends a trial's tagging early):"]  # fmt: skip
    for v in plan.variants:
        hits = predicted_hits(plan, v)
        if hits is None:
            out.append(f"  {v.name}: known after each trial (the load's own processes log the ids they tag)")
            continue
        if not hits["tagged"]:
            out.append(f"  {v.name}: none (no directive, or no drill user in the fault phase)")
            continue
        spans = ", ".join(f"{u} {lo}–{hi}" for u, (lo, hi) in hits["spans"].items())
        out.append(f"  {v.name}: {hits['expected']} of {hits['tagged']} tagged ids (digest {hits['expected_digest']}):"
                   f" ids {plan.name}-{plan.seed}-USER-N for {spans}")  # fmt: skip
    first = next((v for v in plan.variants if (predicted_hits(plan, v) or {}).get("spans")), None)
    if first is not None:
        user, (lo, hi) = next(iter(predicted_hits(plan, first)["spans"].items()))
        f = first.fault
        ids = f"seq {lo} {hi} | sed 's/^/{plan.name}-{plan.seed}-{user}-/'"
        out.append(f"  the same with drill hits: {ids} | drill hits --seed {plan.seed} --directive '{f.directive}' "
                   f"--ratio {f.ratio} --summary")  # fmt: skip
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
        found = shutil.which(os.environ.get("DRILL_PROMETHEUS_BIN", "prometheus"))
        out.append("--prometheus auto: " + (f"{found} (not started)" if found else "no prometheus on PATH: a run "
                                             "goes on without the cross-check"))  # fmt: skip
    elif prometheus not in ("off", "", None):
        out.append(f"--prometheus {prometheus}: read back after the run (not contacted)")
    if grafana:
        out.append(f"--grafana {grafana}: annotations posted during the run (not contacted)")
    return out


def _duration_line(plan: Plan) -> str:
    n = len(trial_order(plan))
    phases = n * plan.phases.total
    if plan.stack is None:
        return (f"duration  about {_duration(phases + n * LOCAL_TRIAL_OVERHEAD_S)}: {n} trial{'s' if n > 1 else ''} × "
                f"({plan.phases.total:g} s of phases + ~{LOCAL_TRIAL_OVERHEAD_S:g} s to start and stop the chain)")
    slowest = max(c.switch_timeout_s for c in plan.stack.configs if c.switch) if any(
        c.switch for c in plan.stack.configs) else 0.0  # fmt: skip
    extra = f", each switch command up to {slowest:g} s" if slowest else ""
    return (f"duration  at least {_duration(phases)}: {n} trial{'s' if n > 1 else ''} × {plan.phases.total:g} s of "
            f"phases, plus each trial's readiness checks{extra} and the reads after it")  # fmt: skip


def dry_run(plan: Plan, *, out: str, prometheus: str, grafana: str | None) -> str:
    """Check what a run needs (raising what it would raise) and return the printout."""
    checks = []
    run_url = prometheus if prometheus.startswith(("http://", "https://")) else None
    if plan.stack is not None:
        checks += asyncio.run(check_stack(plan))
    elif prometheus == "auto":
        run_url = "auto"
    checks += check_prometheus_guards(plan, run_url)
    return report(plan, checks=checks, out=out, prometheus=prometheus, grafana=grafana)


def writable_dir(text: str) -> pathlib.Path:
    """`--out` as a run would take it, without creating it: a directory, or one that can be created."""
    out = pathlib.Path(text)
    if out.exists():
        if not out.is_dir():
            raise BadInput(f"--out {text}: exists and is not a directory (results.json, report.html and logs/ go "
                           "there)")  # fmt: skip
        if not os.access(out, os.W_OK):
            raise BadInput(f"--out {text}: not writable")
        return out
    parent = out.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise BadInput(f"--out {text}: cannot create it: Permission denied")
    return out
