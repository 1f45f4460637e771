"""The live view while a drill runs (rich): phase and progress, guards, requests/s, error rate, p99, hits, fds.

`LiveView` is fed one update per scrape by the runner. On a terminal it draws
a rich `Live` panel; elsewhere (CI, pipes, tests) it prints one plain line
every few seconds. The numbers are computed from the last two samples with the
same series code the analysis uses.

A stack's hops given by a selector are read from its Prometheus only after each trial, so the runner's
samples have nothing of them while it runs: when the update carries the stack (`update["stack"]`), the
view asks that Prometheus for their rates now (`readings.hop_rates`: one query per update, off the event
loop, bounded) and says beside them where they come from and how old they are.
"""

from __future__ import annotations

import math
import sys
import time

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from harness.drills.analysis import trial as a
from harness.drills.plan.outputs import SeriesKey
from harness.drills.readings.hop_rates import STALE_S, HopRates, HopReading
from harness.drills.readings.series import build_series

PHASE_STYLE = {"warmup": "cyan", "fault": "bold red", "recovery": "green", "done": "dim"}


#: the live offered rate is taken over this many seconds, ending a timeout (+1 s) ago: calls are
#: counted when they end, so a call started now is seen up to a timeout later
OFFERED_SPAN_S = 3.0


def offered_now(update: dict) -> dict[str, float | None]:
    """Calls started per second by traffic class, over a recent span (see OFFERED_SPAN_S)."""
    timeout = update.get("timeout_s") or 2.0
    lag = math.ceil(timeout) + 1.0
    samples = update["samples"][-int(OFFERED_SPAN_S + lag + 2) :]
    if len(samples) < OFFERED_SPAN_S + lag + 1:
        return {}
    s = build_series(update["config"], samples, 0.0, 0.0)
    s.timeout_s = timeout
    end = s.t[-1] - lag
    return {tr: a.started_rps(s, end - OFFERED_SPAN_S, end, tr) for tr in ("organic", "drill")}


def last_second(update: dict, prometheus: HopReading | None = None) -> dict | None:
    """Numbers for the latest second of the running configuration; a hop the runner does not scrape takes its
    numbers from `prometheus` (the stack's Prometheus, read now), unless that reading is stale."""
    samples = update["samples"][-2:]
    if len(samples) < 2:
        return None
    s = build_series(update["config"], samples, 0.0, 0.0)
    i = len(s.t) - 1
    out: dict = {"rps": {}, "err": {}, "p99": {}, "hops": {}, "offered": offered_now(update)}
    out["planned"] = update.get("planned_rps") or {}
    for tr in ("organic", "drill"):
        out["rps"][tr] = a.rps_series(s, tr)[i]
        out["err"][tr] = a.error_rate_series(s, tr)[i]
        modes = sorted({k.mode for k in s.select("lat", traffic=tr)})
        for mode in modes:
            out["p99"][(tr, mode)] = a.p99_series(s, tr, mode)[i]
    for hop in update.get("hops", []):
        out["hops"][hop] = {
            name: s.get(SeriesKey(kind, hop))[i]
            for name, kind in (("rps", "srv"), ("hits", "hits"), ("gap", "gap"), ("retry", "retry"),
                               ("fds", "fds"), ("breaker", "breaker"))
        }  # fmt: skip
    if prometheus is not None and prometheus.age() <= STALE_S:
        for hop, values in prometheus.values.items():
            if hop in out["hops"] and all(v is None for v in out["hops"][hop].values()):
                out["hops"][hop] = dict(values)
    return out


def hop_source(update: dict) -> tuple[str, dict[str, str]] | None:
    """(Prometheus URL, {hop: selector}) of the stack's hops read from a Prometheus; None when there are none."""
    stack = update.get("stack")
    selectors = {h.name: h.selector for h in stack.hops if h.selector} if stack is not None else {}
    return (stack.prometheus, selectors) if selectors and stack.prometheus else None


def source_note(rates: HopRates | None, now: float | None = None) -> str:
    """Where the selector hops' numbers come from, and how old they are ('' without such hops)."""
    if rates is None:
        return ""
    names = ", ".join(rates.selectors)
    reading = rates.latest()
    if reading is None:
        return f"{names}: asking {rates.url}" + (f" ({rates.error})" if rates.error else "")
    age = reading.age(now)
    said = f"{names}: irate over {reading.window_s:g} s from {rates.url}, read {age:.1f} s ago"
    if age > STALE_S:
        said = f"{names}: no rate from {rates.url} for {age:.0f} s"
    return said + (f"; last ask failed: {rates.error}" if rates.error else "")


def _n(x, fmt="{:.0f}") -> str:
    return "—" if x is None else fmt.format(x)


def offered_cell(nums: dict, traffic: str) -> str:
    """`offered/planned` req/s of a class, with `BEHIND` below 90 % (the drill's own load check)."""
    planned = nums.get("planned", {}).get(traffic)
    got = nums.get("offered", {}).get(traffic)
    if not planned:
        return "—"
    behind = got is not None and got < a.MIN_OFFERED_SHARE * planned
    return f"{_n(got)}/{planned:.0f}" + (" BEHIND" if behind else "")


