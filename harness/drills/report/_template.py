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
  .verdict { font-size: 16px; padding: 12px 16px; background: #f2f4f7; border-left: 5px solid #8a93a3;
             margin: 12px 0 18px; }
  .verdict.good { background: #eef6ee; border-color: #2e8b57; }
  .verdict.tradeoff { background: #fdf5e6; border-color: #c98a1b; }
  .verdict.bad { background: #fbeeee; border-color: #b23b3b; }
  table { border-collapse: collapse; width: 100%; }
  /* a table wider than the page scrolls inside its own box; the page keeps to the window */
  .wide { max-width: 100%; overflow-x: auto; }
  table.text td { white-space: normal; overflow-wrap: anywhere; }
  table.text td, table.text th { text-align: left; }
  th, td { padding: 5px 6px; border-bottom: 1px solid #e2e5ea; text-align: right; vertical-align: top; }
  td { white-space: nowrap; }
  td small { color: #5b6475; white-space: normal; }
  td:first-child { white-space: normal; overflow-wrap: anywhere; min-width: 90px; }
  th { font-size: 12.5px; line-height: 1.25; vertical-align: bottom; }
  th:first-child, td:first-child { text-align: left; }
  th { background: #f4f6f9; font-weight: 600; }
  .pair { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 18px; margin-top: 14px;
          align-items: start; }
  tr.best td { background: #eef6ee; font-weight: 600; }
  td.null { color: #b23b3b; }
  .swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 6px;
            vertical-align: -1px; }
  .grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 18px; }
  figure { margin: 0; border: 1px solid #e2e5ea; border-radius: 6px; padding: 8px 10px 4px; }
  figcaption { font-weight: 600; margin-bottom: 4px; }
  .chart-note { font-weight: 400; color: #5b6475; font-size: 12px; line-height: 1.35; display: block; }
  svg text { font: 11px system-ui, sans-serif; fill: #5b6475; }
  .notes { color: #5b6475; font-size: 13px; }
  code { background: #f4f6f9; padding: 1px 4px; border-radius: 3px; }
</style>
</head>
<body>
<h1>Drill <code>$plan</code>: how each configuration recovers, and what users felt</h1>
<div class="meta">${seed}fault <code>$directive</code> on <code>$target</code> · SLO $slo · $when</div>
<div class="verdict $verdict_class" id="verdict">$verdict</div>
<h2>MTTR comparison</h2>
<div class="wide"><table id="mttr-table">
<thead><tr><th>configuration</th><th>trials</th><th>MTTR (median)</th><th>post-fault breach</th>
<th>outside SLO</th><th>budget burn</th><th>TTD</th><th>TTM</th><th>TTR</th><th>amplifi&shy;cation</th>
<th>success rate</th><th>attempts /success</th><th>blast radius</th><th>error rate (fault)</th><th>requests</th>
</tr></thead>
<tbody>
$rows
</tbody>
</table></div>
$readback
<div class="pair">
$trials
</div>
<p class="notes">MTTR: first SLO breach → SLO restored for good, median over the trials that breached (min–max);
"never" = not restored before the run ended; "held" = the SLO held throughout (no MTTR). A breach that starts after
the fault and its grace is a post-fault breach: the trial did not hold (its MTTR is that breach's length). Outside
SLO: seconds outside the SLO from fault-on to the end, every breach counted; budget burn: bad calls (server faults,
and calls slower than the p99 bound when one is set) ÷ the SLO's allowance for the same calls, fault-on to the end
(1.00× = exactly the allowance); both median (min–max) over the valid trials. Rows in bold green are the verdict's
top: its winner (significantly better than every other configuration on recovery or budget burn and worse on
neither), or the configurations tied at the top (each better than every other, by the same rule, and not separated
from each other). TTD, TTR: median (min–max) over breached trials; the other columns: the median trial or the
median over trials. Amplification: deepest-hop attempts ÷ edge first attempts (what users sent, before retries),
over the fault window. Success rate: OK ÷ (all − CANCELLED) at the edge during the fault; attempts/success:
deepest-hop attempts per successful edge call. Blast radius: organic error rate during the fault. Times are
seconds; the shaded band is the fault window.</p>
$guards
<h2>Over time</h2>
<div class="grid" id="plots">
$plots
</div>
$hops
$notes
</body>
</html>
"""
)
