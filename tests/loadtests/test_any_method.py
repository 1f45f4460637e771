"""The Locust user for any service: any method of a service it knows only by reflection (or a descriptor set,
or a .proto), unary and every streaming kind, tagged and counted like the demo's users; bad input is one line.

The service is tests/loadtests/notes_service.py (its own proto, compiled in the test, reflection on, the
interceptors added as the README says), which records every call its handler ran: the messages it received
and sent, the request id and the drill keys it got. Locust runs as a real headless process with this
project's locustfile.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest

from harness.core.environ import environ_now
from harness.core.errors import BadInput
from harness.core.faults import Kind
from harness.drills.plan.sections import Phases
from harness.drills.stack import edge
from harness.procs.ports import private_loopback
from harness.procs.spawn import spawn, stop_processes
from loadtests import options
from loadtests.method_target import LOCUST_NAMES
from tests.conftest import ROOT, side_by_side
from tests.loadtests.conftest import LOCUST, kill_group, run_locust, total, unexpected_tracebacks
from tests.loadtests.notes_service import write_proto

LOCUSTFILE = str(ROOT / "loadtests" / "locustfile.py")


def _start_notes(tmp: pathlib.Path, *extra: str) -> tuple[subprocess.Popen, dict]:
    ready, record = tmp / "ready.json", tmp / "record.jsonl"
    env = environ_now(PYTHONPATH=str(ROOT), DRILL_FAULT_ENABLED="1", DRILL_FAULT_SEED="3")
    argv = [sys.executable, "-m", "tests.loadtests.notes_service", "--ready-file", str(ready), "--record",
            str(record), *extra]  # fmt: skip
    proc = spawn(argv, tmp / "notes.log", env)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_processes([proc])
            raise AssertionError((tmp / "notes.log").read_text()[-2000:])
        time.sleep(0.05)
    return proc, {**json.loads(ready.read_text()), "record": record}


@pytest.fixture(scope="module")
def notes(tmp_path_factory):
    proc, info = _start_notes(tmp_path_factory.mktemp("notes"))
    try:
        yield info
    finally:
        stop_processes([proc])


def records(notes: dict, plan: str) -> list[dict]:
    """What the service's handler saw of this run's calls (ids `PLAN-SEED-USER-N-MIX`)."""
    lines = [json.loads(line) for line in notes["record"].read_text().splitlines()]
    return [r for r in lines if (r["request_id"] or "").startswith(f"{plan}-")]


def locust(tmp_path, notes: dict, plan: str, *args: str, **kw):
    return run_locust(
        tmp_path, f"127.0.0.1:{notes['port']}", "-f", LOCUSTFILE, "--drill-plan", plan, *args, profile=None, **kw
    )


NOTE = {"text": "a"}
#: method: request, how its types are found, messages the handler must receive and send per call, and the
#: bytes a call's replies carry: a Receipt is 2 bytes for `seen` 1…9 (field 1, varint) + 3 for text "a"
KINDS = {
    "Put": (NOTE, "reflection", 1, 1, 5),
    "Watch": ({"text": "a", "count": 4}, "descriptor-set", 1, 4, 4 * 5),
    "Upload": ([{"text": "a"}, {"text": "b"}, {"text": "c"}], "proto", 3, 1, 2),  # Receipt(seen=3), no text
    "Chat": ([{"text": "a"}, {"text": "b"}, {"text": "c"}], "reflection", 3, 3, 3 * 5),
}
MESSAGE_RATE = 50.0


def _drive(tmp_path, method: str):
    """Locust drives `method` for 3 s, tagged and untagged, against a notes service of its own: the run, and what
    the service's handler saw of it."""
    request, source, received, sent, reply_bytes = KINDS[method]
    plan = f"kind{method.lower()}"
    args = ["-u", "2", "-r", "2", "-t", "3s", "--drill-rate", "5", "--drill-method", f"notes.v1.Notes/{method}",
            "--drill-request", json.dumps(request),
            # the directive travels on every drill call; ratio 0 keeps the server from acting on it
            "--drill-directive", "abort:UNAVAILABLE", "--drill-ratio", "0"]  # fmt: skip
    if isinstance(request, list):  # a rate only where the request is a stream (a stack file's rule)
        args += ["--drill-message-rate", f"{MESSAGE_RATE:g}"]
    if source != "reflection":
        proto = write_proto(tmp_path)
        if source == "proto":
            args += ["--drill-proto", str(proto)]
        else:
            pb = tmp_path / "notes.pb"
            from grpc_tools import protoc

            with PROTOC:
                assert protoc.main(["protoc", f"-I{tmp_path}", "--include_imports", f"--descriptor_set_out={pb}",
                                    str(proto)]) == 0  # fmt: skip
            args += ["--drill-descriptor-set", str(pb)]
    (tmp_path / "notes").mkdir()
    proc, notes = _start_notes(tmp_path / "notes")
    try:
        run = locust(tmp_path, notes, plan, *args, metrics=True, timeout=60)
    finally:
        stop_processes([proc])
    return run, records(notes, plan)


