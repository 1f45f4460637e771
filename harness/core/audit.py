"""Audit log (DESIGN §8): one JSON line per injected fault and per refused directive or token.

Lines go to the `drill.audit` logger (INFO for hits, WARNING for refusals), so
deployments route them like any other log. Values are escaped by json, each
value is truncated and the line is bounded: an over-long line keeps its key
fields (event, request id, tenant, reason, ...) and says `"truncated":true`. A
failure to log never reaches the call (logging errors are swallowed here, not in
the interceptor).

Refusals from callers the server cannot authenticate (no secret, or a bad token)
are rate-limited per key (`RefusalLimiter`): anyone can send them, so they must
not flood the log. Suppressed lines are counted in the next line that gets out.
"""

from __future__ import annotations

import json
import logging
import threading
import time

logger = logging.getLogger("drill.audit")

MAX_FIELD = 128
MAX_LINE = 2048
#: Fields an over-long line keeps (cut shorter if need be), in this order.
KEY_FIELDS = ("request_id", "tenant", "reason", "detail", "service", "method", "mode", "trace_id", "suppressed")
_KEY_FIELD_SHORT = 64


def _clip(value: object, limit: int = MAX_FIELD) -> object:
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + "…"
    return value


def _dump(record: dict) -> str:
    return json.dumps(record, ensure_ascii=True, separators=(",", ":"), default=str)


def audit_line(event: str, **fields: object) -> str:
    """The JSON text of one audit record (bounded, escaped, key fields kept when cut)."""
    record = {"time": round(time.time(), 3), "event": _clip(event)}
    record.update({k: _clip(v) for k, v in fields.items()})
    line = _dump(record)
    if len(line) <= MAX_LINE:
        return line
    for limit in (MAX_FIELD, _KEY_FIELD_SHORT, 16):
        short = {"time": record["time"], "event": _clip(event, limit), "truncated": True}
        short.update({k: _clip(fields[k], limit) for k in KEY_FIELDS if k in fields})
        line = _dump(short)
        if len(line) <= MAX_LINE:
            return line
    return _dump({"time": record["time"], "event": "audit", "truncated": True})  # pragma: no cover


def emit(event: str, level: int = logging.INFO, **fields: object) -> None:
    """Log one audit record; never raises."""
    try:
        if logger.isEnabledFor(level):
            logger.log(level, audit_line(event, **fields))
    except Exception:  # noqa: BLE001 - logging must never fail a call
        pass


class RefusalLimiter:
    """At most `per_interval` lines per key per `interval_s`; counts what it holds back.

    `admit(key)` returns None to suppress, else how many lines of that key were
    suppressed since the last one let through (0 usually). Keys are bounded.
    """

    def __init__(self, per_interval: int = 5, interval_s: float = 10.0, max_keys: int = 1024) -> None:
        self.per_interval = per_interval
        self.interval_s = interval_s
        self.max_keys = max_keys
        self._state: dict[object, list] = {}  # key -> [window start, lines in window, suppressed]
        self._lock = threading.Lock()

    def admit(self, key: object, now: float | None = None) -> int | None:
        t = time.monotonic() if now is None else now
        with self._lock:
            st = self._state.get(key)
            if st is None:
                if len(self._state) >= self.max_keys:
                    key = "overflow"
                    st = self._state.setdefault(key, [t, 0, 0])
                else:
                    st = self._state[key] = [t, 0, 0]
            if t - st[0] >= self.interval_s:
                st[0], st[1] = t, 0
            if st[1] >= self.per_interval:
                st[2] += 1
                return None
            st[1] += 1
            suppressed, st[2] = st[2], 0
            return suppressed


def hit_ids(lines, since: float | None = None, until: float | None = None) -> set[str]:
    """Request ids of the `fault_hit` records among log lines (any prefix before the JSON is skipped),
    optionally only those whose `time` lies in [since, until]: what a service says it injected."""
    ids: set[str] = set()
    for line in lines:
        if '"fault_hit"' not in line:
            continue
        try:
            record = json.loads(line[line.find("{"):])
            if record.get("event") != "fault_hit":
                continue
            t = float(record.get("time", 0.0))
            if (since is not None and t < since) or (until is not None and t > until):
                continue
            ids.add(str(record["request_id"]))
        except (ValueError, KeyError, TypeError):
            continue
    return ids
