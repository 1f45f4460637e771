"""Audit log (contracts §8): one JSON line per injected fault, per refused directive or token, and per call a
server's in-flight limit refused (`call_refused`, always rate-limited: harness.interceptors._overload).

Lines go to the `drill.audit` logger (INFO for hits, WARNING for refusals), so
deployments route them like any other log. Values are escaped by json, each
value is truncated and the line is bounded: an over-long line keeps its key
fields (event, request id, tenant, reason, ...) and says `"truncated":true`. A
failure to log never reaches the call (logging errors are swallowed here, not in
the interceptor).

Refusals from callers the server cannot authenticate (no secret, or a bad token)
are rate-limited per key (`RefusalLimiter`): anyone can send them, so they must
not flood the log. Suppressed lines are counted in the next line that gets out,
and in `drill_audit_dropped_total{reason="rate_limited"}`.

Where the lines are written: by default in the calling thread (the logger's own
handlers). `start_writer()` (which `drill serve` calls) hands them instead to one
writer thread through a bounded queue, so a slow disk or log pipe never blocks a
call or the event loop: when the queue is full the line is dropped and counted in
`drill_audit_dropped_total{reason="queue_full"}`, and `drill_audit_queue_lines`
says how many wait. Hits counted = lines written + dropped + waiting, always.
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
import threading
import time

from harness.core import metrics as m

logger = logging.getLogger("drill.audit")
_dropped = m.ChildCache(m.AUDIT_DROPPED)
#: Lines the writer thread may hold (each is at most MAX_LINE characters, ~300 typically).
DEFAULT_QUEUE_LINES = 4096

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
    """Log one audit record (through the writer's queue when one is started); never raises."""
    try:
        if logger.isEnabledFor(level):
            line = audit_line(event, **fields)
            writer = _writer
            if writer is None:
                logger.log(level, line)
            elif not writer.put(level, line):
                _dropped(event, "queue_full").inc()
    except Exception:  # noqa: BLE001 - logging must never fail a call
        pass


class AuditWriter:
    """One daemon thread writing audit lines to the `drill.audit` logger from a bounded queue.

    `put` never blocks: it returns False when `max_lines` lines already wait (the caller
    counts the drop). `flush` waits until every queued line has been written.
    """

    def __init__(self, max_lines: int = DEFAULT_QUEUE_LINES) -> None:
        if max_lines < 1:
            raise ValueError("max_lines must be >= 1")
        self.max_lines = max_lines
        self._lines: collections.deque[tuple[int, str]] = collections.deque()
        self._lock = threading.Lock()
        self._has_lines = threading.Condition(self._lock)
        self._drained = threading.Condition(self._lock)
        self._writing = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="drill-audit-writer", daemon=True)
        self._thread.start()

    def __len__(self) -> int:
        return len(self._lines)

    def put(self, level: int, line: str) -> bool:
        with self._lock:
            if len(self._lines) >= self.max_lines:
                return False
            self._lines.append((level, line))
            self._has_lines.notify()
        return True

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._lines:
                    self._writing = False
                    self._drained.notify_all()
                    if self._closed:
                        return
                    self._has_lines.wait()
                level, line = self._lines.popleft()
                self._writing = True
            try:
                logger.log(level, line)
            except Exception:  # noqa: BLE001 - a broken handler must not end the writer
                pass

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until every queued line is written; False if `timeout_s` passed first."""
        end = time.monotonic() + timeout_s
        with self._lock:
            while self._lines or self._writing:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._drained.wait(left)
        return True

    def close(self, timeout_s: float = 5.0) -> bool:
        """Write what is queued, then end the thread; False if it did not end within `timeout_s`."""
        with self._lock:
            self._closed = True
            self._has_lines.notify()
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


_writer: AuditWriter | None = None
_writer_lock = threading.Lock()


def start_writer(max_lines: int = DEFAULT_QUEUE_LINES) -> AuditWriter:
    """Write audit lines from a writer thread with a bounded queue from now on (idempotent: the first wins)."""
    global _writer
    with _writer_lock:
        if _writer is None:
            writer = AuditWriter(max_lines)
            m.AUDIT_QUEUE.set_function(writer.__len__)
            atexit.register(writer.flush, 2.0)
            _writer = writer
        return _writer


def stop_writer(timeout_s: float = 5.0) -> None:
    """Write what the writer holds and go back to writing in the calling thread."""
    global _writer
    with _writer_lock:
        writer, _writer = _writer, None
        m.AUDIT_QUEUE.set_function(lambda: 0)
    if writer is not None:
        atexit.unregister(writer.flush)
        writer.close(timeout_s)


def flush(timeout_s: float = 5.0) -> bool:
    """Wait until the writer (if any) has written every queued line."""
    writer = _writer
    return True if writer is None else writer.flush(timeout_s)


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
                _dropped(key[0] if isinstance(key, tuple) and key else "refusal", "rate_limited").inc()
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
            record = json.loads(line[line.find("{") :])
            if record.get("event") != "fault_hit":
                continue
            t = float(record.get("time", 0.0))
            if (since is not None and t < since) or (until is not None and t > until):
                continue
            ids.add(str(record["request_id"]))
        except (ValueError, KeyError, TypeError):
            continue
    return ids
