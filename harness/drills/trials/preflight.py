"""The run's preflight: every check a drill needs before its first fault, in one list, each with its verdict.

`drill run --dry-run` prints the list; `drill run` takes the same checks, in the same order, and stops at
the first that fails, before any trial's load sends a directive. Each check says `ok`, `warn` (the run
goes on; the line says what will not work as the plan reads) or `fail`. Three stages:

1. `local()`: what needs no network — the plan and `--fail-on` (already loaded by the caller), `--out`
   (created, a file written and removed in it), the URLs the run will ask (well-formed), which Prometheus
   each `prometheus` guard asks, a guard that cannot trip within a trial, the edge's type from a .proto or
   descriptor set, and each directive's `@after`/`@read` against the method's kind where that is known
   without the network (the demo's methods, a file's). A fail here is the only line printed.
2. `sources(run_url)`: the Prometheus servers the run reads — the stack's (its selectors) and each guard's —
   answer; each guard's expression parses, returns an instant vector (`resultType`) and is quiet. Before
   the first switch: a switch command starts services, never the Prometheus that measures them, so a stack
   the run cannot measure is never switched, let alone faulted. Under `--prometheus auto` a run starts its
   Prometheus first and asks it; a dry run starts one for those questions only and stops it at once (it is
   the one process a dry run starts, and only for a guard that asks it).
3. `stack(variant)`: once the edge serves (after a configuration's switch and ready probe; in a dry run, the
   first configuration's ready probe) — the edge's method resolves by reflection, its kind against the
   directive's options, each hop's `/metrics` answers under the hop's name with injection on (or its
   selector names a target that is up, with its `drill_fault_switch` not 0), and each `stack.audit.files`
   glob matches a file where a trial expects hits (asked now, not before the switch: a service may create
   its log as it starts). Last, the reach probe (`trials.reach`, `reach`): a few calls tagged as the load's
   drill calls at ratio 0 must be counted as drill traffic by every hop with readings up to the target, or
   the first that did not is named (a hop before it carries neither the keys nor baggage), exit 4; so is a
   target whose gates refused the probe's directive (another name, a delay over its bound).
   With `stack.proxy`, the edge is a proxy the run starts for each trial (the dry
   run, once for its checks): `stack.targets.RunningStack.start_proxy`, which both call, first asks the
   service behind it (`check_upstream`: refused, silent or not gRPC, exit 1, in at most a few seconds
   rather than the edge's readiness wait) and the proxy's two ports, each named by its plan key.

Exit codes of a fail (harness.core.errors; the same in a dry run and a run, contracts §11):
- 2, bad input: the user's plan or flags cannot work (a wrong-kind directive, a malformed URL, an
  unwritable `--out`, a guard expression Prometheus refuses or that is not an instant vector, a guard
  with no Prometheus to ask, an audit glob that matches no file where hits are expected). Nothing was
  started because of it.
- 1, the run failed: a data source does not answer (a Prometheus, a hop's `/metrics`, the edge). The plan
  may be right; the world is not there.
- 4, the fault would not land as planned: the dry run can already tell (the hop that must inject calls
  itself `drill`, the default, or another name than the plan's target; injection is off on the target or
  on a hop before it, which then forwards nothing; the reach probe's calls never counted as drill traffic
  at a hop up to the target). That is the code the run would end with after its
  trials (`FaultNotLanded`): refusing before the first fault gives the same answer without hurting users.
- 5, a guard would stop the drill: a `prometheus` guard already returns series, so it would trip in the
  first second of every trial.
"""

from __future__ import annotations

import asyncio
import dataclasses
import glob
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.core.errors import BadInput, DrillError, FaultNotLanded, GuardTripped, RunFailed
from harness.core.faults import Directive, Kind, is_hit, parse_directive
from harness.drills.load.schedule import tagged_ids
from harness.drills.plan.guards import ErrorRateGuard, url_problem
from harness.drills.plan.model import Plan, Variant
from harness.drills.stack.edge import DEMO_KINDS, EdgeCall
from harness.drills.trials.guard import name_of, prometheus_guards

if TYPE_CHECKING:
    from harness.drills.stack.targets import DrillTarget

