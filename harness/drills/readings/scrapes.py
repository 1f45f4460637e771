"""When a Prometheus reads its targets, in its own words: the durations of its config, read back over its API.

Three readers need them: the preflight, which waits for a target that has just started to appear in `up` (one
service-discovery refresh and one scrape: `discovery_s`) and for a target whose last scrape failed to be scraped
again (`scrape_wait_s`), the reach probe, which waits for a scrape after its calls (`scrape_wait_s`), and the live
view's hop rates, whose `irate` window must hold two scrapes of the slowest target (`scrape_interval_s`). All
ask `config()`, Prometheus' `/api/v1/status/config`, and fall back to Prometheus' own defaults where the config
says nothing.
"""

from __future__ import annotations

import re

from harness.procs.prometheus import api_get

#: Prometheus' defaults: dns_sd_configs' (and every polled discovery's) refresh_interval, the global scrape_interval
DEFAULT_REFRESH_S, DEFAULT_SCRAPE_S = 30.0, 60.0
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def seconds(text: str | None, default: float) -> float:
    """A Prometheus duration ("1m30s", "5s", "900ms") in seconds; `default` when absent or unreadable."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", str(text or ""))
    if not parts:
        return default
    return sum(float(n) * _UNITS[u] for n, u in parts)


def config(url: str, timeout_s: float) -> dict:
    """The config the Prometheus at `url` runs (parsed YAML); PrometheusError when it does not answer."""
    import yaml

    return yaml.safe_load(api_get(url, "status/config", (), timeout_s)["yaml"]) or {}


def scrape_interval_s(cfg: dict) -> float:
    """The longest scrape interval of any job (a job without its own takes the global one)."""
    default = seconds((cfg.get("global") or {}).get("scrape_interval"), DEFAULT_SCRAPE_S)
    jobs = cfg.get("scrape_configs") or []
    return max((seconds(job.get("scrape_interval"), default) for job in jobs), default=default)


def scrape_wait_s(url: str, timeout_s: float) -> float:
    """One scrape interval of the Prometheus at `url` (from its config) and a second for the scrape itself: how long
    until every target has been scraped again; Prometheus' default interval when its config cannot be read."""
    try:
        return scrape_interval_s(config(url, timeout_s)) + 1.0
    except Exception:  # noqa: BLE001 - an unreadable config: Prometheus' default interval
        return DEFAULT_SCRAPE_S + 1.0


def discovery_s(cfg: dict) -> float:
    """How long a target that has just started may take to appear in `up`: the longest polling refresh of its
    service discovery (file and Kubernetes discovery are notified, not polled) plus the longest scrape interval,
    plus a second for the scrape itself."""
    refresh = 0.0
    for job in cfg.get("scrape_configs") or []:
        for key, sds in job.items():
            if key.endswith("_sd_configs") and key not in ("file_sd_configs", "kubernetes_sd_configs"):
                for sd in sds or []:
                    refresh = max(refresh, seconds(sd.get("refresh_interval"), DEFAULT_REFRESH_S))
    return refresh + scrape_interval_s(cfg) + 1.0


def pending_targets(url: str, timeout_s: float) -> int:
    """How many targets Prometheus has discovered but not scraped once yet (health "unknown")."""
    active = api_get(url, "targets", [("state", "active")], timeout_s).get("activeTargets", [])
    return sum(1 for t in active if t.get("health") == "unknown")
