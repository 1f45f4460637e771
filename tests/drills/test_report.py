"""report.html: table first, plots present, self-contained, renders in headless Chromium, fits 1,280 px."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import zlib

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
        "configs": {n: a.analyze_run(s, SLO, hops=["gateway", "ledger"]) for n, s in series.items()},
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


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed")
def test_the_mttr_table_fits_a_1280_px_window_without_scrolling(tmp_path):
    # the widest table a run gives: three trials each, every cell a median with its (min–max), a never
    # restored trial, long configuration names, offered-load and read-back notes
    results, series = _every_trial(
        **{
            "resilient-p2c-long-timeout": [{(11, 13): 0.9}, {(11, 40): 0.9}, {(11, 14): 0.9}],
            "naive-long-timeout": [{(11, 20): 0.1}, {(11, 20): 0.1, (30, 31): 0.5}, {(11, 21): 0.1}],
            "budget": [{}, {(11, 12): 0.3}, {(26, 27): 0.4}],
        }
    )
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