#: protoc (grpcio-tools) is called from one thread at a time
PROTOC = threading.Lock()


def _inject(tmp_path, notes: dict, method: str):
    """Locust drives `method` for 2 s with every drill call aborted (ratio 100): the run."""
    return locust(tmp_path, notes, f"abort{method.lower()}", "-u", "2", "-r", "2", "-t", "2s", "--drill-rate", "5",
                  "--drill-method", f"notes.v1.Notes/{method}", "--drill-request", json.dumps(KINDS[method][0]),
                  "--drill-directive", "abort:UNAVAILABLE", "--drill-ratio", "100", metrics=True)  # fmt: skip


@pytest.fixture(scope="module")
def runs(notes, tmp_path_factory):
    """The Locust runs of the two tests below, side by side, four at a time (each a Locust process, its own
    folder; each driving run a notes service of its own, whose record is then only its calls; the injecting runs
    share the module's service, each under a plan name of its own): each test takes its run."""
    tmp = {f"{what}-{m}": tmp_path_factory.mktemp(f"{what}-{m}") for what in ("drive", "inject") for m in KINDS}
    scenarios = {f"drive-{m}": (lambda m=m: _drive(tmp[f"drive-{m}"], m)) for m in KINDS}
    scenarios |= {f"inject-{m}": (lambda m=m: _inject(tmp[f"inject-{m}"], notes, m)) for m in KINDS}
    with side_by_side(at_once=4, **scenarios) as results:
        yield results


@pytest.mark.parametrize("method", list(KINDS))
def test_the_user_drives_every_call_kind_tagged_and_untagged(runs, method):
    _, _, received, sent, reply_bytes = KINDS[method]
    plan = f"kind{method.lower()}"
    run, seen = runs[f"drive-{method}"]()
    assert run.rc == 0 and not unexpected_tracebacks(run.log), run.log[-3000:]
    for traffic in ("organic", "drill"):
        row = run.row("grpc", f"{traffic}/{method}")
        assert row is not None and int(row["Failure Count"]) == 0, (row, run.failures)
        calls = [r for r in seen if r["request_id"].split("-")[2].startswith(traffic)]
        # every call reached the handler whole, in schedule order: each message of a client stream sent, a
        # response stream read to its end (its bytes are Locust's content size). Locust counts the calls that
        # ended before it stopped its users; the handler may also have finished a few that were in flight then.
        # A client stream in flight at that stop is cancelled, and grpc.aio's server ends a cancelled call's
        # request iterator as a half-close would end it (the handler's CancelledError comes at its next await):
        # the handler records the messages that had arrived. Such a call is one Locust never counted, so there
        # are no more of them than calls the handler saw beyond Locust's count, and each holds a prefix of the
        # stream (once in CI: one Upload recorded with 2 of its 3 messages)
        ids = sorted(int(r["request_id"].rsplit("-", 2)[1]) for r in calls)  # N of PLAN-SEED-USER-N-MIX
        assert ids == list(range(len(ids))) and len(ids) >= int(row["Request Count"]) > 0, (traffic, ids, row)
        cut = [r for r in calls if (r["received"], r["sent"]) != (received, sent)]
        assert len(cut) <= len(ids) - int(row["Request Count"]), (cut, row)
        assert all(r["received"] < received for r in cut), cut
        assert float(row["Average Content Size"]) == reply_bytes
        if method in ("Upload", "Chat"):  # message i leaves at i / rate: a call lasts at least 2 intervals
            assert float(row["Min Response Time"]) >= 2 / MESSAGE_RATE * 1000, row
        # tagged like the demo's users: the tenant and directive on drill calls only, seed-derived ids
        tenants = {(r["tenant"], r["fault"]) for r in calls}
        expect = {("tenant-drill", "abort:UNAVAILABLE")} if traffic == "drill" else {(None, None)}
        assert tenants == expect, tenants
        assert all(r["request_id"].startswith(f"{plan}-0-{traffic}0-") for r in calls)
        # and counted as the client interceptor would, under the method's name
        client = run.scraped["local"]
        counted = total(client, "drill_client_calls_total", traffic=traffic, grpc_method=f"notes.v1.Notes/{method}")
        assert 0 < counted <= len(calls)
        assert counted == total(client, "drill_client_calls_total", traffic=traffic, grpc_status="OK")


