"""The runner's own /metrics server, which also relays each hop's /metrics at a path that outlives trials.

Why: every trial starts its services afresh on kernel-picked ports, and Prometheus 2.x hands newly discovered
targets to its scrape manager on a fixed 5-s tick, so a run that gave Prometheus the hops' own URLs waited
2–5 s per trial before its load could start (or lost those seconds from the TSDB). Prometheus is given
`RUNNER/hops/NAME` instead, with `instance="NAME"`: the same targets every trial of the same shape, scraped
every second throughout, so a new trial's hop is read within one scrape interval. The relay also counts what
it served since the last `set`, which tells the runner that *any* Prometheus (ours or the user's, through
`--prometheus-sd`) has read every hop of this trial — no PromQL needed.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterable
from wsgiref.simple_server import make_server

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import ThreadingWSGIServer, WSGIRequestHandler, make_wsgi_app

PREFIX = "/hops/"
#: One relayed read: within Prometheus' 1-s scrape timeout (900 ms), so a slow hop fails its scrape, not ours.
FETCH_TIMEOUT_S = 0.8
#: The most a hop's /metrics may weigh here (a demo hop is ~40 KB; a runaway one must not fill our memory).
MAX_BODY = 8 * 1024 * 1024


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's name
        pass  # one line per scrape on stderr would drown the live view


class Relay:
    """NAME → the hop's current metrics URL; what was served since the last `set`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._urls: dict[str, str] = {}
        self._served: set[str] = set()

    def set(self, urls: dict[str, str]) -> None:
        """This trial's hops (NAME → URL); a name not given answers 503 (its target is down) until set again."""
        with self._lock:
            self._urls = dict(urls)
            self._served = set()

    def wait_served(self, names: Iterable[str], timeout_s: float) -> bool:
        """True once every one of `names` has been relayed with a 200 since the last `set`."""
        want = set(names)
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                if want <= self._served:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def app(self, metrics_app):
        """A WSGI app: `/hops/NAME` relayed, everything else the registry's /metrics."""

        def app(environ, start_response):
            path = environ.get("PATH_INFO", "")
            if not path.startswith(PREFIX):
                return metrics_app(environ, start_response)
            name = path[len(PREFIX) :]
            with self._lock:
                url = self._urls.get(name)
            if url is None:
                start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
                return [f"no hop {name!r} in this trial\n".encode()]
            try:
                with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as r:
                    body = r.read(MAX_BODY + 1)
                    ctype = r.headers.get("Content-Type", "text/plain; version=0.0.4")
            except OSError as exc:  # URLError and timeouts included
                start_response("502 Bad Gateway", [("Content-Type", "text/plain")])
                return [f"{url}: {exc}\n".encode()]
            if len(body) > MAX_BODY:
                start_response("502 Bad Gateway", [("Content-Type", "text/plain")])
                return [f"{url}: over {MAX_BODY} bytes\n".encode()]
            with self._lock:
                if self._urls.get(name) == url:  # not a trial that ended while we read
                    self._served.add(name)
            start_response("200 OK", [("Content-Type", ctype), ("Content-Length", str(len(body)))])
            return [body]

        return app


def serve(registry: CollectorRegistry) -> tuple[str, Relay]:
    """Serve `registry` at /metrics and a `Relay` at /hops/ on 127.0.0.1 (a port of its own); daemon thread."""
    relay = Relay()
    httpd = make_server("127.0.0.1", 0, relay.app(make_wsgi_app(registry)), ThreadingWSGIServer,
                        handler_class=_QuietHandler)  # fmt: skip
    threading.Thread(target=httpd.serve_forever, daemon=True, name="drill-metrics").start()
    return f"http://127.0.0.1:{httpd.server_port}", relay


def relayed(base: str, endpoints: Iterable[tuple[str | None, str]]) -> tuple[dict[str, str], list[tuple]]:
    """Name each endpoint `SERVICE-K` (K-th of its service, as `drill serve --instance-id` names replicas):
    (NAME → its URL for the relay, the (service, relay URL, instance) targets for Prometheus)."""
    urls: dict[str, str] = {}
    targets: list[tuple] = []
    counts: dict[str, int] = {}
    for service, url in endpoints:
        svc = service or "loadgen"
        k = counts[svc] = counts.get(svc, -1) + 1
        name = f"{svc}-{k}"
        urls[name] = url
        targets.append((service, f"{base}{PREFIX}{name}", name))
    return urls, targets
