"""The reach probe's read of a hop from Prometheus (`reach.read_selector`): the drill calls it returns are those of
the very scrape whose time it returns, never of the scrape before.

The probe takes a hop's count only from a scrape that started after its calls; a count paired with a later scrape's
time than its own reads as "the hop counted none" and fails the run (exit 4), which a full test run met twice. Here
a real Prometheus scrapes a target every 50 ms whose counter is the number of times it has been scraped (each scrape
a new value), while the read is asked as fast as it answers: afterwards, every pair read must be a sample Prometheus
holds, the value at that time. Read with two queries (count, then time), a scrape landing between them paired the
new time with the old count: over ~1,000 reads, each a few ms apart from a scrape every 50 ms, that happens dozens
of times.

Every `FAIL_EVERY`-th scrape fails (HTTP 500), as a scrape of a busy service times out (CI met it: 76 of 4,000
reads): Prometheus then marks the counter stale and gives `up` the failed scrape's time, so a read there paired
that time with no count at all (0). Such a read must say that a target is down and pair no time.
"""

from __future__ import annotations

import http.server
import threading
import time

from harness.drills.trials.reach import CALLS, read_selector
from harness.procs.prometheus import LocalPrometheus

SERIES = f'{CALLS}{{grpc_method="snap.v1.S/M",grpc_status="OK",traffic="drill",fault_mode="none"}}'
READS_S = 4.0  # seconds of reads: ~80 scrapes
MAX_READS = 4000
FAIL_EVERY = 5  # 1 scrape in 5 fails: ~16 failed scrapes in READS_S, each held ~50 ms, a fifth of the reads


class _Scraped(http.server.BaseHTTPRequestHandler):
    scrapes = 0
    lock = threading.Lock()

    def do_GET(self) -> None:  # noqa: N802
        with self.lock:
            type(self).scrapes += 1
            failed = type(self).scrapes % FAIL_EVERY == 0
            body = f"# TYPE {CALLS[:-6]} counter\n{SERIES} {type(self).scrapes}\n".encode()
        self.send_response(500 if failed else 200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except BrokenPipeError:  # Prometheus gave up on a slow scrape (its timeout is the 50-ms interval)
            pass

    def log_message(self, *args) -> None:
        pass


def test_a_read_pairs_each_count_with_the_scrape_it_came_from(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Scraped)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    prom = LocalPrometheus(tmp_path / "prom", scrape_interval="50ms").start()
    try:
        prom.set_targets([("snap", f"http://127.0.0.1:{server.server_address[1]}/metrics")])
        selector = '{service="snap"}'
        deadline = time.monotonic() + 30
        while read_selector(prom.url, selector).scraped is None:  # scraped once
            assert time.monotonic() < deadline, prom.log()
            time.sleep(0.05)
        reads = []
        end = time.monotonic() + READS_S
        while time.monotonic() < end and len(reads) < MAX_READS:
            reads.append(read_selector(prom.url, selector))
        (held,) = prom.query(f"{CALLS}{selector}[5m]")
        at = {round(float(t), 3): float(v) for t, v in held["values"]}
        (ups,) = prom.query(f"up{selector}[5m]")
        failed = {round(float(t), 3) for t, v in ups["values"] if v == "0"}
    finally:
        prom.stop()
        server.shutdown()
    assert len(at) > 20 and len(reads) > 100, (len(at), len(reads))  # many scrapes, many reads between them
    down = [r for r in reads if r.down]
    assert failed and down, (len(failed), len(down))  # failed scrapes, and reads between one and the next
    assert all(r.scraped is None and r.down == 1 for r in down), down[:5]  # no time paired with a stale count
    paired = [r for r in reads if not r.down]
    wrong = [(r.calls, r.scraped, at.get(round(r.scraped, 3))) for r in paired
             if at.get(round(r.scraped, 3)) != r.calls]  # fmt: skip
    assert not wrong, f"{len(wrong)} of {len(paired)} reads paired a count with another scrape's time: {wrong[:5]}"
