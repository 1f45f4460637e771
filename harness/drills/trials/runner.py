"""`drill run`: for each configuration, start the topology and the load, scrape, analyse; write the outputs.

One configuration at a time, all under the plan's seed: start the chain or
switch the stack (`target`), start the load (`load`), scrape every endpoint each
second (`readings.scraper`) through warm-up, fault and recovery, stop everything,
turn the samples into series (`readings.series`) and numbers (`analysis`), and
write the outputs (`report`). Cleanup is in `finally` blocks and an atexit
sweep; SIGTERM is turned into cancellation so the same path runs; a crashed
service aborts the run with an error.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.core import metrics as m
from harness.core.errors import DrillError as BaseDrillError
from harness.core.errors import RunFailed
from harness.core.ids import check_plan_name
from harness.core.snapshots import EdgeCounts, LoadExport
from harness.drills.analysis import landing
from harness.drills.analysis.results import assemble
from harness.drills.analysis.trial import analyze_run
from harness.drills.load.aio import AioLoad
from harness.drills.load.command import CommandLoad
from harness.drills.load.locust import LocustLoad
from harness.drills.load.schedule import ids_digest, planned_rps
from harness.drills.plan.model import Plan, Variant
from harness.drills.plan.outputs import Results
from harness.drills.plan.sections import Probe
from harness.drills.readings.relay import Relay, relayed
from harness.drills.readings.relay import serve as serve_metrics
from harness.drills.readings.scraper import Scraper
from harness.drills.readings.series import RunSeries, build_series, reduce_families
from harness.drills.report.page import write_outputs
from harness.drills.stack.targets import target_for
from harness.drills.trials.guard import prometheus_guards
from harness.drills.trials.preflight import Preflight
from harness.drills.trials.trip import TrialGuard
from harness.procs.spawn import python_env, spawn, stop_processes

if TYPE_CHECKING:  # the dashboards package is imported only when --grafana asks for it
    from harness.dashboards.annotations import DrillAnnotator


class DrillError(RunFailed):
    """The drill could not finish (a service crashed, the load failed)."""


_METRICS: tuple[str, EdgeCounts, str, Relay] | None = None

#: The scraper reads each second this long after it ends (the hops' counters are interpolated to the second).
SCRAPE_DELAY_S = 0.1
#: The signals that stop a run: every process it started is stopped, and the run exits 130 / 143.
SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: How long a trial waits for Prometheus to read its hops once: a changed target set is discovered on
#: Prometheus' 5-s tick, then scraped within its interval (1 s here; a user's may be longer).
WAIT_SCRAPED_S = 15.0


def runner_metrics() -> tuple[str, EdgeCounts]:
    """The runner's own /metrics and the aio load's per-second edge counts it serves, stamped with their
    second (harness.core.snapshots), beside every other series of the process, live."""
    return _runner_server()[:2]


def runner_metrics_url() -> str:
    return runner_metrics()[0]


def initial_targets(plan: Plan) -> list[tuple]:
    """What Prometheus scrapes from the start: the runner, and the relay paths of the first trial's hops when
    the runner starts them (named as it will name them), so their discovery overlaps Prometheus' start."""
    own, _, base, _ = _runner_server()
    hops = [] if plan.stack else [(h.name, "") for h in plan.variants[0].hops for _ in range(h.replicas)]
    return [(None, own), *relayed(base, hops)[1]]


def _runner_server() -> tuple[str, EdgeCounts, str, Relay]:
    """(metrics URL, edge counts, base URL, hop relay) of the one metrics server of this process."""
    global _METRICS
    if _METRICS is None:
        counts = EdgeCounts("loadgen")
        base, relay = serve_metrics(LoadExport(counts).registry())
        _METRICS = (f"{base}/metrics", counts, base, relay)
    return _METRICS


def _probe_summary(path: pathlib.Path) -> dict | None:
    """The probe's JSON summary line (the first JSON object with a `connections` key)."""
    try:
        for line in path.read_text(errors="replace").splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                if isinstance(data, dict) and "summary" in data:
                    return data["summary"]
    except OSError:
        pass
    return None


