"""report.html: table first, plots present, self-contained, renders in headless Chromium, fits 1,280 px."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import zlib
from html.parser import HTMLParser

import pytest

from harness.drills.analysis import trial as a
from harness.drills.analysis.results import assemble
from harness.drills.report import page as report
from tests.drills.synth import make_series, rates

SLO = a.Slo()


def _results_and_series():
    naive_r = [0.0] * 40
    for t in range(11, 31):
        naive_r[t - 1] = 0.4
    res_r = [0.0] * 40
    for t in range(11, 13):
        res_r[t - 1] = 0.3
    n = 40
    storm = [100.0] * n
    for t in range(11, 25):
        storm[t - 1] = 500.0
    series = {
        "naive": make_series(naive_r, config="naive", hops={"gateway": [100.0] * n, "ledger": storm}),
        "resilient": make_series(res_r, config="resilient", hops={"gateway": [100.0] * n, "ledger": [105.0] * n}),
    }
    results = {
        "plan": "retry-storm",
        "seed": 42,
        "fault": {"directive": "abort:UNAVAILABLE", "target": "ledger"},
        "slo": {"max_error_rate": 0.05, "hold_s": 3, "traffic": "all"},
        "hops": ["gateway", "ledger"],
        "configs": {n: a.analyze_run(s, SLO, hops=["gateway", "ledger"]).to_dict() for n, s in series.items()},
    }
    return results, series


def test_render_puts_the_table_first_and_names_the_winner():
    results, series = _results_and_series()
    page = report.render(results, series)
    assert page.index('id="mttr-table"') < page.index('id="plots"')
    # one trial each: inconclusive, and said so without a "best"
    assert "Inconclusive after 1 trial: no configuration is significantly better" in page
    assert 'class="verdict open"' in page and 'class="best"' not in page  # neither green box nor green row
    assert 'data-chart="trials"' in page and page.count('class="trial') == 2
    assert 'data-chart="impact"' in page and page.count('class="impact') == 2
    assert page.count("<svg") >= 4
    assert page.count('class="fault-window"') >= 4
    # self-contained: no external fetches of any kind
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<script" not in page


def test_never_restored_shows_never_not_zero():
    results, series = _results_and_series()
    results["configs"]["naive"]["mttr_s"] = None
    page = report.render(results, series)
    assert "never" in page
    assert '<td class="null">never</td>' in page


def test_write_outputs(tmp_path):
    results, series = _results_and_series()
    report.write_outputs(tmp_path, results, series)
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data["configs"]["naive"]) >= {
        "ttd_s",
        "ttm_s",
        "ttr_s",
        "mttr_s",
        "amplification",
        "blast_radius",
        "error_rate_during_fault",
        "requests",
    }
    assert (tmp_path / "report.html").stat().st_size > 5000


def _png_is_not_blank(png: bytes) -> bool:
    """Decode enough of the PNG to see more than one colour (no Pillow needed)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    bpp = 4
    while pos < len(png):
        length = int.from_bytes(png[pos : pos + 4], "big")
        kind = png[pos + 4 : pos + 8]
        body = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width = int.from_bytes(body[:4], "big")
            bpp = {6: 4, 2: 3}.get(body[9], 4)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp + 1
    # filter bytes aside, count distinct byte values in the first rows' data
    sample = bytearray()
    for row in range(0, min(len(raw) // stride, 400), 7):
        sample += raw[row * stride + 1 : (row + 1) * stride]
    return len(set(sample)) > 8


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed")
def test_report_renders_in_headless_chromium(tmp_path):
    results, series = _results_and_series()
    report.write_outputs(tmp_path, results, series)
    page = tmp_path / "report.html"
    common = [
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,2000",
    ]
    shot = tmp_path / "shot.png"
    subprocess.run([*common, f"--screenshot={shot}", page.as_uri()], check=True, timeout=90, capture_output=True)
    dom = subprocess.run(
        [*common, "--dump-dom", page.as_uri()], check=True, timeout=90, capture_output=True, text=True
    ).stdout
    assert 'id="mttr-table"' in dom
    assert dom.count('data-config="resilient"') >= 5  # a table row and a line in each chart
    assert dom.count("<svg") >= 4 and "polyline" in dom
    assert shot.exists() and shot.stat().st_size > 10_000
    assert _png_is_not_blank(shot.read_bytes())


# --- issue 21: the report reads the verdict right ---------------------------------------------------------
def _every_trial(**spec: list[dict]) -> tuple[dict, dict]:
    """results.json (via `assemble`) and every trial's series, from per-config lists of rate specs."""
    series = {n: [make_series(rates(s), config=n) for s in specs] for n, specs in spec.items()}
    return assemble(series, a.Slo(), ["gateway", "ledger"], plan_name="synthetic").model_dump(), series


def _three_trials(**spec: list[dict]) -> tuple[dict, dict]:
    """results.json and each configuration's representative series (what `render` plots)."""
    results, series = _every_trial(**spec)
    return results, {n: runs[results["configs"][n]["representative_trial"]] for n, runs in series.items()}


def _tradeoff():
    # resilient: out for 3-4 s at 90 % errors; naive: out for 10-11 s at 10 %: faster, but 2.7x the budget
    return _three_trials(
        resilient=[{(11, 13): 0.9}, {(11, 13): 0.9}, {(11, 14): 0.9}],
        naive=[{(11, 20): 0.1}, {(11, 20): 0.1}, {(11, 21): 0.1}],
    )


def test_the_verdict_box_and_the_highlighted_row_follow_the_verdict():
    results, series = _tradeoff()
    page = report.render(results, series)
    assert results["verdict"]["kind"] == "tradeoff" and results["verdict"]["winner"] is None
    assert 'class="verdict tradeoff"' in page and 'class="best"' not in page  # not green: a trade-off
    winner, series = _three_trials(resilient=[{}, {}, {}], naive=[{(11, 20): 0.5}] * 3)
    page = report.render(winner, series)
    assert winner["verdict"]["winner"] == "resilient"
    assert 'class="verdict good"' in page and page.count('class="best"') == 1
    assert '<tr class="best" data-config="resilient">' in page


def test_the_impact_picture_has_a_point_per_trial_hollow_when_held():
    results, series = _three_trials(resilient=[{}, {}, {(11, 12): 0.5}], naive=[{(11, 20): 0.5}] * 3)
    page = report.render(results, series)
    figure = page[page.index("<figure id='impact'>") :]
    figure = figure[: figure.index("</figure>")]
    assert figure.count('class="impact') == 6 and figure.count('class="impact held"') == 2
    assert figure.count('fill="none"') == 2  # the two held trials are hollow
    assert 'class="allowance"' in figure  # the 1x line: the SLO's allowance


def test_percentage_axes_end_at_100_percent():
    results, series = _three_trials(naive=[{(11, 20): 1.0}] * 3, resilient=[{}] * 3)
    page = report.render(results, series)
    assert ">100%</text>" in page and ">108%</text>" not in page


def test_the_meta_line_shows_a_seed_only_when_known():
    results, series = _tradeoff()
    results["seed"] = None
    page = report.render(results, series)
    assert "seed None" not in page and "seed ?" not in page
    results["seed"] = 42
    assert "seed 42 · " in report.render(results, series)


def _chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
         f"--user-data-dir={tmp_path / 'profile'}", *args],
        check=True, timeout=90, capture_output=True, text=True,
    )  # fmt: skip


