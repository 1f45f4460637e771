"""`drill link` as a process, as a user starts it: in front of the Go service (grpc-go, a second language), driven by
Toxiproxy's own Python client (`toxiproxy-python`) through the admin API; the one-way stop; the seeded draw replayed
by a second process; the one error style."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time

import grpc
import pytest
import requests
import toxiproxy
from toxiproxy.api import APIConsumer

from harness.core.environ import environ_now
from harness.link import draw
from tests.conftest import ROOT, drill_process
from tests.proxy.probe import SERVICE, build, descriptor_set, go_service, message_class


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("goprobe")
    return build(tmp), message_class(descriptor_set(tmp / "probe.pb")), tmp


@pytest.fixture(scope="module")
def service(probe):
    binary, _, tmp = probe
    with go_service(binary, tmp) as address:
        yield address


@contextlib.contextmanager
def drill_link(tmp, *args: str, env: dict | None = None):
    """`drill link ARGS --ready-file …` as a process; yields (process, its ready file's JSON)."""
    ready = tmp / f"link-{time.monotonic_ns()}.json"
    log = open(tmp / f"{ready.stem}.stderr", "w")  # what the link said, kept beside its ready file
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "link", *args, "--ready-file", str(ready)], cwd=ROOT,
                            env={**environ_now(), "PYTHONPATH": str(ROOT), **(env or {})}, stderr=log)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, (tmp / f"{ready.stem}.stderr").read_text()
            assert time.monotonic() < deadline, "drill link did not start in 60 s"
            time.sleep(0.02)
        yield proc, json.loads(ready.read_text())
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def echo(address: str, msg, body: bytes, timeout: float = 5, metadata=()) -> bytes:
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(SERVICE + "Echo", request_serializer=msg.SerializeToString,
                                   response_deserializer=msg.FromString)  # fmt: skip
        return call(msg(id="e", body=body), timeout=timeout, metadata=metadata).body


def test_calls_to_the_go_service_pass_exactly_every_kind(service, probe):
    _, msg, tmp = probe
    with drill_link(tmp, "--upstream", service, "--port", "0") as (_, ready):
        address = f"127.0.0.1:{ready['port']}"
        with grpc.insecure_channel(address) as channel:
            def method(name, kind):
                return getattr(channel, kind)(SERVICE + name, request_serializer=msg.SerializeToString,
                                              response_deserializer=msg.FromString)  # fmt: skip

            big = os.urandom(3 << 20)
            assert method("Echo", "unary_unary")(msg(id="u", body=big), timeout=10).body == big
            got = list(method("Repeat", "unary_stream")(msg(id="r", body=b"abc", count=5), timeout=10))
            assert [(m.body, m.count) for m in got] == [(b"abc", i) for i in range(1, 6)]
            assert method("Count", "stream_unary")(iter([msg(id="c")] * 7), timeout=10).count == 7
            parts = [msg(id="b", body=os.urandom(100 * i)) for i in range(1, 9)]
            replies = list(method("Chat", "stream_stream")(iter(parts), timeout=10))
            assert [m.body for m in replies[:-1]] == [p.body for p in parts] and replies[-1].mode == "after-end"


def test_toxiproxy_python_drives_the_link_unchanged(service, probe):
    _, msg, tmp = probe
    with drill_link(tmp, "--admin-port", "0") as (_, ready):
        server = toxiproxy.Toxiproxy()
        server.update_api_consumer("127.0.0.1", ready["admin_port"])
        assert server.running() and b"drill-link" in server.version()
        proxy = server.create(upstream=service, name="ledger-1")
        assert proxy.listen.startswith("127.0.0.1:") and not proxy.listen.endswith(":0")
        assert echo(proxy.listen, msg, b"hello", timeout=10) == b"hello"
        # told apart by outcomes, not by the wall clock (a 300-ms latency against a bound of 0.3 s plus a bare call
        # broke on a busy box's stall): the answer held 20 s, past a 1-s deadline, then (once the toxic is gone) an
        # answer within a 10-s deadline, which the toxic would have held twice as long
        proxy.add_toxic(type="latency", attributes={"latency": 20_000})
        assert proxy.get_toxic("latency_downstream").attributes == {"latency": 20_000, "jitter": 0}
        with pytest.raises(grpc.RpcError) as err:
            echo(proxy.listen, msg, b"slow", timeout=1)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # the answer waited on the way back
        proxy.destroy_toxic("latency_downstream")
        assert proxy.toxics() == {}
        with proxy.down():  # Toxiproxy's enabled: false: not listening, connections closed
            with pytest.raises(grpc.RpcError) as err:
                echo(proxy.listen, msg, b"x", timeout=2)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert echo(proxy.listen, msg, b"back", timeout=10) == b"back"
        made = server.populate([{"name": "ledger-2", "upstream": service, "listen": "127.0.0.1:0"}])
        assert [p.name for p in made] == ["ledger-2"] and set(server.proxies()) == {"ledger-1", "ledger-2"}
        proxy.add_toxic(type="timeout", attributes={"timeout": 0})
        assert server.reset() and server.get_proxy("ledger-1").enabled
        assert proxy.toxics() == {}
        server.destroy_all()
        assert server.proxies() == {}


