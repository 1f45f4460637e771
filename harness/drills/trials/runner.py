"""`drill run`: for each configuration, start the topology and the load, scrape, analyse; write the outputs.

One configuration at a time, all under the plan's seed: start the chain or
switch the stack (`target`), start the load (`load.drivers`), scrape every endpoint each
second (`readings.scraper`) through warm-up, fault and recovery (each second's work after the
reading: `tick`), stop everything, turn the samples into series (`readings.series`) and
numbers (`analysis`), keep what results.json says of the trial beside them (`extras`), and
write the outputs (`report`). Cleanup is in `finally` blocks and an atexit
sweep; SIGTERM is turned into cancellation so the same path runs; a crashed
service aborts the run with an error.
"""

from __future__ import annotations

import asyncio
import pathlib
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.core.errors import DrillError
from harness.drills.analysis import landing
from harness.drills.analysis.results import assemble
from harness.drills.analysis.trial import analyze_run
from harness.drills.load.drivers import driver_for
from harness.drills.load.schedule import LoadDriver
from harness.drills.plan.model import Plan, Variant
from harness.drills.plan.outputs import Results
from harness.drills.readings.scraper import Scraper
from harness.drills.readings.series import RunSeries, Snapshot, build_series, reduce_families
from harness.drills.report.page import write_outputs
from harness.drills.stack.targets import target_for
from harness.drills.trials.extras import trial_extras
from harness.drills.trials.guard import prometheus_guards
from harness.drills.trials.metrics_server import (
    export_plan,
    point_prometheus,
    runner_metrics,
)
from harness.drills.trials.preflight import Preflight
from harness.drills.trials.tick import PhaseGauges, TrialTick
from harness.drills.trials.trip import TrialGuard
from harness.procs.spawn import stop_processes

if TYPE_CHECKING:  # the dashboards package is imported only when --grafana asks for it
    from harness.dashboards.annotations import DrillAnnotator


#: The scraper reads each second this long after it ends (the hops' counters are interpolated to the second).
SCRAPE_DELAY_S = 0.1
#: The signals that stop a run: every process it started is stopped, and the run exits 130 / 143.
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def edge_reader(load: LoadDriver, config: str) -> Callable[[int], Snapshot] | None:
    """The edge's exact counts of a second, reduced as the scraper reduces a /metrics text, when the load keeps
    them (None: the scraper reads the edge from the load's /metrics)."""
    counts = load.exact_counts()
    if counts is None:
        return None
    return lambda second: reduce_families(counts.families(second), config=config)


