"""Stage 6, the report: results.json and the series drawn, nothing computed that the analysis did not.

Owns: report.html (`page.render`; `page.write_outputs` writes results.json, series.json and report.html),
its pictures as inline SVG (`charts`), the wording of each number in a cell, shared with the terminal's
table (`cells`), and the page's HTML and CSS (`_template`).

May import: `harness.drills.analysis`, `harness.drills.readings`, `harness.drills.plan`.
"""