def test_bad_input_gets_toxiproxys_status_and_changes_nothing(service, probe):
    _, _, tmp = probe
    with drill_link(tmp, "--admin-port", "0") as (_, ready):
        base = f"http://127.0.0.1:{ready['admin_port']}"
        APIConsumer.host, APIConsumer.port = "127.0.0.1", ready["admin_port"]
        server = toxiproxy.Toxiproxy()
        proxy = server.create(upstream=service, name="p")
        proxy.add_toxic(type="latency", name="lat", attributes={"latency": 5})
        before = requests.get(base + "/proxies").json()
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cases = [
            ("post", "/proxies", {"name": "p", "upstream": service}, 409, "proxy already exists"),
            ("post", "/proxies", {"upstream": service}, 400, "missing required field: name"),
            ("post", "/proxies", {"name": "q", "upstream": service,
                                  "listen": f"127.0.0.1:{taken.getsockname()[1]}"}, 500, "listen tcp"),
            ("post", "/proxies/p/toxics", {"type": "nope"}, 400, "invalid toxic type"),
            ("post", "/proxies/p/toxics", {"type": "latency", "name": "lat"}, 409, "toxic already exists"),
            ("post", "/proxies/p/toxics", {"type": "latency", "attributes": {"latency": -5}}, 400, "bad attribute"),
            ("post", "/proxies/p/toxics", {"type": "latency", "stream": "both"}, 400, "stream was invalid"),
            ("post", "/proxies/p/toxics/lat", {"attributes": {"jitter": "lots"}}, 400, "bad attribute jitter"),
            ("post", "/proxies/nope/toxics", {"type": "latency"}, 404, "proxy not found"),
            ("delete", "/proxies/p/toxics/nope", None, 404, "toxic not found"),
            ("patch", "/proxies/p", {"listen": f"127.0.0.1:{taken.getsockname()[1]}"}, 500, "listen tcp"),
            ("patch", "/proxies/p", {"enabled": "no"}, 400, "enabled must be true or false"),
        ]  # fmt: skip
        for method, path, body, status, words in cases:
            reply = getattr(requests, method)(base + path, json=body)
            assert (reply.status_code, reply.json()["status"]) == (status, status), (path, body, reply.text)
            assert words in reply.json()["error"], reply.text
            assert requests.get(base + "/proxies").json() == before, (path, body)
        taken.close()
        # through the client library: its own exceptions, from these codes
        with pytest.raises(toxiproxy.exceptions.InvalidToxic):
            proxy.add_toxic(type="nope")
        # a browser is refused (no web page sets a fault on a loopback link)
        assert requests.get(base + "/proxies", headers={"User-Agent": "Mozilla/5.0"}).status_code == 403


def bytes_held(metrics_port: int, link: str = "link") -> float:
    """The link's `drill_link_bytes_held`: what its toxics hold now."""
    text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    lines = [x for x in text.splitlines() if x.startswith(f'drill_link_bytes_held{{link="{link}"}} ')]
    return float(lines[0].rsplit(" ", 1)[1]) if lines else 0.0