@pytest.mark.parametrize("method", ["Put", "Watch", "Upload", "Chat"])
def test_an_injected_failure_of_any_kind_is_reported_as_injected(runs, method):
    run = runs[f"inject-{method}"]()
    assert run.rc == 0 and not unexpected_tracebacks(run.log), run.log[-3000:]
    drill = run.row("grpc", f"drill/{method}")
    organic = run.row("grpc", f"organic/{method}")
    assert int(drill["Request Count"]) > 0 and drill["Failure Count"] == drill["Request Count"], drill
    assert int(organic["Request Count"]) > 0 and organic["Failure Count"] == "0", organic
    errors = {f["Error"] for f in run.failures}
    assert errors == {"GrpcStatusError('UNAVAILABLE (server-fault, injected)')"}, run.failures
    client = run.scraped["local"]
    drills = total(client, "drill_client_calls_total", traffic="drill")
    assert drills > 0 and total(client, "drill_client_calls_total", traffic="drill", injected="true") == drills


def _one_line(proc_log: str, rc: int, expected_rc: int, needle: str) -> None:
    lines = [line for line in proc_log.splitlines() if line.startswith("drill: locust:")]
    assert rc == expected_rc and len(lines) == 1, (rc, proc_log[-3000:])
    assert "Traceback" not in proc_log
    assert needle in lines[0], (needle, lines[0])
    assert proc_log.strip().splitlines()[-1] == lines[0]  # the last line: what a runner shows of its log


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--drill-method", "notes.v1.Notes/Remove"], "notes.v1.Notes has no method 'Remove' (it has: Chat, Put, "
                                                      "Upload, Watch)"),
        (["--drill-method", "notes.v1.Basket/Put"], "no service 'notes.v1.Basket' by reflection at 127.0.0.1:"),
        (["--drill-method", "Put"], "expected a full method name, package.Service/Method"),
        (["--drill-method", "notes.v1.Notes/Put", "--drill-request", '{"text": 7}'],
         "--drill-request does not fit notes.v1.Note"),
        (["--drill-method", "notes.v1.Notes/Put", "--drill-request", '{"text": '], "--drill-request is not JSON"),
        (["--drill-method", "notes.v1.Notes/Put", "--drill-request", "[{}]"],
         "--drill-request: a unary method takes one message (a JSON object), not a list of 1"),
        (["--drill-method", "notes.v1.Notes/Chat", "--drill-request", '[{}, {"count": "x"}]'],
         "--drill-request[1] does not fit notes.v1.Note"),
        (["--drill-method", "notes.v1.Notes/Put", "--drill-request", "@/nonexistent.json"],
         "--drill-request @/nonexistent.json: cannot read it"),
        (["--drill-method", "notes.v1.Notes/Put", "--drill-proto", "/nonexistent.proto"],
         "--drill-proto: no file /nonexistent.proto"),
        (["--drill-method", "notes.v1.Notes/Put", "--drill-proto", "a.proto", "--drill-descriptor-set", "a.pb"],
         "give --drill-proto or --drill-descriptor-set, not both"),
        # what a stack file refuses, the options refuse (edge.edge_spec, edge.resolve_edge), on one line
        (["--drill-method", "notes.v1.Notes/Put", "--drill-message-rate", "5"],
         "--drill-message-rate: notes.v1.Notes/Put is a unary method: it sends one message"),
        (["--drill-method", "notes.v1.Notes/Put", "--drill-request", ""], "--drill-request is empty"),
        (["--drill-method", "notes.v1.Notes/Put", "--drill-request", '{"nope": 1}'],
         'has no field named "nope" at "Note". Available Fields(except extensions):'),
    ],
)  # fmt: skip
def test_bad_input_stops_locust_at_start_with_one_line(notes, tmp_path, args, needle):
    run = locust(tmp_path, notes, "bad", "-u", "2", "-r", "2", "-t", "2s", "--drill-rate", "5", *args, timeout=60)
    _one_line(run.log, run.rc, 2, needle)