class Runner:
    """A plan's trials, interleaved (A B C A B C …), each through `run_config`; `run` writes the outputs."""

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
        self.plan = plan
        #: the run's preflight: its stack checks are asked after each configuration's first switch, before its
        #: first load (trials.preflight; None: a caller that took its own)
        self.preflight = preflight
        self._reached: set[str] = set()
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
        """One trial of `variant`: the stack up, its load on the plan's schedule, a reading and a tick each second
        to the end of its phases, everything stopped; its series (kept by `run`) and its extras (kept here)."""
        plan, target, label = self.plan, self.target, variant.name
        workdir = self._workdir(label, trial)
        load: LoadDriver | None = None
        guard: TrialGuard | None = None
        tick: TrialTick | None = None
        gauges = PhaseGauges(plan.name)
        try:
            await target.up(variant, trial, workdir)
            await self._stack_checks(variant)
            url, counts = runner_metrics()
            load = driver_for(plan, variant, trial, workdir, target, counts=counts, metrics_url=url)
            if self.prometheus is not None and getattr(self.prometheus, "sd_file", True) is not None:
                await point_prometheus(self.prometheus, target.endpoints() + load.metrics_endpoints(),
                                       lambda text: self.log(f"[{label}] {text}"))  # fmt: skip
            scraper = Scraper(lambda: target.endpoints() + load.metrics_endpoints(), config=label,
                              edge=edge_reader(load, label))  # fmt: skip
            wall0 = scraper.wall0
            await scraper.prime()  # the hops before the first call
            gates0 = await self._target_gates(variant)
            await load.start(target.edge())  # the schedule starts on a whole unix second (Locust: once it is up)
            start_unix = load.start_unix
            scraper.begin_at(start_unix)  # the load's first second is the baseline, however late we get there
            anchor = scraper.mono(start_unix) + SCRAPE_DELAY_S
            end_at = anchor + plan.phases.total + 1.0
            if plan.guard is not None:
                guard = TrialGuard(
                    plan, label=label, trial=trial, load=load, target=target, workdir=workdir, start_unix=start_unix,
                    start_t=start_unix - wall0, prometheus=self.prometheus_guards, log=self.log,
                    annotate=self._annotate, on_trip=gauges.fault_off,
                )  # fmt: skip
                guard.start()
            tick = TrialTick(
                plan, variant, index=index, trial=trial, start_unix=start_unix, scraper=scraper, load=load,
                target=target, guard=guard, gauges=gauges, workdir=workdir, interrupted=lambda: self.interrupted,
                annotate=self._annotate, on_sample=self.on_sample, log=self.log,
            )  # fmt: skip
            await scraper.run(lambda: time.monotonic() >= end_at, tick, anchor=anchor)
            await load.wait(timeout_s=plan.traffic.timeout_s + 1.0)
            await scraper.settle()
        finally:
            tripped = await guard.finish() if guard is not None else None  # before the services go
            gauges.clear()
            if load is not None:
                await load.stop()
            if tick is not None and tick.probe is not None:
                await asyncio.to_thread(stop_processes, [tick.probe])
            await target.down()
        series = await self._series(variant, load, scraper.samples, wall0, start_unix)
        series.guard = tripped
        probe_out = workdir / "probe.out" if tick is not None and tick.probe is not None else None
        await self._keep(variant, trial, series, load, scraper.errors, workdir, wall0, start_unix, gates0, probe_out)
        return series

    async def _keep(self, variant: Variant, trial: int, series: RunSeries, load: LoadDriver, scrape_errors,
                    workdir: pathlib.Path, wall0: float, start_unix: float, gates0: dict | None,
                    probe_out: pathlib.Path | None) -> None:  # fmt: skip
        """What the run keeps of a finished trial beside its series: its windows (for Prometheus' read-back), its
        fault window's annotation, and its extras for results.json (the services' audit lines and gates read
        now, after the trial)."""
        label = variant.name
        on, off = self._window(wall0, start_unix)
        self.windows[label] = (wall0 + on, wall0 + off)
        link = variant.fault.link
        what = f"link {link.link}: {link.describe()}" if link is not None else variant.fault.directive
        self._annotate("region", wall0 + on, wall0 + off, f"{label} trial {trial}: fault {what}",
                       phase="fault", tags=(f"config:{label}",))  # fmt: skip
        self.trial_windows.setdefault(label, []).append((wall0, time.time(), wall0 + on, wall0 + off))
        observed = await self.target.audit_hits(workdir, start_unix, time.time())
        gates = await self._target_gates(variant)
        during = None if gates is None or gates0 is None else landing.gates_during(gates0, gates)
        self.extras.setdefault(label, []).append(trial_extras(
            self.plan, variant, load, target_kind=self.target.kind, scrape_errors=scrape_errors, wall0=wall0,
            probe_out=probe_out, observed=observed, series=series, gates=during,
            link=self.target.links.summary() if getattr(self.target, "links", None) else None,
        ))  # fmt: skip

    def _workdir(self, label: str, trial: int) -> pathlib.Path:
        """The trial's log directory (`logs/CONFIG`, `/trial-K` when the plan has more than one), emptied of files."""
        workdir = self.out / "logs" / label
        if self.plan.trials > 1:
            workdir = workdir / f"trial-{trial}"
        if workdir.exists():
            for f in workdir.glob("*"):
                if f.is_file():
                    f.unlink()
        return workdir

    async def _stack_checks(self, variant: Variant) -> None:
        """The preflight's checks of a running stack, after the switch, before this configuration's first load; not
        after a guard's trip, whose emergency stop turned the services' injection off on purpose (one way: the
        trials that follow show what that left)."""
        tripped = any(s.guard for trials in self.series.values() for s in trials)
        if self.preflight is not None and self.target.kind == "stack" and not tripped:
            await self.preflight.stack(variant)
            if self.preflight.edge_call is not None:
                self.target.use_call(self.preflight.edge_call)
        elif self.preflight is not None and self.target.kind == "topology" and not tripped:
            # the hops the runner started: the reach probe once per configuration, before its first fault
            if variant.fault.directive and variant.name not in self._reached:  # a link fault sends no directive
                self._reached.add(variant.name)
                await self.preflight.reach(variant, self.target)

    def _window(self, wall0: float, start_unix: float) -> tuple[float, float]:
        """The fault's (on, off) in seconds after `wall0`: every load starts its phases on a whole unix second and
        says which (Locust in its phase gauges)."""
        ph = self.plan.phases
        on = start_unix - wall0 + ph.warmup
        return on, on + ph.fault

    async def _series(self, variant: Variant, load: LoadDriver, samples: list, wall0: float,
                      start_unix: float) -> RunSeries:  # fmt: skip
        """The trial's per-second series: the scraper's samples, with what a stack's Prometheus holds (its hops,
        an external load's calls) read onto the same seconds now."""
        edge_errors = None
        if self.target.selectors():  # hops already scraped by a Prometheus: read them onto our seconds now
            samples = await asyncio.to_thread(self._hops_from_prometheus, samples, wall0)
        selector = load.edge_selector()
        if selector:  # so is the load: its calls too
            samples, edge_errors = await asyncio.to_thread(self._edge_from_prometheus, samples, wall0, variant.name,
                                                           selector)  # fmt: skip
        series = build_series(variant.name, samples, *self._window(wall0, start_unix))
        series.planned_rps, series.timeout_s = load.planned_rps(), variant.traffic.timeout_s
        if edge_errors is not None:  # read from Prometheus: each second says how far it may be off
            series.edge_error = [max(a, b) for a, b in zip(edge_errors[0], edge_errors[0][1:], strict=False)]
            series.fault_error, series.resolution_s = (0.0, 0.0), edge_errors[1]
        return series

    async def _target_gates(self, variant: Variant) -> dict[str, landing.Gates | None] | None:
        """The fault's target hop's drill gates, read from its /metrics, when the runner did not start it (its
        services outlive the trial: read before and after, they say which gate refused and under which name)."""
        if self.target.kind != "stack" or not variant.fault.directive:
            return None
        name = variant.fault.target or self.plan.hop_names[0]
        urls = [url for hop, url in self.target.endpoints() if hop == name]
        return await landing.read_gates(urls) if urls else None

    def _edge_from_prometheus(self, samples: list, wall0: float, config: str, selector: str) -> tuple[list, tuple]:
        """Merge an external load's calls, read from the stack's Prometheus at our seconds, into our samples."""
        from harness.drills.readings.prom import read_edge

        time.sleep(2.0)  # the last scrapes of the trial land
        seconds = [t + wall0 for t, _ in samples]
        edge, errors, widest = read_edge(self.plan.stack.prometheus, selector, config, seconds)
        return [(t, {**snap, **extra}) for (t, snap), extra in zip(samples, edge, strict=True)], (errors, widest)

    def _hops_from_prometheus(self, samples: list, wall0: float) -> list:
        """Merge the hops a stack's Prometheus scrapes into our samples, read at the same whole seconds."""
        from harness.drills.readings.prom import read_hops

        time.sleep(2.0)  # the last scrapes of the trial land
        seconds = [t + wall0 for t, _ in samples]
        hops = read_hops(self.plan.stack.prometheus, self.target.selectors(), seconds)
        return [(t, {**snap, **extra}) for (t, snap), extra in zip(samples, hops, strict=True)]

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
        failed: DrillError | None = None
        try:
            for trial in range(1, plan.trials + 1):  # interleaved: A B C A B C …
                for i, variant in enumerate(plan.variants):
                    if self._skip(variant.name, trial):
                        continue
                    try:
                        series = await self.run_config(variant, i, trial)
                    except DrillError as exc:  # a late failure keeps what was measured before it
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

    def _keep_finished(self, started: float, failed: DrillError) -> None:
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
                    per_trial.append({k: getattr(res, k) for k in keys} | {"resolution_s": s.resolution_s})
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