def test_the_one_way_stop_removes_every_toxic_at_once(service, probe):
    """Was `..._within_1_s`: a 1-s bound on the release broke on a busy box's stall. The call's 10-s deadline ends
    well before the toxic's 30 s, so its answer proves the release; a bound with seconds of slack says how soon."""
    _, msg, tmp = probe
    toxic = json.dumps({"type": "latency", "attributes": {"latency": 30_000}})
    with drill_link(tmp, "--upstream", service, "--port", "0", "--admin-port", "0", "--metrics-port", "-1",
                    "--toxic", toxic) as (proc, ready):  # fmt: skip
        address, base = f"127.0.0.1:{ready['port']}", f"http://127.0.0.1:{ready['admin_port']}"
        result = {}

        def call():
            try:
                result["body"] = echo(address, msg, b"held", timeout=10)
            except grpc.RpcError as err:
                result["error"] = err.code()
            result["at"] = time.monotonic()

        caller = threading.Thread(target=call)
        caller.start()
        # the call's connection held: the toxic holds what the service sent back (a stop before would hold nothing)
        deadline = time.monotonic() + 10  # a busy box's stalls are 1-2 s
        while not bytes_held(ready["metrics_port"]):
            assert time.monotonic() < deadline, "the link held nothing of the call within 10 s"
            time.sleep(0.02)
        assert "at" not in result
        signalled = time.monotonic()
        proc.send_signal(signal.SIGUSR1)
        caller.join(20)  # the call ends by its 10-s deadline
        # the held answer goes at once (a handler thread, the loop's next turn: milliseconds): unreleased, the call
        # would end DEADLINE_EXCEEDED at its deadline; 5 s leaves a busy box's 1-2 s stalls twice over
        assert result.get("body") == b"held", result
        assert result["at"] - signalled < 5.0
        assert requests.get(base + "/proxies/link/toxics").json() == []
        refused = requests.post(base + "/proxies/link/toxics", json={"type": "latency"})
        assert refused.status_code == 403  # one way: no toxic for the life of the process


def test_the_stop_file_removes_every_toxic(service, probe, tmp_path):
    _, _, tmp = probe
    stop = tmp_path / "stop"
    toxic = json.dumps({"type": "timeout", "attributes": {"timeout": 0}})
    with drill_link(tmp, "--upstream", service, "--port", "0", "--admin-port", "0", "--toxic", toxic,
                    env={"DRILL_FAULT_STOP_FILE": str(stop)}) as (_, ready):  # fmt: skip
        base = f"http://127.0.0.1:{ready['admin_port']}"
        assert len(requests.get(base + "/proxies/link/toxics").json()) == 1
        stop.touch()
        seen = time.monotonic()
        # the file is looked at once a second (harness.core.safety), the toxics removed at the loop's next turn:
        # within 1 s and a turn; 10 s leaves a busy box's 1-2 s stalls several times over
        while requests.get(base + "/proxies/link/toxics").json():
            assert time.monotonic() - seen < 10.0, "the toxics were not removed within 10 s of the stop file"
            time.sleep(0.05)


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        with contextlib.suppress(ConnectionError):  # a connection the link reset
            while data := self.request.recv(65536):
                self.request.sendall(data)


def hit_string(port: int, count: int) -> str:
    """Which of `count` connections, opened one after another, the toxic hit: a hit one is reset (`reset_peer`),
    its echo never comes; an untouched one echoes. Told apart by the outcome, never by the time it took."""
    out = []
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"x")
            try:
                got = s.recv(1)
            except ConnectionResetError:
                got = b""
            assert got in (b"x", b""), got
            out.append("." if got == b"x" else "x")
    return "".join(out)


def test_the_seeded_draw_hits_the_same_connections_in_two_runs(tmp_path):
    upstream = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    # reset_peer at once: a hit connection is reset, not slowed (a 300-ms latency told apart at 150 ms broke on a
    # busy box's stall)
    toxic = json.dumps({"type": "reset_peer", "toxicity": 0.5, "attributes": {"timeout": 0}})
    args = ("--upstream", f"127.0.0.1:{upstream.server_address[1]}", "--port", "0", "--seed", "7", "--toxic", toxic)
    runs = []
    try:
        for _ in range(2):
            with drill_link(tmp_path, *args) as (_, ready):
                runs.append(hit_string(ready["port"], 16))
    finally:
        upstream.shutdown()
    assert runs[0] == runs[1] == draw.preview(7, "reset_peer_downstream", 0.5, 16)
    assert "x" in runs[0] and "." in runs[0]


@pytest.mark.parametrize("args, code, words", [
    ((), 2, "give --upstream HOST:PORT --port P, or --admin-port A"),
    (("--upstream", "127.0.0.1:1"), 2, "--upstream and --port go together"),
    (("--upstream", "127.0.0.1:1", "--port", "0", "--toxic", '{"type": "nope"}'), 2, "invalid toxic type"),
    (("--upstream", "127.0.0.1:1", "--port", "0", "--toxic", "{"), 2, "--toxic {"),
])  # fmt: skip
def test_bad_input_is_one_line_exit_2(args, code, words):
    proc = drill_process("link", *args, timeout=60)
    assert proc.returncode == code and words in proc.stderr
    assert proc.stderr.startswith("drill: ") and proc.stderr.count("\n") == 1


