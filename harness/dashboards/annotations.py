"""Post drill annotations to Grafana when a Grafana URL is configured.

The drill runner calls this at each phase change (and for the whole fault
window as a region). Annotations are organisation-wide and tagged `drill`,
the plan and the phase; both dashboards show them through a tag query.
Posting is best effort: a Grafana that is down never fails a drill.

    from harness.dashboards.annotations import DrillAnnotator
    ann = DrillAnnotator.from_env()            # None unless DRILL_GRAFANA_URL is set
    if ann:
        ann.event("fault on", plan="storm", phase="fault")
        ann.region(start_s, end_s, "fault", plan="storm", phase="fault")
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from harness.core.errors import need_extra
from harness.dashboards.names import DRILL_TAG

log = logging.getLogger("drill.annotations")

ENV_URL = "DRILL_GRAFANA_URL"
ENV_TOKEN = "DRILL_GRAFANA_TOKEN"
ENV_USER = "DRILL_GRAFANA_USER"
ENV_PASSWORD = "DRILL_GRAFANA_PASSWORD"


def grafana_api(url: str, *, token: str | None = None, user: str | None = None, password: str | None = None):
    """A grafana-client `GrafanaApi` for `url` with a token or basic auth (credentials may sit in the URL)."""
    GrafanaApi = need_extra("grafana_client", "dashboards", "Grafana (--grafana, dashboards push)").GrafanaApi  # noqa: N806

    if token:
        return GrafanaApi.from_url(url, credential=token)
    if user is not None:
        return GrafanaApi.from_url(url, credential=(user, password or ""))
    return GrafanaApi.from_url(url)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _unreachable(exc: BaseException) -> bool:
    """Nothing listens there (a refused connection, an unknown host): not a slow answer or an HTTP error from a
    Grafana that is up, which may well answer the next post."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        name = type(exc).__name__
        text = str(exc)
        if isinstance(exc, ConnectionRefusedError) or name in ("NameResolutionError", "NewConnectionError"):
            return "timed out" not in text.lower()
        if "Connection refused" in text or "Name or service not known" in text:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class DrillAnnotator:
    """Posts drill events to Grafana. Every method swallows and logs errors."""

    def __init__(self, api: Any, *, dashboard_uid: str | None = None, extra_tags: tuple[str, ...] = ()) -> None:
        self.api = api
        self.dashboard_uid = dashboard_uid
        self.extra_tags = extra_tags
        #: after the first post that could not reach Grafana, the rest are skipped (one warning, not dozens)
        self.unreachable = False

    @classmethod
    def from_env(cls, **kwargs: Any) -> DrillAnnotator | None:
        """From DRILL_GRAFANA_URL (+ _TOKEN or _USER/_PASSWORD); None when no URL is configured."""
        url = os.environ.get(ENV_URL)
        if not url:
            return None
        return cls.from_url(
            url,
            token=os.environ.get(ENV_TOKEN),
            user=os.environ.get(ENV_USER),
            password=os.environ.get(ENV_PASSWORD),
            **kwargs,
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        token: str | None = None,
        user: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> DrillAnnotator:
        return cls(grafana_api(url, token=token, user=user, password=password), **kwargs)

    def _tags(self, plan: str | None, phase: str | None, tags: tuple[str, ...]) -> list[str]:
        out = [DRILL_TAG, *self.extra_tags, *tags]
        if plan:
            out.append(f"plan:{plan}")
        if phase:
            out.append(f"phase:{phase}")
        return out

    def _post(self, text: str, start_s: float, end_s: float | None, tags: list[str]) -> int | None:
        if self.unreachable:
            return None
        post = lambda: self.api.annotations.add_annotation(  # noqa: E731
            dashboard_uid=self.dashboard_uid,
            time_from=int(start_s * 1000),
            time_to=int(end_s * 1000) if end_s is not None else None,
            tags=tags,
            text=text,
        )
        try:
            try:
                res = post()
            except Exception as exc:  # noqa: BLE001
                if "timed out" not in _first_line(exc).lower() and "timeout" not in type(exc).__name__.lower():
                    raise
                res = post()  # once more after a slow answer (a busy Grafana, or a busy box): a late mark is a mark
            return (res or {}).get("id")
        except Exception as exc:  # noqa: BLE001 - annotations are best effort
            if _unreachable(exc):
                self.unreachable = True
                log.warning("Grafana is not reachable (%s): no more annotations in this run", _first_line(exc))
            else:
                log.warning("could not post Grafana annotation %r: %s", text, _first_line(exc))
            return None

    def event(
        self,
        text: str,
        *,
        plan: str | None = None,
        phase: str | None = None,
        at_s: float | None = None,
        tags: tuple[str, ...] = (),
    ) -> int | None:
        """A point annotation (phase change, fault on/off). Returns the annotation id, or None on failure."""
        return self._post(text, time.time() if at_s is None else at_s, None, self._tags(plan, phase, tags))

    def region(
        self,
        start_s: float,
        end_s: float,
        text: str,
        *,
        plan: str | None = None,
        phase: str | None = None,
        tags: tuple[str, ...] = (),
    ) -> int | None:
        """A region annotation (a whole phase), times in epoch seconds."""
        return self._post(text, start_s, end_s, self._tags(plan, phase, tags))