def test_a_server_without_reflection_is_one_line_naming_the_other_sources(tmp_path):
    proc, info = _start_notes(tmp_path, "--no-reflection")
    try:
        run = locust(tmp_path, info, "bad", "-u", "1", "-t", "2s", "--drill-method", "notes.v1.Notes/Put")
    finally:
        stop_processes([proc])
    _one_line(run.log, run.rc, 2, "--host: 127.0.0.1:")
    assert "offers no server reflection (UNIMPLEMENTED); give --drill-proto or --drill-descriptor-set" in run.log


def test_bad_input_with_forked_workers_is_one_line_and_leaves_no_worker_behind(notes, tmp_path):
    here = private_loopback()  # --processes: the master binds a fixed port (5557) before its workers connect
    log = tmp_path / "locust.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [LOCUST, "-f", LOCUSTFILE, "--host", f"127.0.0.1:{notes['port']}", "--headless", "-u", "2", "-t", "2s",
             "--processes", "2", "--master-bind-host", here, "--master-host", here,
             "--drill-method", "notes.v1.Notes/Remove"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        rc = proc.wait(timeout=60)
        time.sleep(0.5)  # a worker the master did not end would still be in its process group now
        with pytest.raises(ProcessLookupError):
            os.killpg(proc.pid, 0)
    finally:
        kill_group(proc)
    _one_line(log.read_text(), rc, 2, "notes.v1.Notes has no method 'Remove'")


# --- the shared resolver (harness.drills.stack.edge), from a descriptor set: no server -----------------------------
@pytest.fixture(scope="module")
def descriptor_set(tmp_path_factory) -> str:
    from grpc_tools import protoc

    tmp = tmp_path_factory.mktemp("proto")
    proto = write_proto(tmp)
    out = tmp / "notes.pb"
    assert protoc.main(["protoc", f"-I{tmp}", "--include_imports", f"--descriptor_set_out={out}", str(proto)]) == 0
    return str(out)


def _spec(descriptor_set: str, method: str, request) -> edge.MethodSpec:
    return edge.MethodSpec(address="127.0.0.1:1", method=method, request=request, descriptor_set=descriptor_set,
                           message_rate=20.0)  # fmt: skip


def test_one_resolver_gives_every_kind_and_a_client_stream_its_list_of_messages(descriptor_set):
    got = {m: edge.resolve_call(_spec(descriptor_set, f"notes.v1.Notes/{m}", KINDS[m][0])) for m in KINDS}
    assert {m: c.kind for m, c in got.items()} == {
        "Put": Kind.UNARY, "Watch": Kind.SERVER_STREAMING, "Upload": Kind.CLIENT_STREAMING, "Chat": Kind.BIDI_STREAMING,
    }  # fmt: skip
    assert got["Put"].method == "/notes.v1.Notes/Put" and got["Put"].messages("r") == (b"\n\x01a",)
    assert [m for m, c in got.items() if c.streams_in] == ["Upload", "Chat"]  # they send messages
    assert [m for m, c in got.items() if c.streams_out] == ["Watch", "Chat"]  # they read replies to the end
    assert got["Upload"].messages("r") == (b"\n\x01a", b"\n\x01b", b"\n\x01c")
    assert got["Chat"].message_rate == 20.0 and got["Put"].message_rate is None  # a rate only within a stream
    # an object alone is a stream of one message; an empty list a stream of none
    one = edge.resolve_call(_spec(descriptor_set, "notes.v1.Notes/Upload", NOTE))
    none = edge.resolve_call(_spec(descriptor_set, "notes.v1.Notes/Chat", []))
    assert one.messages("r") == (b"\n\x01a",) and none.messages("r") == ()


