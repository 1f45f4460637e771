"""What one toxic touched on a link, as the link itself saw it: each connection it acted on, when it began there and
when that connection closed (seconds after the toxic was set, on the link's own clock), and the streams opened on it
before and since, organic and drill apart.

Kept from when the toxic is set until it is removed (an update keeps it), and read through the admin API's extension
`GET /proxies/{name}/toxics/{toxic}/connections`, so a runner driving a link that runs elsewhere (a compose service,
a sidecar) counts what it counts on a link it starts itself (harness/drills/stack/links.py). At most MAX_RECORDS
connections are recorded per toxic (`left_off` counts the rest), so a long-lived toxic on a churning link stays
bounded.
"""

from __future__ import annotations

from typing import Any

#: Connections recorded per toxic at most
MAX_RECORDS = 10_000


def _streams(conn: Any) -> dict[str, int]:
    return {"organic": conn.h2.organic_count, "drill": conn.h2.drill_count}


class ToxicLedger:
    """One toxic's record of the connections it acted on (`conn` is a `harness.link.relay.Connection`)."""

    def __init__(self, toxic: str, now: float) -> None:
        self.toxic = toxic
        self.set_at = now
        #: True while the toxic is being set: the connections it begins on then were open at its start
        self.setting = True
        self.records: dict[int, dict[str, Any]] = {}
        self.open: dict[int, Any] = {}
        self.left_off = 0

    def began(self, conn: Any, now: float) -> None:
        """The toxic began to act on `conn` (once per connection: a later begin, after an update, is the same)."""
        if conn.index in self.records:
            return
        if len(self.records) >= MAX_RECORDS:
            self.left_off += 1
            return
        self.records[conn.index] = {
            "connection": conn.index, "began_s": round(now - self.set_at, 6), "open_at_start": self.setting,
            "streams_before": _streams(conn), "streams": None, "closed_s": None,
        }  # fmt: skip
        self.open[conn.index] = conn

    def closed(self, conn: Any, now: float) -> None:
        """`conn` closed (both its sides are gone)."""
        if self.open.pop(conn.index, None) is not None:
            record = self.records[conn.index]
            record["closed_s"], record["streams"] = round(now - self.set_at, 6), _streams(conn)

    def to_json(self, now: float) -> dict[str, Any]:
        """`{toxic, age_s, connections: [{connection, began_s, open_at_start, streams_before, streams, closed_s}],
        left_off}`: `streams` the counts now on an open connection, at its close on a closed one."""
        out = []
        for index, record in self.records.items():
            conn = self.open.get(index)
            out.append(record if conn is None else {**record, "streams": _streams(conn)})
        return {"toxic": self.toxic, "age_s": round(now - self.set_at, 6), "connections": out,
                "left_off": self.left_off}  # fmt: skip