def test_a_port_in_use_is_one_line_exit_1():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = drill_process("link", "--upstream", "127.0.0.1:1", "--port", str(taken.getsockname()[1]), timeout=60)
    assert proc.returncode == 1 and proc.stderr.startswith("drill: link: cannot listen on")
    assert proc.stderr.count("\n") == 1


def test_metrics_count_connections_faults_and_resets(service, probe):
    _, msg, tmp = probe
    toxic = json.dumps({"type": "rst_stream", "attributes": {"code": "INTERNAL_ERROR"}})
    with drill_link(tmp, "--upstream", service, "--port", "0", "--metrics-port", "-1", "--name", "ledger-1",
                    "--toxic", toxic) as (_, ready):  # fmt: skip
        address = f"127.0.0.1:{ready['port']}"
        assert echo(address, msg, b"organic") == b"organic"
        with pytest.raises(grpc.RpcError) as err:
            echo(address, msg, b"drill", metadata=(("x-tenant-id", "tenant-drill"),))
        assert err.value.code() == grpc.StatusCode.INTERNAL
        text = requests.get(f"http://127.0.0.1:{ready['metrics_port']}/metrics").text
    def value(series: str) -> float:
        (line,) = [x for x in text.splitlines() if x.startswith(series + " ")]
        return float(line.split()[-1])

    # how many connections grpc opened for the two channels is its business (it may share one); each was faulted
    connections = value('drill_link_connections_total{link="ledger-1"}')
    assert connections >= 1
    assert value('drill_link_connections_faulted_total{link="ledger-1",toxic="rst_stream"}') == connections
    assert value('drill_link_streams_reset_total{link="ledger-1"}') == 1
    assert value('drill_link_bytes_held{link="ledger-1"}') == 0


def test_http2_toxics_against_the_go_service(service, probe):
    """rst_stream on drill streams only and a GOAWAY that drains, with grpc-go on the server side."""
    _, msg, tmp = probe
    with drill_link(tmp, "--upstream", service, "--port", "0", "--admin-port", "0") as (_, ready):
        address, base = f"127.0.0.1:{ready['port']}", f"http://127.0.0.1:{ready['admin_port']}"
        with grpc.insecure_channel(address) as channel:
            call = channel.unary_unary(SERVICE + "Echo", request_serializer=msg.SerializeToString,
                                       response_deserializer=msg.FromString)  # fmt: skip
            assert call(msg(id="w", body=b"warm"), timeout=5).body == b"warm"
            reply = requests.post(base + "/proxies/link/toxics", json={"type": "rst_stream",
                                  "attributes": {"code": "INTERNAL_ERROR"}})  # fmt: skip
            assert reply.status_code == 200
            futures = [call.future(msg(id=f"c{i}", body=b"%d" % i), timeout=5,
                                   metadata=(("x-tenant-id", "tenant-drill" if i % 2 else "tenant-a"),))
                       for i in range(20)]  # fmt: skip
            codes = [f.code() for f in futures]
            assert codes[1::2] == [grpc.StatusCode.INTERNAL] * 10  # the drill's, reset
            assert codes[0::2] == [grpc.StatusCode.OK] * 10  # organic ones on the same connection, answered
            assert [f.result().body for f in futures[0::2]] == [b"%d" % i for i in range(0, 20, 2)]
            requests.delete(base + "/proxies/link/toxics/rst_stream_downstream")
            # a call in flight ("hold" answers only once the caller gives up, so it is in flight for its deadline)
            t0 = time.monotonic()
            held = call.future(msg(id="h", mode="hold"), timeout=1.5)
            time.sleep(0.3)
            # after_streams 1 (the default): the open connection has had streams, so it is told at once; a new one
            # serves one stream, then is told too
            requests.post(base + "/proxies/link/toxics", json={"type": "goaway"})
            assert call(msg(id="n", body=b"new"), timeout=5).body == b"new"  # a new connection takes it
            # drained, not cut: it ran to its deadline (the caller's DEADLINE_EXCEEDED, or the Go service's own answer
            # at the same deadline, UNKNOWN "context deadline exceeded", whichever comes first), never UNAVAILABLE
            code = held.code()
            assert time.monotonic() - t0 >= 1.4
            assert code == grpc.StatusCode.DEADLINE_EXCEEDED or "deadline" in held.details()