class LiveView:
    #: how often the plain view (not a terminal) prints its line
    PRINT_EVERY_S = 5.0

    def __init__(self, plan_name: str, console: Console | None = None, enabled: bool | None = None) -> None:
        self.plan_name = plan_name
        self.console = console or Console(stderr=True)
        self.enabled = self.console.is_terminal if enabled is None else enabled
        self._live: Live | None = None
        self._last_print = 0.0
        #: the selector hops' rates, read from the stack's Prometheus while a trial runs (None: no such hops)
        self.hop_rates: HopRates | None = None

    def __enter__(self) -> LiveView:
        if self.enabled:
            self._live = Live(console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None
        self.hop_rates = None  # a query still out ends on its own timeout (its thread is a daemon)

    def _prometheus(self, update: dict) -> HopReading | None:
        """Ask the stack's Prometheus for the selector hops' rates (never waits) and give the latest reading."""
        source = hop_source(update)
        if source is None:
            self.hop_rates = None
            return None
        if self.hop_rates is None or (self.hop_rates.url, self.hop_rates.selectors) != (source[0].rstrip("/"),
                                                                                         source[1]):  # fmt: skip
            self.hop_rates = HopRates(*source)
        self.hop_rates.poll()
        return self.hop_rates.latest()

    def log(self, text: str) -> None:
        self.console.print(text, highlight=False, soft_wrap=True, markup=False)

    def update(self, update: dict) -> None:
        nums = last_second(update, self._prometheus(update))
        if self._live is not None:
            self._live.update(self.render(update, nums))
            return
        now = time.monotonic()
        if nums is not None and now - self._last_print >= self.PRINT_EVERY_S:
            self._last_print = now
            err = nums["err"].get("organic")
            self.console.print(
                f"[{update['config']}] {update['phase']:<8} {update['elapsed']:5.1f}/{update['total']:.0f}s "
                f"organic {_n(nums['rps'].get('organic'))} req/s err {_n(err and 100 * err, '{:.1f}')}% "
                f"drill {_n(nums['rps'].get('drill'))} req/s "
                f"offered organic {offered_cell(nums, 'organic')} drill {offered_cell(nums, 'drill')} "
                + " ".join(f"{h}={_n(v['rps'])}/s" for h, v in nums["hops"].items())
                + (f" ({note})" if (note := source_note(self.hop_rates)) else ""),
                highlight=False,
                markup=False,
                soft_wrap=True,  # one progress line per record, whatever the terminal's width (grep-able logs)
            )

    def render(self, update: dict, nums: dict | None):
        phase = update["phase"]
        head = Text.assemble(
            (f"drill {self.plan_name}", "bold"),
            f"  configuration {update['index'] + 1}/{update['count']}: ",
            (update["config"], "bold"),
            "  phase ",
            (phase, PHASE_STYLE.get(phase, "")),
            f"  {update['elapsed']:.0f}/{update['total']:.0f} s",
        )
        bar = ProgressBar(total=update["total"], completed=min(update["elapsed"], update["total"]), width=60)
        guards = guard_line(update.get("guard"))
        top = [head, bar] + ([guards] if guards is not None else [])
        if nums is None:
            return Panel(Group(*top))
        traffic = Table(title="edge (client side)", expand=False)
        for col in ("traffic", "fault mode", "req/s", "offered/planned", "error rate", "p99"):
            traffic.add_column(col, justify="right")
        for (tr, mode), p99 in sorted(nums["p99"].items()):
            err = nums["err"].get(tr)
            traffic.add_row(
                tr, mode, _n(nums["rps"].get(tr)), offered_cell(nums, tr),
                _n(err and 100 * err, "{:.1f}%") if err is not None else "—", _n(p99, "{:.3f} s"),
            )  # fmt: skip
        note = source_note(self.hop_rates)
        hops = Table(title="per service" + (f" ({note})" if note else ""), expand=False)
        for col in ("service", "req/s", "hits/s", "retries/s", "deadline gap/s", "open fds", "breaker"):
            hops.add_column(col, justify="right")
        for hop, v in nums["hops"].items():
            hops.add_row(
                hop, _n(v["rps"]), _n(v["hits"]), _n(v["retry"]), _n(v["gap"], "{:.1f}"), _n(v["fds"]),
                _n(v["breaker"]),
            )  # fmt: skip
        return Panel(Group(*top, traffic, hops))


def guard_line(state: dict | None) -> Text | None:
    """The guards' line: each one's value now, or the trip (red) once one held; None without guards."""
    if not state or not (state.get("watch") or state.get("tripped")):
        return None
    trip = state.get("tripped")
    if trip:
        return Text.assemble(("GUARD ", "bold red"), (f"{trip['name']} tripped at {trip['tripped_at_s']:g} s: ", "red"),
                             f"{trip['text']}; the fault is stopped")  # fmt: skip
    return Text("guards: " + " · ".join(f"{name} {value}" for name, value in state["watch"].items()), style="dim")


def stderr_console() -> Console:
    return Console(file=sys.stderr)
