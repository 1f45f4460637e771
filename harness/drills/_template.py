"""The self-contained HTML page of report.html: CSS inline, no script, no fonts, no network.

Kept as a Python string so it ships inside the package whatever the package-data
settings are. Placeholders are `$name` (string.Template).
"""

from __future__ import annotations

from string import Template

PAGE = Template(
    """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>drill report: $plan</title>
<style>
  body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto;
         max-width: 1180px; color: #1d2330; background: #fff; padding: 0 16px; }
  h1 { font-size: 22px; margin: 0 0 4px; }
  h2 { font-size: 17px; margin: 28px 0 8px; }
  .meta { color: #5b6475; margin-bottom: 16px; }
  .verdict { font-size: 17px; padding: 12px 16px; background: #eef6ee; border-left: 5px solid #2e8b57;
             margin: 12px 0 18px; }
  .verdict.bad { background: #fbeeee; border-color: #b23b3b; }
  table { border-collapse: collapse; width: 100%; }
  th, td { padding: 6px 10px; border-bottom: 1px solid #e2e5ea; text-align: right; white-space: nowrap; }
  th:first-child, td:first-child { text-align: left; }
  th { background: #f4f6f9; font-weight: 600; }
  tr.best td { background: #eef6ee; font-weight: 600; }
  td.null { color: #b23b3b; }
  .swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 6px;
            vertical-align: -1px; }
  .grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 18px; }
  figure { margin: 0; border: 1px solid #e2e5ea; border-radius: 6px; padding: 8px 10px 4px; }
  figcaption { font-weight: 600; margin-bottom: 4px; }
  svg text { font: 11px system-ui, sans-serif; fill: #5b6475; }
  .notes { color: #5b6475; font-size: 13px; }
  code { background: #f4f6f9; padding: 1px 4px; border-radius: 3px; }
</style>
</head>
<body>
<h1>Drill <code>$plan</code>: which configuration recovers faster</h1>
<div class="meta">seed $seed · fault <code>$directive</code> on <code>$target</code> · SLO $slo · $when</div>
<div class="verdict $verdict_class" id="verdict">$verdict</div>
<h2>MTTR comparison</h2>
<table id="mttr-table">
<thead><tr><th>configuration</th><th>trials</th><th>MTTR (median)</th><th>TTD</th><th>TTM</th><th>TTR</th>
<th>amplification</th><th>success rate</th><th>attempts/success</th><th>blast radius</th><th>error rate (fault)</th>
<th>requests</th></tr></thead>
<tbody>
$rows
</tbody>
</table>
$trials
<p class="notes">MTTR: first SLO breach → SLO restored for good, median over the trials that breached (min–max);
"never" = not restored before the run ended; "held" = the SLO held throughout (no MTTR). TTD, TTR: median
(min–max) over breached trials; the other columns: the median trial or the median over trials.
Amplification: deepest-hop attempts ÷ edge first attempts (what users sent, before retries), over the fault
window. Success rate: OK ÷ (all − CANCELLED) at the edge during the fault; attempts/success: deepest-hop
attempts per successful edge call. Blast radius: organic error rate during the fault. Times are seconds; the
shaded band is the fault window.</p>
<h2>Over time</h2>
<div class="grid" id="plots">
$plots
</div>
<h2>Per hop</h2>
$hops
<p class="notes">$notes</p>
</body>
</html>
"""
)
