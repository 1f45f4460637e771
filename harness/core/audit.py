"""Audit log (DESIGN §8): one JSON line per injected fault and per refused directive.

Lines go to the `drill.audit` logger (INFO for hits, WARNING for refusals), so
deployments route them like any other log. Values are escaped by json, each
value is truncated and the line is bounded; a failure to log never reaches the
call (logging errors are swallowed here, not in the interceptor).
"""

from __future__ import annotations

import json
import logging
import time

logger = logging.getLogger("drill.audit")

MAX_FIELD = 128
MAX_LINE = 2048


def _clip(value: object) -> object:
    if isinstance(value, str) and len(value) > MAX_FIELD:
        return value[:MAX_FIELD] + "…"
    return value


def audit_line(event: str, **fields: object) -> str:
    """The JSON text of one audit record (bounded, escaped)."""
    record = {"time": round(time.time(), 3), "event": event}
    record.update({k: _clip(v) for k, v in fields.items()})
    line = json.dumps(record, ensure_ascii=True, separators=(",", ":"), default=str)
    if len(line) > MAX_LINE:
        line = json.dumps({"time": record["time"], "event": event, "truncated": True})
    return line


def emit(event: str, level: int = logging.INFO, **fields: object) -> None:
    """Log one audit record; never raises."""
    try:
        if logger.isEnabledFor(level):
            logger.log(level, audit_line(event, **fields))
    except Exception:  # noqa: BLE001 - logging must never fail a call
        pass