def test_the_runners_stack_edge_takes_every_kind_and_a_rate_only_for_a_client_stream(descriptor_set):
    kinds = {m: edge.resolve_edge(_spec(descriptor_set, f"notes.v1.Notes/{m}", KINDS[m][0])).kind
             for m in ("Upload", "Chat")}  # fmt: skip
    assert kinds == {"Upload": Kind.CLIENT_STREAMING, "Chat": Kind.BIDI_STREAMING}
    with pytest.raises(BadInput, match=r"stack.edge.message_rate: notes.v1.Notes/Watch is a server-streaming "
                                       r"method: it sends one message"):  # fmt: skip
        edge.resolve_edge(_spec(descriptor_set, "notes.v1.Notes/Watch", NOTE))


def test_one_check_of_the_edge_names_a_stack_files_keys_or_locusts_options():
    bad = {"address": "127.0.0.1:1", "method": "Put", "request": "x", "message_rate": 0}
    with pytest.raises(BadInput) as stack:
        edge.edge_spec(bad)
    with pytest.raises(BadInput) as locust:
        edge.edge_spec(bad, LOCUST_NAMES)
    assert str(stack.value) == (
        "stack.edge.method: 'Put': expected a full method name, package.Service/Method; "
        "stack.edge.request: Input should be a valid dictionary; stack.edge.request: Input should be a valid list; "
        "stack.edge.message_rate: Input should be greater than 0"
    )
    assert str(locust.value) == str(stack.value).replace("stack.edge.", "--drill-").replace("message_rate",
                                                                                           "message-rate")
    assert edge.edge_spec({"address": "h:1", "method": "a.B/C", "request": [{}]}).request == [{}]


def test_a_request_that_does_not_fit_is_one_line(descriptor_set):
    with pytest.raises(BadInput) as err:
        edge.resolve_call(_spec(descriptor_set, "notes.v1.Notes/Put", {"nope": 1}))
    assert "\n" not in str(err.value) and "Available Fields" in str(err.value)


def test_a_proto_that_does_not_compile_is_one_line_carrying_protocs_own(tmp_path, capfd):
    proto = tmp_path / "broken.proto"
    proto.write_text('syntax = "proto3";\nmessage A { int32 x = ; }\n')
    with pytest.raises(BadInput) as err:
        edge.resolve_call(edge.MethodSpec(address="127.0.0.1:1", method="a.S/M", proto=str(proto)))
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"stack.edge.proto: {proto} does not compile (protoc exit 1): ")
    assert "broken.proto:2:" in message  # protoc's own line, in ours
    assert capfd.readouterr().err == ""  # and nowhere else


def test_a_port_that_answers_but_not_grpc_is_said_so_at_once(tmp_path, notes):
    assert edge.speaks_http2(f"127.0.0.1:{notes['port']}") is True  # a gRPC server answers the probe
    import http.server
    import threading

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{server.server_address[1]}"
    try:
        assert edge.speaks_http2(address) is False
        with pytest.raises(BadInput, match=rf"^--host: {address} answered, but not as a gRPC server"):
            edge.resolve_call(edge.MethodSpec(address=address, method="a.S/M"), names=LOCUST_NAMES)
    finally:
        server.shutdown()
        server.server_close()


def test_locust_decides_a_calls_phase_as_the_runners_load_does():
    phases = Phases(warmup=1, fault=3, recovery=2)
    parsed = options.parse_phases(f"warmup={phases.warmup:g},fault={phases.fault:g},recovery={phases.recovery:g}")
    for rate in (3.0, 7.0, 10.0):
        for k, users in ((0, 2), (1, 2), (2, 5)):
            offset = k / users / rate
            for n in range(int(phases.total * rate) + 2):  # boundaries included: n / rate lands on whole seconds
                at = offset + n / rate
                assert options.phase_at(parsed, at) == phases.at(at), (rate, k, n, at)
