"""Drills: the demo topology, the load, the per-second scraper, MTTR analysis and the comparison report.

`drill demo`, `drill run PLAN.yaml` and `drill analyze` live here (cli_*.py);
the analysis (analysis.py) is pure and works the same on series scraped by the
runner and on series read back from a Prometheus.
"""
