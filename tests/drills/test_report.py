"""report.html: table first, plots present, self-contained, renders in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import zlib

import pytest

from harness.drills import analysis as a
from harness.drills import report
from tests.drills.synth import make_series

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
    assert "<b>resilient</b> looks best" in page  # one trial each: inconclusive, but it names the best
    assert 'data-chart="trials"' in page and page.count('class="trial') == 2
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