#: The error each exit code of a failed check raises (one line, `harness.cli` prints it).
ERRORS: dict[int, type[DrillError]] = {1: RunFailed, 2: BadInput, 4: FaultNotLanded, 5: GuardTripped}
#: How long one question to a Prometheus or a hop's /metrics may take in the preflight.
ASK_TIMEOUT_S = 10.0
#: How long a hop's selector may name no scraped target after a switch before the preflight fails: a service it
#: has just started or recreated appears in `up` only after Prometheus discovers and scrapes it (a file_sd or
#: DNS refresh, then a scrape: 5 s and 1 s in the compose stack's prometheus.yml; 30 s leaves room for both).
SCRAPE_WAIT_S = 30.0


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One check's verdict: `ok`, `warn`, `fail` (with the exit code it raises) or `--` (named, not run)."""

    status: str
    text: str
    code: int = 0

    def line(self) -> str:
        return f"  {self.status}  {self.text}"


class Preflight:
    """The checks of one run, in order; `verdicts` holds what each said. A fail raises its exit code's error."""

    def __init__(self, plan: Plan, *, out: str, prometheus: str = "off", dry: bool = False,
                 say: Callable[[str], None] | None = None) -> None:  # fmt: skip
        self.plan = plan
        self.out = out
        self.prometheus = prometheus or "off"
        #: a dry run leaves nothing behind (the --out it created for the check is removed again)
        self.dry = dry
        #: hears each verdict as it is given, and what a wait is waiting for (None: silent, e.g. before the
        #: caller knows whether it will print at all)
        self.say = say
        self.verdicts: list[Verdict] = []
        #: the edge's call, once resolved (from a file in `local`, by reflection in `stack`)
        self.edge_call: EdgeCall | None = None
        self._stacked: set[str] = set()

    # -- verdicts -------------------------------------------------------------------------------
    def format(self, v: Verdict) -> str:
        return v.line() if self.dry else f"preflight {v.status}  {v.text}"

    def _give(self, v: Verdict) -> None:
        self.verdicts.append(v)
        if self.say is not None:
            self.say(self.format(v))
        if v.status == "fail":
            raise ERRORS[v.code](v.text)

    def ok(self, text: str) -> None:
        self._give(Verdict("ok", text))

    def warn(self, text: str) -> None:
        self._give(Verdict("warn", text))

    def fail(self, text: str, code: int) -> None:
        self._give(Verdict("fail", text, code))

    def _progress(self, text: str) -> None:
        if self.say is not None:
            self.say(f"        {text}" if self.dry else f"preflight ..  {text}")

    # -- 1. local --------------------------------------------------------------------------------
    def _link_mode(self) -> None:
        """A kernel-mode link fault the runner's own link will set needs root or CAP_NET_ADMIN and `nft` here: said
        before anything starts, not at the first fault (a running link, driven through its API, answers for itself)."""
        from harness.link.kernel import why_not

        fault = self.plan.fault.link
        if fault is None or fault.mode != "kernel":
            return
        spec = next(link for link in self.plan.links if link.name == fault.link)
        if getattr(spec, "admin", None):
            return
        problem = why_not()
        if problem:
            self.fail(f"fault.link {fault.link}: {problem}", 1)
        else:
            self.ok(f"fault.link {fault.link}: the kernel mode can drop packets here (nft, CAP_NET_ADMIN)")

    def local(self) -> None:
        plan = self.plan
        n = len(plan.variants)
        self.ok(f"the plan, its {n} configuration{'s' if n > 1 else ''} and the --fail-on conditions")
        self._urls()
        self._link_mode()
        self._guards_local()
        self._edge_local()
        self._out()  # last: a run creates it, and a refused input leaves nothing behind

    def _out(self) -> None:
        try:
            writable_out(self.out, keep=not self.dry)
        except BadInput as exc:
            self.fail(str(exc), 2)
        self.ok(f"--out {self.out}: a directory a run can write (a file was written there and removed)")

    def _urls(self) -> None:
        """Every URL the run will ask, well-formed: refused here as bad input, never sent as one."""
        plan, p = self.plan, self.prometheus
        if p not in ("off", "auto"):
            problem = url_problem(p)
            if problem:
                self.fail(f"--prometheus: 'auto', 'off' or an http:// URL, got {p!r} ({problem})", 2)
        stack = plan.stack
        if stack is None:
            return
        named = [("stack.prometheus", stack.prometheus)] if stack.prometheus else []
        named += [(f"stack.hops.{h.name}.metrics", url) for h in stack.hops for url in h.metrics]
        named += [("stack.load.metrics", url) for url in (stack.load.metrics if stack.load else ())]
        for key, url in named:
            problem = url_problem(url)
            if problem:
                self.fail(f"{key}: {url!r} is not a URL a request can go to: {problem}", 2)

    def _guards_local(self) -> None:
        plan = self.plan
        if plan.guard is None:
            return
        run_url = None if self.prometheus == "off" else self.prometheus
        try:
            asked = prometheus_guards(plan, run_url)
        except BadInput as exc:
            self.fail(str(exc), 2)
        if self.prometheus == "auto" and shutil.which(prometheus_binary()) is None:
            needing = [name_of(g) for g, url in asked if url == "auto"]
            if needing:
                self.fail(f"guard {needing[0]!r} asks the Prometheus --prometheus auto starts, and there is no "
                          f"{prometheus_binary()!r} on PATH (Debian: apt-get install prometheus)", 2)  # fmt: skip
        ph = plan.phases
        for g in plan.guard.stop_when:
            if isinstance(g, ErrorRateGuard) and g.for_s > ph.fault + ph.recovery:
                self.warn(f"guard {name_of(g)}: needs {g.for_s} s in a row above {g.above:.0%}, and a trial has "
                          f"{ph.fault + ph.recovery:g} s from fault on to its end: it cannot trip on the fault's "
                          "errors")  # fmt: skip

    def _edge_local(self) -> None:
        plan = self.plan
        stack = plan.stack
        if stack is None:
            for v in plan.variants:
                first = not v.fault.target or v.fault.target == v.hops[0].name
                # the demo's first hop serves the load's method; every hop behind it is called with a unary Call
                kind = DEMO_KINDS[v.traffic.method] if first else Kind.UNARY
                self._kind(v, kind, f"drill.v1.Demo/{v.traffic.method if first else 'Call'}")
            return
        if stack.edge.proto or stack.edge.descriptor_set:
            from harness.drills.stack.edge import resolve_edge

            self.edge_call = resolve_edge(stack.edge)  # bad input raises its one line (exit 2)
            source = "descriptor set" if stack.edge.descriptor_set else ".proto"
            self.ok(f"edge method {self.edge_call.describe()} and its request resolve by {source}")
            self._stack_kinds()

    def _kind(self, v: Variant, kind: str, method: str) -> None:
        """Refuse an `@after`/`@read` the method's kind cannot have: the server counts it in
        `drill_fault_rejected_total{reason="wrong_kind"}` and injects nothing (harness.core.faults)."""
        d = _options(v.fault.directive)
        if d is None:
            return
        refused = d.refusal_for(Kind(kind))
        if refused is None:
            self.ok(f"{v.name}: {v.fault.directive} fits {method.lstrip('/')} ({kind.replace('_', '-')})")
            return
        need = "a response stream (server-streaming or bidi)" if d.after and not Kind(kind).response_streaming \
            else "a request stream (client-streaming or bidi)"  # fmt: skip
        option = f"@after={d.after}" if d.after and not Kind(kind).response_streaming else f"@read={d.read}"
        where = f"configuration {v.name}: " if len(self.plan.variants) > 1 else ""
        self.fail(f"{where}fault.directive {v.fault.directive!r}: {option} needs {need}, and "
                  f"{method.lstrip('/')} is a {kind.replace('_', '-')} method: the server would refuse every "
                  f"call (drill_fault_rejected_total{{reason=\"{refused.value}\"}}) and inject nothing", 2)  # fmt: skip

    def _stack_kinds(self) -> None:
        """Each configuration's directive against the edge's kind, where the edge is the hop that injects."""
        stack = self.plan.stack
        for v in self.plan.variants:
            if _options(v.fault.directive) is None:
                continue
            if v.fault.target and v.fault.target != stack.hops[0].name:
                self.ok(f"{v.name}: {v.fault.directive} acts at {v.fault.target}, behind the edge: the method it "
                        "serves there is that server's to check")  # fmt: skip
                continue
            self._kind(v, self.edge_call.kind, self.edge_call.method)

    # -- 2. sources -----------------------------------------------------------------------------------
    def sources(self, run_url: str | None) -> None:
        """Every Prometheus the run reads answers, and every guard's expression is an instant vector that is
        quiet now (`run_url`: the run's --prometheus, started or given; None without one)."""
        from harness.procs.prometheus import PrometheusError, api_get

        plan = self.plan
        stack = plan.stack
        if self.prometheus not in ("off", "auto") and run_url:
            self._reach(run_url, "--prometheus: the run's cross-check is read from it")
        if stack is not None and stack.prometheus:
            why = [f"hop {h.name}'s selector" for h in stack.hops if h.selector]
            why += ["the load's selector"] if stack.load is not None and stack.load.selector else []
            if why:
                self._reach(stack.prometheus, f"stack.prometheus: {', '.join(why)} read from it")
        for g, url in prometheus_guards(plan, run_url) if plan.guard else []:
            name = name_of(g)
            try:
                data = api_get(url, "query", [("query", g.expr)], ASK_TIMEOUT_S)
            except PrometheusError as exc:
                if "bad_data" in str(exc):
                    self.fail(f"guard {name!r}: {url} refuses the expression: {exc}", 2)
                self.fail(f"guard {name!r}: {exc}", 1)
            kind = data.get("resultType") if isinstance(data, dict) else None
            if kind != "vector":
                self.fail(f"guard {name!r}: {g.expr!r} returns a {kind or 'non-vector'} at {url}, not an instant "
                          "vector: a guard trips when its vector has series", 2)  # fmt: skip
            if data.get("result"):
                self.fail(f"guard {name!r} would trip in the first second: {g.expr!r} already returns "
                          f"{len(data['result'])} series at {url}", 5)  # fmt: skip
            self.ok(f"guard {name}: {url} answers {g.expr!r} with nothing (quiet now)")

    def _reach(self, url: str, why: str) -> None:
        from harness.procs.prometheus import PrometheusError, api_get

        try:
            api_get(url, "query", [("query", "vector(1)")], ASK_TIMEOUT_S)
        except PrometheusError as exc:
            self.fail(f"{exc} ({why}); nothing was switched or sent", 1)
        self.ok(f"{url} answers ({why})")

    # -- 3. the stack, once its edge serves ----------------------------------------------------------
    async def wait_edge(self) -> None:
        """A dry run's wait for the edge, as the first configuration's ready probe asks it (a run's own
        waits follow each switch)."""
        from harness.drills.stack.targets import wait_ready

        stack = self.plan.stack
        config = stack.configs[0]
        try:
            await wait_ready(stack.edge.address, config, say=self._progress)
        except RunFailed as exc:
            self.fail(str(exc), 1)
        self.ok(f"edge {stack.edge.address}: passes its gRPC health check {config.ready.checks} times in a row")

    async def stack(self, variant: Variant | None = None) -> None:
        """What a trial needs of a running stack whose edge serves: its method's kind, each hop's series and
        that the hop which must inject can (a run asks this once per configuration, after its first switch)."""
        stack = self.plan.stack
        if stack is None:
            return
        key = variant.name if variant is not None else ""
        if key in self._stacked:
            return
        self._stacked.add(key)
        needs_kind = any(_options(v.fault.directive) for v in self.plan.variants)
        if self.edge_call is None and (stack.load is None or needs_kind):
            from harness.drills.stack.edge import resolve_edge

            self.edge_call = await asyncio.to_thread(resolve_edge, stack.edge)
            self.ok(f"edge method {self.edge_call.describe()} and its request resolve by server reflection")
            self._stack_kinds()
        variants = [variant] if variant is not None else list(self.plan.variants)
        # a switch the run just made may have started services Prometheus has not scraped yet: give them time
        switched = variant is not None and any(c.name == variant.name and c.switch for c in stack.configs)
        wait_s = SCRAPE_WAIT_S if switched else 0.0
        for hop_index, hop in enumerate(stack.hops):
            for url in hop.metrics:
                await self._hop_metrics(hop.name, hop_index, url, variants)
            if hop.selector:
                await asyncio.to_thread(self._hop_selector, hop.name, hop_index, hop.selector, variants, wait_s)
        self._audit_files(variants)
        probed = set()
        for v in variants:  # the last check: every other one passed, so the probe goes to a stack that can take it
            if v.fault.directive and (key := v.fault.tagging()) not in probed:
                probed.add(key)
                await self.reach(v)

    async def reach(self, variant: Variant, target: DrillTarget | None = None) -> None:
        """The reach probe of `variant`'s fault (`trials.reach.check`): through the running stack the plan names,
        or through `target`, a stack the runner started (its edge, its hops' endpoints and selectors)."""
        from harness.drills.trials.reach import check

        await check(self, variant, target)

    def _audit_files(self, variants: list[Variant]) -> None:
        """Each `stack.audit.files` glob matches a file, asked once the edge serves (in a run, after the
        configuration's switch and ready probe), so a service or a switch that creates its log as it starts is
        not refused. A glob that matches nothing where a trial expects hits is bad input (2): its hits would be
        read from no file, and the run would end with a note instead of the services' word. A dry run runs no
        switch: with switch commands it warns (the run asks again after each switch), else it fails too."""
        stack = self.plan.stack
        audit = stack.audit
        if audit is None or not audit.files:
            return
        unswitched = self.dry and any(c.switch for c in stack.configs)
        expecting = [v for v in variants if hits_expected(self.plan, v)]
        folder = str(pathlib.Path(self.plan.source).parent.resolve()) if self.plan.source else os.getcwd()
        for i, pattern in enumerate(audit.files):
            key, found = f"stack.audit.files[{i}]", sorted(glob.glob(pattern))
            if found:
                shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
                self.ok(f"{key} {pattern}: {len(found)} file{'s' if len(found) > 1 else ''} ({shown}), read after "
                        "each trial for the services' audit lines")  # fmt: skip
                continue
            where = f" (a relative glob is read from the plan file's folder, {folder})" \
                if pattern.startswith(folder + os.sep) else ""  # fmt: skip
            head = f"{key} matches no file: nothing at {pattern}{where}"
            if not expecting:
                self.warn(f"{head}; no trial expects hits of it now")
                continue
            if unswitched:
                self.warn(f"{head} before any switch: a run asks again after each configuration's switch, and "
                          "refuses it then, before the first fault (exit 2)")  # fmt: skip
                continue
            names = ", ".join(v.name for v in expecting)
            self.fail(f"{head}, and {names} expect{'s' if len(expecting) == 1 else ''} hits the services' audit "
                      "lines must report (asked once the edge serves): a run would read them from no file; nothing "
                      "was sent", 2)  # fmt: skip

    def _must_inject(self, hop_index: int, variants: list[Variant]) -> str | None:
        """Why this hop's injection matters (it injects, or forwards to the hop that does), or None."""
        names = self.plan.hop_names
        for v in variants:
            if not v.fault.directive:
                continue
            target = names.index(v.fault.target) if v.fault.target in names else 0
            if hop_index == target:
                return "the hop that injects"
            if hop_index < target:
                return f"in front of {names[target]}, the hop that injects: a hop with injection off forwards no " \
                       "directive"  # fmt: skip
        return None

    async def _hop_metrics(self, name: str, index: int, url: str, variants: list[Variant]) -> None:
        from harness.drills.analysis.landing import Gates
        from harness.drills.readings.scraper import fetch, reduce_text

        try:
            text = await fetch(url, timeout_s=5.0)
        except (OSError, asyncio.TimeoutError, TimeoutError) as exc:
            self.fail(f"hop {name}: /metrics at {url} does not answer ({exc or 'timeout'}): the run cannot "
                      "measure it; nothing was sent", 1)  # fmt: skip
        gates = Gates.parse(text)
        series = len(reduce_text(text, config=None, service=name, edge=False))
        svc = f"hop {name}: the service at {url}"
        if self.plan.stack.hops[index].tap:  # `drill proxy --tap`: forwards every key; injecting is not its job
            on = any(gates.switch.values())
            (self.warn if on else self.ok)(f"hop {name}: {url} answers ({series} drill series), a tap: injection "
                                           f"{'ON (a tap is meant to inject nothing)' if on else 'off'}")  # fmt: skip
            return
        matters = self._must_inject(index, variants)
        targeted = any(v.fault.directive and v.fault.target == name for v in variants)
        if not gates.switch:
            self._hop_problem(f"{svc} exports no drill_fault_switch: it runs without the harness's interceptors, "
                              "as a service started without DRILL_FAULT_ENABLED=1 does", matters)  # fmt: skip
            return
        if targeted and name not in gates.switch:
            said = ", ".join(repr(s) for s in sorted(gates.switch))
            default = " (the default: DRILL_SERVICE is not set)" if set(gates.switch) == {"drill"} else ""
            self.fail(f"{svc} calls itself {said}{default}, not {name!r}, so fault.target {name!r} never reaches "
                      f"it (drill_fault_skipped_total{{reason=\"target\"}}): set DRILL_SERVICE={name}", 4)  # fmt: skip
        if all(value == 0 for value in gates.switch.values()):
            self._hop_problem(f"{svc} has injection OFF (drill_fault_switch 0): started without "
                              "DRILL_FAULT_ENABLED=1, or its emergency stop tripped (one way: restart it)", matters)
            return
        if "drill" in gates.switch and name != "drill":
            self.warn(f"{svc} calls itself 'drill' (the default: DRILL_SERVICE is not set): a fault.target {name!r} "
                      "would not reach it")  # fmt: skip
            return
        self.ok(f"hop {name}: {url} answers ({series} drill series, service {', '.join(sorted(gates.switch))}, "
                "injection on)")  # fmt: skip

    def _hop_problem(self, text: str, matters: str | None) -> None:
        """A hop that would not inject: a fail (4) when it is the target or in front of it, else a warning."""
        if matters:
            self.fail(f"{text}; it is {matters}: the fault would not land", 4)
        self.warn(text)

    def _hop_selector(self, name: str, index: int, selector: str, variants: list[Variant], wait_s: float) -> None:
        """`up{selector}` names a target, asked again each second for `wait_s` (after a switch) while empty."""
        from harness.drills.readings.scrapes import pending_targets
        from harness.procs.prometheus import PrometheusError, api_get

        url = self.plan.stack.prometheus
        deadline, waited = time.monotonic() + wait_s, False
        why = "a service the switch just started may not be scraped yet"
        try:
            while not (result := api_get(url, "query", [("query", f"up{selector}")], ASK_TIMEOUT_S)["result"]):
                if not waited and not wait_s:
                    # a stack that has just come up: Prometheus may have found targets it has not scraped once yet
                    # (wait as after a switch), or not have looked for them yet (one discovery refresh and one
                    # scrape, from its own config); a selector that is still empty after that names nothing
                    if pending := pending_targets(url, ASK_TIMEOUT_S):
                        wait_s = SCRAPE_WAIT_S
                        why = f"it has {pending} target{'s' if pending > 1 else ''} it has not scraped yet"
                    else:
                        wait_s = _discovery_wait(url)
                        why = "one service-discovery refresh and one scrape, from its config"
                    deadline = time.monotonic() + wait_s
                if time.monotonic() >= deadline:
                    after = f" after {wait_s:.0f} s" if wait_s else ""
                    self.fail(f"selector {selector} names no target {url} scrapes (up{selector} is empty{after})", 1)
                if not waited:  # said once, at the first empty answer, so the wait is never silent
                    waited = True
                    self._progress(f"hop {name}: waiting for {url} to scrape {selector} (at most {wait_s:.0f} s: "
                                   f"{why})")  # fmt: skip
                time.sleep(1.0)
            result = self._scraped_again(name, selector, result)
            switch = api_get(url, "query", [("query", f"drill_fault_switch{selector}")], ASK_TIMEOUT_S)["result"]
        except PrometheusError as exc:
            self.fail(f"hop {name}: {exc}", 1)
        up = sum(1 for r in result if r["value"][1] == "1")
        head = f"hop {name}: {selector}: {len(result)} target{'s' if len(result) > 1 else ''} in {url}, {up} up"
        if not up:  # every target's switch series is stale: whether the hop injects cannot be read
            text = f"{head}: no target answered its scrapes for a scrape interval, so its injection switch and " \
                   "counts cannot be read"  # fmt: skip
            if matters := self._must_inject(index, variants):
                self.fail(f"{text}; it is {matters}: a run could not be judged; nothing was sent", 1)
            self.warn(text)
            return
        off = [r for r in switch if float(r["value"][1]) == 0]
        if switch and len(off) == len(switch):
            matters = self._must_inject(index, variants)
            self._hop_problem(f"{head}, drill_fault_switch 0 in every one: injection OFF (started without "
                              "DRILL_FAULT_ENABLED=1, or its emergency stop tripped)", matters)
            return
        if off:
            self.warn(f"{head}, injection OFF in {len(off)} of {len(switch)} (drill_fault_switch 0)")
            return
        if up < len(result):
            self.warn(f"{head}: {len(result) - up} failed {'their' if len(result) - up > 1 else 'its'} scrapes for a "
                      "scrape interval; the hop's counts lack their calls while they do")  # fmt: skip
            return
        self.ok(head)

    def _scraped_again(self, name: str, selector: str, result: list[dict]) -> list[dict]:
        """`up{selector}` once every target answered its last scrape, or as it stands after one scrape interval and
        a second: a failed scrape (a timeout on a busy host, a restart) reads as a target down until the next one,
        so one failure alone is not what the check reports."""
        from harness.drills.readings.scrapes import scrape_wait_s
        from harness.procs.prometheus import api_get

        url = self.plan.stack.prometheus
        deadline = None
        while down := sum(1 for r in result if r["value"][1] != "1"):
            if deadline is None:
                wait_s = scrape_wait_s(url, ASK_TIMEOUT_S)
                deadline = time.monotonic() + wait_s
                self._progress(f"hop {name}: {down} of {len(result)} target{'s' if len(result) > 1 else ''} failed "
                               f"the last scrape; waiting for the next (at most {wait_s:g} s: one scrape interval "
                               "from its config and a second)")  # fmt: skip
            if time.monotonic() >= deadline:
                break
            time.sleep(0.5)
            result = api_get(url, "query", [("query", f"up{selector}")], ASK_TIMEOUT_S)["result"] or result
        return result