def export_plan(plan: Plan) -> None:
    """The plan's SLO and each configuration's planned load as an info gauge on the runner's /metrics:
    `drill analyze --prometheus` reads them back and judges the run as the runner does."""
    slo = plan.slo
    for v in plan.variants:
        rps = planned_rps(v.traffic)
        p99 = "" if slo.max_p99_s is None else repr(slo.max_p99_s)
        grace = "" if slo.grace_s is None else repr(slo.grace_s)
        m.PLAN_INFO.labels(
            plan.name, v.name, slo.traffic, repr(slo.max_error_rate), p99, str(slo.hold_s), str(slo.window_s),
            repr(slo.min_calls), grace, repr(rps["organic"]), repr(rps["drill"]), repr(v.traffic.timeout_s),
        ).set(1)  # fmt: skip


class Runner:
    def __init__(
        self,
        plan: Plan,
        out: pathlib.Path,
        *,
        on_sample: Callable[[dict], None] | None = None,
        log: Callable[[str], None] = print,
        prometheus: object | None = None,
        annotator: DrillAnnotator | None = None,
        preflight: Preflight | None = None,
    ) -> None:
        check_plan_name(plan.name)  # its ids must fit the gate's bound (bad input, before any trial)
        self.plan = plan
        #: the run's preflight: its stack checks are asked after each configuration's first switch, before its
        #: first load (trials.preflight; None: a caller that took its own)
        self.preflight = preflight
        #: posts phase changes and each trial's fault window to Grafana (`drill run --grafana`)
        self.annotator = annotator
        self.out = out
        self.on_sample = on_sample
        self.log = log
        self.prometheus = prometheus
        #: per configuration: one RunSeries per trial, in trial order
        self.series: dict[str, list[RunSeries]] = {}
        self.extras: dict[str, list[dict]] = {}
        #: the stack being drilled: the demo topology the runner starts, or services already running
        self.target = target_for(plan, log)
        #: per configuration: the fault window in unix seconds (for reading the run back from Prometheus)
        self.windows: dict[str, tuple[float, float]] = {}
        #: per configuration: each trial's (run start, run end, fault on, fault off) in unix seconds
        self.trial_windows: dict[str, list[tuple[float, float, float, float]]] = {}
        self._posts: list[asyncio.Future] = []
        #: the trial that failed, when one did: {config, trial, error}
        self.failed: dict | None = None
        #: the signal that stopped the run (SIGINT or SIGTERM), once one came
        self.interrupted: str | None = None
        #: the Prometheus each `prometheus` guard asks (resolved now: a missing one is bad input before any trial)
        run_url = getattr(prometheus, "url", None)
        self.prometheus_guards = prometheus_guards(plan, run_url) if plan.guard else []
        #: per configuration: the trials a guard trip made the run skip (`guard.after_trip: skip`)
        self.skipped: dict[str, list[int]] = {}

    # -- one configuration -----------------------------------------------------------------
    async def run_config(self, variant: Variant, index: int, trial: int = 1) -> RunSeries:
        plan, target = self.plan, self.target
        label = variant.name
        workdir = self.out / "logs" / label
        if plan.trials > 1:
            workdir = workdir / f"trial-{trial}"
        if workdir.exists():
            for f in workdir.glob("*"):
                if f.is_file():
                    f.unlink()
        load = None
        probe = None
        guard: TrialGuard | None = None
        phase_gauges = {p: m.PHASE.labels(plan.name, p) for p in ("warmup", "fault", "recovery")}
        fault_gauge = m.FAULT_ACTIVE.labels(plan.name)
        try:
            await target.up(variant, trial, workdir)
            # before this configuration's first fault; not after a guard's trip, whose emergency stop turned the
            # services' injection off on purpose (one way: the trials that follow show what that left)
            tripped = any(s.guard for trials in self.series.values() for s in trials)
            if self.preflight is not None and target.kind == "stack" and not tripped:
                await self.preflight.stack(variant)
                if self.preflight.edge_call is not None:
                    target.use_call(self.preflight.edge_call)
            tr, fault = variant.traffic, variant.fault
            if plan.stack is not None and plan.stack.load is not None:  # the stack's own load, by command
                load = CommandLoad(
                    plan=plan.name, seed=plan.seed, config_label=label, traffic=tr, fault=fault, phases=plan.phases,
                    spec=plan.stack.load, prometheus=plan.stack.prometheus, workdir=workdir, trial=trial,
                    edge=plan.stack.edge,
                )  # fmt: skip
            elif tr.driver == "locust":  # the plan checked the profile exists
                load = LocustLoad(
                    plan=plan.name, seed=plan.seed, config_label=label, traffic=tr, fault=fault,
                    phases=plan.phases, workdir=workdir, trial=trial,
                )  # fmt: skip
            else:
                url, counts = runner_metrics()
                load = AioLoad(
                    plan=plan.name, seed=plan.seed, config_label=label, traffic=tr, fault=fault,
                    phases=plan.phases, edge_call=target.edge_call(variant), counts=counts, metrics_url=url,
                    trial=trial,
                )  # fmt: skip
            if self.prometheus is not None and getattr(self.prometheus, "sd_file", True) is not None:
                # every hop and load through the relay (harness.drills.readings.relay): the same targets each trial of
                # the same shape, so Prometheus reads a new trial's hops within a scrape interval instead of
                # discovering new ports on its 5-s tick. The load waits until each was read once, or the
                # hops' first seconds (all of warm-up in a short plan) would be missing from Prometheus.
                own = runner_metrics_url()
                *_, base, relay = _runner_server()
                others = [(svc, url) for svc, url in target.endpoints() + load.metrics_endpoints() if url != own]
                urls, relay_targets = relayed(base, others)
                relay.set(urls)
                self.prometheus.set_targets([(None, own), *relay_targets])
                if not await asyncio.to_thread(relay.wait_served, urls, WAIT_SCRAPED_S):
                    self.log(f"[{label}] prometheus has not scraped every replica yet: first seconds may be missing")
            edge = None
            if isinstance(load, AioLoad):  # the edge's exact per-second counts, straight from the load
                edge = lambda second: reduce_families(load.counts.families(second), config=label)  # noqa: E731
            scraper = Scraper(lambda: target.endpoints() + load.metrics_endpoints(), config=label, edge=edge)
            wall0 = scraper.wall0
            await scraper.prime()  # the hops before the first call
            gates0 = await self._target_gates(variant)
            await load.start(target.edge())  # the schedule starts on a whole unix second (Locust: once it is up)
            start_unix = load.start_unix
            scraper.begin_at(start_unix)  # the load's first second is the baseline, however late we get there
            anchor = scraper.mono(start_unix) + SCRAPE_DELAY_S
            ph = plan.phases
            end_at = anchor + ph.total + 1.0
            state = {"phase": None}
            if plan.guard is not None:
                guard = TrialGuard(
                    plan, label=label, trial=trial, load=load, target=target, workdir=workdir, start_unix=start_unix,
                    start_t=start_unix - wall0, prometheus=self.prometheus_guards, log=self.log,
                    annotate=self._annotate, on_trip=lambda: fault_gauge.set(0),
                )  # fmt: skip
                guard.start()

            def tick() -> None:
                if self.interrupted:  # a cancel that something swallowed still stops the drill within a tick
                    raise asyncio.CancelledError(self.interrupted)
                crashed = target.crashed()
                if crashed:
                    raise DrillError(f"service crashed during the drill: {', '.join(crashed)}")
                if guard is not None:  # first: a trip's stop does not wait for the live view
                    guard.check(scraper.samples)
                elapsed = time.time() - start_unix
                phase = ph.at(elapsed)
                if phase != state["phase"]:
                    # each boundary at its own time, also those a late tick stepped over (once in CI, a trial's
                    # first tick came after its 2-s warm-up: the warm-up's annotation was never posted)
                    for entered in ph.entered(state["phase"], phase):
                        self._annotate("event", f"{label} trial {trial}: {entered}", phase=entered,
                                       at_s=start_unix + ph.start_of(entered), tags=(f"config:{label}",))  # fmt: skip
                    state["phase"] = phase
                    if phase == "fault" and variant.probe and probe is None:
                        start_probe()
                    for p, g in phase_gauges.items():
                        g.set(1 if p == phase else 0)
                    fault_gauge.set(1 if phase == "fault" and not (guard and guard.tripped) else 0)
                if self.on_sample is not None:
                    self.on_sample(
                        {
                            "config": label if plan.trials == 1 else f"{label} #{trial}/{plan.trials}",
                            "index": index, "count": len(plan.variants), "phase": phase,
                            "elapsed": elapsed, "total": ph.total, "samples": scraper.samples,
                            "hops": plan.hop_names, "planned_rps": load.planned_rps(),
                            "timeout_s": tr.timeout_s,
                            "guard": guard.view() if guard else None,
                        }
                    )  # fmt: skip

            def start_probe() -> None:
                nonlocal probe
                probe = self._start_probe(variant.probe, target.edge()[0], workdir)

            await scraper.run(lambda: time.monotonic() >= end_at, tick, anchor=anchor)
            if isinstance(load, AioLoad):
                await load.wait(timeout_s=plan.traffic.timeout_s + 1.0)
            await scraper.settle()
        finally:
            tripped = await guard.finish() if guard is not None else None  # before the services go
            for g in phase_gauges.values():
                g.set(0)
            fault_gauge.set(0)
            if load is not None:
                await load.stop()
            if probe is not None:
                await asyncio.to_thread(stop_processes, [probe])
            await target.down()
        samples = scraper.samples
        edge_errors = None
        if target.selectors():  # hops already scraped by a Prometheus: read them onto our seconds now
            samples = await asyncio.to_thread(self._hops_from_prometheus, samples, wall0)
        if isinstance(load, CommandLoad) and load.spec.selector:  # so is the load: its calls too
            samples, edge_errors = await asyncio.to_thread(self._edge_from_prometheus, samples, wall0, label)
        # both loads start their phases on a whole unix second and say which (Locust in its phase gauges)
        on, off = start_unix - wall0 + ph.warmup, start_unix - wall0 + ph.warmup + ph.fault
        series = build_series(label, samples, on, off)
        series.planned_rps, series.timeout_s = load.planned_rps(), variant.traffic.timeout_s
        series.guard = tripped
        if edge_errors is not None:  # read from Prometheus: each second says how far it may be off
            series.edge_error = [max(a, b) for a, b in zip(edge_errors[0], edge_errors[0][1:], strict=False)]
            series.fault_error, series.resolution_s = (0.0, 0.0), edge_errors[1]
        self.windows[label] = (wall0 + on, wall0 + off)
        self._annotate("region", wall0 + on, wall0 + off, f"{label} trial {trial}: fault {variant.fault.directive}",
                       phase="fault", tags=(f"config:{label}",))  # fmt: skip
        self.trial_windows.setdefault(label, []).append((wall0, time.time(), wall0 + on, wall0 + off))
        observed = await target.audit_hits(workdir, start_unix, time.time())
        gates = await self._target_gates(variant)
        during = None if gates is None or gates0 is None else landing.gates_during(gates0, gates)
        self.extras.setdefault(label, []).append(
            self._extras(variant, load, scraper, workdir, wall0, probe, observed, series, during)
        )  # fmt: skip
        return series

    async def _target_gates(self, variant: Variant) -> dict[str, landing.Gates | None] | None:
        """The fault's target hop's drill gates, read from its /metrics, when the runner did not start it (its
        services outlive the trial: read before and after, they say which gate refused and under which name)."""
        if self.target.kind != "stack" or not variant.fault.directive:
            return None
        name = variant.fault.target or self.plan.hop_names[0]
        urls = [url for hop, url in self.target.endpoints() if hop == name]
        return await landing.read_gates(urls) if urls else None

    def _extras(self, variant, load, scraper, workdir, wall0, probe, observed: set[str] | None,
                series: RunSeries | None = None, gates: dict | None = None) -> dict:  # fmt: skip
        """What results.json keeps of a trial beside the analysis: where it ran, which ids were hit, and whether
        the fault landed as planned (harness.drills.analysis.landing: `hits.as_planned`, `hits.note`)."""
        tagged = load.expected_hits()
        expected = set(tagged or ())
        extras = {
            "config": variant.config or ("plain" if self.target.kind == "topology" else variant.name),
            "started_unix": round(wall0, 3),
            "driver": load.name,
            "scrape_errors": scraper.errors,
            "hits": {"expected": len(expected), "expected_digest": ids_digest(expected)} if tagged is not None else {},
        }
        if observed is not None:  # the services' own audit lines
            extras["hits"].update({
                "observed": len(observed), "observed_digest": ids_digest(observed),
                "observed_subset_of_expected": observed <= expected if expected else None,
            })  # fmt: skip
        if isinstance(load, AioLoad) and load.message_counts() is not None:  # a streaming edge's messages
            extras["messages"] = load.message_counts()
        if isinstance(load, AioLoad):  # what the load itself was told: ids answered with the x-drill-fault marker
            marked = set(load.observed_hits())
            extras["hits"].update({"marked": len(marked), "marked_digest": ids_digest(marked)})
            if observed is None:  # a running stack: the marker is the services' own word on what they hit
                extras["hits"].update({
                    "observed": len(marked), "observed_digest": ids_digest(marked),
                    "observed_subset_of_expected": marked <= expected if expected else None,
                })  # fmt: skip
        if tagged is not None and series is not None and series.guard:  # tagging stopped early, on purpose
            extras["hits"].update({"as_planned": None, "note": None})
        elif tagged is not None:
            witnesses = landing.Witnesses(
                expected, audited=observed, marked=set(load.observed_hits()) if isinstance(load, AioLoad) else None,
                injected=landing.injected(series.values) if series is not None else None, gates=gates,
            )  # fmt: skip
            ok, note = landing.judge(witnesses, variant.fault, seed=self.plan.seed, hops=self.plan.hop_names)
            extras["hits"].update({"as_planned": ok, "note": note})
        if probe is not None:
            extras["probe"] = _probe_summary(workdir / "probe.out")
        return extras

    def _edge_from_prometheus(self, samples: list, wall0: float, config: str) -> tuple[list, tuple]:
        """Merge an external load's calls, read from the stack's Prometheus at our seconds, into our samples."""
        from harness.drills.readings.prom import read_edge

        time.sleep(2.0)  # the last scrapes of the trial land
        seconds = [t + wall0 for t, _ in samples]
        edge, errors, widest = read_edge(self.plan.stack.prometheus, self.plan.stack.load.selector, config, seconds)
        return [(t, {**snap, **extra}) for (t, snap), extra in zip(samples, edge, strict=True)], (errors, widest)

    def _hops_from_prometheus(self, samples: list, wall0: float) -> list:
        """Merge the hops a stack's Prometheus scrapes into our samples, read at the same whole seconds."""
        from harness.drills.readings.prom import read_hops

        time.sleep(2.0)  # the last scrapes of the trial land
        seconds = [t + wall0 for t, _ in samples]
        hops = read_hops(self.plan.stack.prometheus, self.target.selectors(), seconds)
        return [(t, {**snap, **extra}) for (t, snap), extra in zip(samples, hops, strict=True)]

    def _start_probe(self, spec: Probe, edge: str, workdir: pathlib.Path):
        """`drill probe half-open EDGE` as a child process (bounded by its own --timeout)."""
        argv = [
            sys.executable, "-m", "harness.cli", "probe", spec.kind, edge,
            "--count", str(spec.count), "--timeout", str(spec.timeout_s), "--json",
        ]  # fmt: skip
        if not spec.preface:
            argv.append("--no-preface")
        self.log(f"probe: {' '.join(argv[3:])}")
        return spawn(argv, workdir / "probe.out", python_env())

    # -- the whole plan --------------------------------------------------------------------
    async def run(self) -> dict:
        plan = self.plan
        self.out.mkdir(parents=True, exist_ok=True)
        export_plan(plan)
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def interrupt(sig: signal.Signals) -> None:
            self.interrupted = sig.name
            task.cancel(sig.name)

        # both signals through the loop (its wake-up fd: handled however busy or idle the main thread is),
        # not asyncio.run's own SIGINT handler, which cancels the task from inside whatever code it interrupts
        for sig in SIGNALS:
            loop.add_signal_handler(sig, interrupt, sig)
        started = time.time()
        failed: BaseDrillError | None = None
        try:
            for trial in range(1, plan.trials + 1):  # interleaved: A B C A B C …
                for i, variant in enumerate(plan.variants):
                    if self._skip(variant.name, trial):
                        continue
                    try:
                        series = await self.run_config(variant, i, trial)
                    except BaseDrillError as exc:  # a late failure keeps what was measured before it
                        failed = exc
                        self.failed = {"config": variant.name, "trial": trial, "error": str(exc).splitlines()[0]}
                        break
                    self.series.setdefault(variant.name, []).append(series)
                if failed is not None:
                    break
        finally:
            for sig in SIGNALS:
                loop.remove_signal_handler(sig)
            await asyncio.gather(*self._posts, return_exceptions=True)  # annotations posted before we report
        if failed is not None:
            self._keep_finished(started, failed)
        results = self.results(started)
        if self.prometheus is not None:
            results.prometheus = await asyncio.to_thread(self._from_prometheus, started, time.time())
        out = results.model_dump()
        write_outputs(self.out, out, self.series)
        return out

    def _skip(self, name: str, trial: int) -> bool:
        """Whether a guard's trip in an earlier trial of this configuration skips this one (`after_trip: skip`)."""
        guard = self.plan.guard
        if guard is None or guard.after_trip != "skip":
            return False
        earlier = [k for k, s in enumerate(self.series.get(name, []), 1) if s.guard]
        if not earlier:
            return False
        self.skipped.setdefault(name, []).append(trial)
        self.log(f"[{name}] trial {trial} skipped: a guard stopped its trial {earlier[0]} (guard.after_trip: skip)")
        return True

    def _keep_finished(self, started: float, failed: BaseDrillError) -> None:
        """Write the trials that finished before `failed` (marked as such), then fail the run with `failed`'s exit
        code (1 for a failed run; a later configuration's preflight may refuse with 2 or 4)."""
        where = f"{self.failed['config']} trial {self.failed['trial']}"
        if not any(self.series.values()):
            raise failed
        results = self.results(started)
        results.failed = self.failed
        results.notes.append(f"the run stopped at {where}: {self.failed['error']}")
        write_outputs(self.out, results.model_dump(), {n: s for n, s in self.series.items() if s})
        done = sum(len(s) for s in self.series.values())
        raise type(failed)(
            f"{self.failed['error']} (at {where}); the {done} finished trial{'s' if done != 1 else ''} are in "
            f"{self.out / 'results.json'} (drill analyze --series {self.out / 'series.json'} re-analyses them)"
        ) from None

    def _annotate(self, kind: str, *args, **kwargs) -> None:
        """Post an annotation off the event loop (best effort: the annotator logs and swallows errors)."""
        if self.annotator is None:
            return
        post = getattr(self.annotator, kind)
        self._posts.append(asyncio.get_running_loop().run_in_executor(
            None, lambda: post(*args, plan=self.plan.name, **kwargs)))  # fmt: skip

    def _from_prometheus(self, start: float, end: float) -> dict:
        """The same analysis from the Prometheus that watched the run: a cross-check of the scraper.

        Trials are told apart by the load's trial gauges (`drill_trial_phase_start_seconds`), so one
        read covers the whole run; each trial's numbers carry the read's resolution.
        """
        from harness.drills.readings.prom import PrometheusError, read_drill

        time.sleep(2.0)  # let the last scrapes land
        out: dict = {"url": self.prometheus.url, "start": round(start, 3), "end": round(end, 3)}
        hops = self.plan.hop_names
        keys = ("breached", "ttd_s", "ttr_s", "mttr_s", "amplification", "uncertainty_s", "resolution_s")
        out["configs"] = {}
        try:
            for name, trials in read_drill(self.prometheus.url, start, end).items():
                per_trial = []
                ours = self.series.get(name) or []
                for s in trials:
                    if ours:  # what the load planned, as the runner knows it: the same offered-load check
                        s.planned_rps, s.timeout_s = ours[0].planned_rps, ours[0].timeout_s
                    res = analyze_run(s, self.plan.slo, hops)
                    per_trial.append({k: res.get(k) for k in keys} | {"resolution_s": s.resolution_s})
                out["configs"][name] = {**per_trial[0], "trials": per_trial}
        except PrometheusError as exc:
            out["error"] = str(exc)
        return out

    def results(self, started: float) -> Results:
        results = assemble(self.series, self.plan.slo, self.plan.hop_names, plan=self.plan, extras=self.extras,
                           started=started)  # fmt: skip
        for name, trials in self.skipped.items():  # never run: no series, so only the summary and a note say so
            if name in results.configs:
                results.configs[name]["summary"]["skipped_trials"] = len(trials)
            results.notes.append(f"{name}: trial{'s' if len(trials) > 1 else ''} {', '.join(map(str, trials))} "
                                 "skipped after a guard stopped an earlier one (guard.after_trip: skip)")  # fmt: skip
        return results