MEASURE = (
    "<script>document.body.setAttribute('data-scroll-width', document.documentElement.scrollWidth);"
    "document.body.setAttribute('data-window-width', window.innerWidth);</script></body>"
)


GUARD = {"name": "organic-errors", "kind": "error_rate", "tripped_at_s": 13.0, "value": 0.5, "limit": 0.2,
         "text": "organic error rate 50.0% > 20% for 3 s (the SLO's traffic, over the last 3 one-second samples)",
         "actions": {"load": "no longer tags calls; cancelled 12 tagged calls in flight",
                     "services": "emergency stop sent to gateway-0, account-0, ledger-0, ledger-1, ledger-2 "
                                 "(SIGUSR1; injection off for the life of each process)"}}  # fmt: skip


def _guarded(results: dict, name: str) -> dict:
    """`results` with `name`'s first trial stopped by a guard and its later trials skipped, as a run writes it."""
    results["configs"][name]["trials"][0]["guard"] = GUARD
    results["configs"][name]["summary"]["skipped_trials"] = 2
    results["notes"] = [*results.get("notes", []), f"{name}: trials 2, 3 skipped after a guard stopped an earlier "
                        "one (guard.after_trip: skip)"]  # fmt: skip
    return results


class _Outline(HTMLParser):
    """The page's h2 headings and tables in document order, and each table's enclosing div classes."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[tuple[str, str]] = []
        self.divs: list[str] = []
        self.boxed: dict[str, str] = {}
        self._h2 = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "div":
            self.divs.append(a.get("class") or "")
        elif tag == "table":
            self.order.append(("table", a.get("id") or ""))
            self.boxed[a.get("id") or ""] = self.divs[-1] if self.divs else ""
        elif tag == "h2":
            self._h2 = True
            self.order.append(("h2", ""))

    def handle_endtag(self, tag):
        if tag == "div" and self.divs:
            self.divs.pop()
        elif tag == "h2":
            self._h2 = False

    def handle_data(self, data):
        if self._h2:
            self.order[-1] = ("h2", self.order[-1][1] + data)


def test_each_heading_is_followed_by_its_own_table_and_every_table_scrolls_in_its_own_box():
    results, series = _three_trials(naive=[{(11, 20): 0.5}] * 3, resilient=[{}] * 3)
    page = report.render(_guarded(results, "naive"), series)
    outline = _Outline()
    outline.feed(page)
    heads = [i for i, (kind, _) in enumerate(outline.order) if kind == "h2"]
    after = {outline.order[i][1]: outline.order[i + 1] if i + 1 < len(outline.order) else None for i in heads}
    assert after["Safeguards"] == ("table", "guard-table")
    assert after["Per hop"] == ("table", "hop-table")
    titles = [outline.order[i][1] for i in heads]
    assert titles.index("Safeguards") < titles.index("Over time") < titles.index("Per hop")
    # every table sits in a box that scrolls sideways, so a wide one never widens the page
    assert outline.boxed and all(cls == "wide" for cls in outline.boxed.values()), outline.boxed
    assert re.search(r"\.wide \{[^}]*overflow-x: auto", page)
    # the guard table's long text wraps inside its cells
    assert "id='guard-table' class='text'" in page
    assert re.search(r"table\.text td \{[^}]*white-space: normal", page)


def test_the_runs_notes_are_shown_once_as_a_list():
    from harness.drills.analysis import landing

    results, series = _three_trials(naive=[{(11, 20): 0.5}] * 3, resilient=[{}] * 3)
    for t in results["configs"]["naive"]["trials"]:  # what the demo's trials say: a hit note on each
        t["hits"] = {"note": "38 of 40 predicted hits marked; the rest were shed or expired", "as_planned": True}
    results["configs"]["resilient"]["trials"][0]["hits"] = {"note": "0 of 40 predicted hits landed",
                                                            "as_planned": False}  # fmt: skip
    lines = landing.summary(results["configs"])
    assert len(lines) == 2
    results["notes"] = [*lines, "the run stopped at naive trial 2: cannot reach Prometheus"]  # as assemble writes
    page = report.render(results, series)
    for line in lines:  # under the table, once, one item each
        assert page.count(html.escape(line)) == 1
        assert f"<li><strong>{html.escape(line)}</strong></li>" in page
    foot = page[page.index('<ul class="notes" id="notes">') :]
    assert foot.count("<li>") == 1 and "<li>the run stopped at naive trial 2: cannot reach Prometheus</li>" in foot
    # no notes but the hit lines: no foot at all
    results["notes"] = list(lines)
    assert 'id="notes"' not in report.render(results, series)


def test_the_p99_chart_says_why_it_can_read_past_the_deadline():
    results, series = _three_trials(naive=[{(11, 20): 0.5}] * 3, resilient=[{}] * 3)
    results["plan_spec"] = {"traffic": {"timeout_s": 2.0}}
    caption = _p99_caption(report.render(results, series))
    assert "histogram_quantile" in caption and "the edge's 2-s deadline" in caption
    assert "(2, 3] s bucket" in caption and "2.9 s when a tenth of the calls end there" in caption
    # without a known deadline: how the estimate is made, nothing about a deadline
    results["plan_spec"] = None
    caption = _p99_caption(report.render(results, series))
    assert "histogram_quantile" in caption and "deadline" not in caption


def _p99_caption(page: str) -> str:
    before = page[: page.index('data-chart="p99"')]
    figure = before[before.rindex("<figure>") :]
    return html.unescape(figure[figure.index("<figcaption>") : figure.index("</figcaption>")])


def test_the_p99_estimate_past_the_deadline_is_what_the_note_says():
    # the note's number is the estimator's own: a tenth of the calls at 2.001 s (bucket (2, 3]), the rest fast
    from harness.drills.analysis.slo import quantile_from_buckets

    buckets = [(0.1, 90.0), (1.0, 90.0), (2.0, 90.0), (3.0, 100.0), (float("inf"), 100.0)]
    assert quantile_from_buckets(0.99, buckets) == pytest.approx(2.9)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed")
def test_the_mttr_table_fits_a_1280_px_window_without_scrolling(tmp_path):
    # the widest tables a run gives: three trials each, every cell a median with its (min–max), a never
    # restored trial, long configuration names, offered-load and read-back notes, a guard's trip with what it
    # saw and what the run stopped, and the skipped trials after it
    results, series = _every_trial(
        **{
            "resilient-p2c-long-timeout": [{(11, 13): 0.9}, {(11, 40): 0.9}, {(11, 14): 0.9}],
            "naive-long-timeout": [{(11, 20): 0.1}, {(11, 20): 0.1, (30, 31): 0.5}, {(11, 21): 0.1}],
            "budget": [{}, {(11, 12): 0.3}, {(26, 27): 0.4}],
        }
    )
    results = _guarded(results, "naive-long-timeout")
    report.write_outputs(tmp_path, results, series)
    page = (tmp_path / "report.html").read_text()
    measured = tmp_path / "measured.html"
    measured.write_text(page.replace("</body>", MEASURE))  # the report itself has no script
    dom = _chromium(tmp_path, "--window-size=1280,2000", "--dump-dom", measured.as_uri()).stdout
    scroll = int(re.search(r'data-scroll-width="(\d+)"', dom).group(1))
    window = int(re.search(r'data-window-width="(\d+)"', dom).group(1))
    assert window == 1280
    assert scroll <= window, f"the page scrolls sideways: {scroll} px wide in a {window}-px window"


def test_a_read_back_time_shows_its_plus_minus_and_where_it_came_from(capsys, tmp_path):
    from harness.drills.cli.run import print_summary
    from harness.drills.report import cells
    from tests.drills.synth import read_back

    runs = {"naive": [read_back(make_series(rates({(11, 25): 0.5}), config="naive"), 1.0) for _ in range(3)]}
    results = assemble(runs, a.Slo(), ["gateway", "ledger"], plan_name="prom").model_dump()
    naive = results["configs"]["naive"]
    assert cells.mttr_text(naive) == "15.0 s ± 2.0 s (breached 3/3)"  # both edges ± 1 s
    assert cells.spread_text(naive, "ttd_s") == "1.0 s ± 1.0 s"  # fault-on exact, the first bad sample ± 1
    page = report.render(results, {"naive": runs["naive"][0]})
    assert "15.0 s ± 2.0 s" in page and 'id="readback"' in page
    assert "Times read from Prometheus at scrapes up to 1 s apart" in page
    print_summary(results, tmp_path)
    printed = capsys.readouterr().out
    assert "± 2.0 s" in printed and "Times read from Prometheus at scrapes up to 1 s apart" in printed
    exact = assemble({"naive": [make_series(rates({(11, 25): 0.5}))] * 3}, a.Slo(), None).model_dump()
    page = report.render(exact, {"naive": make_series(rates({(11, 25): 0.5}))})
    assert "±" not in page and 'id="readback"' not in page