def discovery_wait(config: dict) -> float:
    """How long a selector may stay empty on a stack that has just come up: Prometheus' discovery refresh and
    scrape interval from its config (`readings.scrapes.discovery_s`), at most SCRAPE_WAIT_S."""
    from harness.drills.readings.scrapes import discovery_s

    return min(SCRAPE_WAIT_S, discovery_s(config))


def _discovery_wait(url: str) -> float:
    """`discovery_wait` of the config the Prometheus at `url` runs; SCRAPE_WAIT_S when it cannot be read."""
    from harness.drills.readings.scrapes import config

    try:
        return discovery_wait(config(url, ASK_TIMEOUT_S))
    except Exception:  # noqa: BLE001 - an unreadable config: the bound
        return SCRAPE_WAIT_S


def hits_expected(plan: Plan, variant: Variant) -> bool:
    """Whether a trial of `variant` expects hits: some trial's tagged ids include one the seed hits (what the
    dry run predicts), or an external load (its ids are its own) sends drill calls with a directive."""
    f, tr = variant.fault, variant.traffic
    if not f.directive or not f.ratio or not tr.drill_users or not tr.drill_rate:
        return False
    if plan.stack is not None and plan.stack.load is not None:
        return True
    return any(is_hit(plan.seed, r, f.directive, f.ratio) for trial in range(1, plan.trials + 1)
               for r in tagged_ids(plan.name, plan.seed, variant.name, trial, tr, f, plan.phases))  # fmt: skip


def _options(directive: str) -> Directive | None:
    """The parsed directive when it has an option that needs a stream (`@after`, `@read`), else None."""
    if not directive:
        return None
    d = parse_directive(directive)
    return d if d.after or d.read else None


def prometheus_binary() -> str:
    from harness.procs.prometheus import PROMETHEUS

    return PROMETHEUS


def writable_out(text: str, *, keep: bool) -> pathlib.Path:
    """`--out`: a directory a run can write, proven by creating it (and its missing parents) and a file in it.

    `keep=False` (a dry run) removes the file and every directory it created, so nothing is left behind.
    Refused as bad input otherwise (a file in the way, a path no one can create, a read-only directory)."""
    out = pathlib.Path(text)
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {text}: exists and is not a directory (results.json, report.html and logs/ go there)")
    created = []
    parent = out.absolute()
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".drill-write-check-"):
            pass
    except OSError as exc:
        raise BadInput(f"--out {text}: cannot write there: {exc.strerror or exc}") from None
    finally:
        if not keep:
            for d in created:  # deepest first
                try:
                    os.rmdir(d)
                except OSError:
                    break
    return out
