"""`drill init`: a stack file written from a service's own methods, then its dry run; against real services.

One live run: the Go probe (tests/proxy/goprobe, a service in another language) behind the proxy the file
names, `drill run FILE` as written but for shorter phases (the file's own `phases` key), its hits those the
dry run predicts. The rest are dry runs: a Python service that offers reflection (no --proto), `--target` a
`drill serve` with the interceptors, every refusal on one line with its exit code, and the pure parts
(the request skeleton, the file for every kind of method, the edge and the ports chosen).
"""

from __future__ import annotations

import json
import os
import re
import socket
import time

import pytest
import yaml
from google.protobuf import json_format

from harness import protos
from harness.core.errors import BadInput
from harness.core.faults import Kind
from harness.drills.cli import init as init_command
from harness.drills.plan import starter
from harness.drills.plan.files import from_dict, load_plan
from harness.drills.stack.targets import proxy_args
from harness.drills.trials.dryrun import predicted_hits
from harness.procs.ports import refused_port
from harness.procs.spawn import start_serve
from tests.conftest import ROOT, drill_inprocess, drill_process, side_by_side
from tests.ports import free_port
from tests.proxy.probe import build, go_service
from tests.stacks.test_own_service import start_cart
from tests.test_cli_errors import assert_one_line

PROBE = "tests/proxy/probe.proto"
PROBE_KINDS = {"probe.v1.Probe/Echo": "unary", "probe.v1.Probe/Count": "client-streaming",
               "probe.v1.Probe/Repeat": "server-streaming", "probe.v1.Probe/Chat": "bidi-streaming",
               "probe.v1.Probe/Seen": "unary"}  # fmt: skip


def _table(stdout: str) -> dict[str, tuple[str, bool]]:
    """The printed methods table: method → (kind, is the edge)."""
    rows = {}
    for line in stdout.splitlines():
        m = re.fullmatch(r"  (\S+/\S+)\s+(\S+)\s+(\S+)(  <- the edge)?", line)
        if m:
            rows[m.group(1)] = (m.group(2), bool(m.group(4)))
    return rows


@pytest.fixture(scope="module")
def go_probe(tmp_path_factory):
    """The Go probe service (no reflection), as the proxy's tests build and start it."""
    tmp = tmp_path_factory.mktemp("goprobe")
    with go_service(build(), tmp) as address:
        yield address


# --- (a) a Go service, --proto: listed, written, dry run passed, then run as written ---------------
def _a_go_service_gets_a_file_whose_dry_run_passes_and_whose_run_hits_what_it_predicts(go_probe, tmp_path):
    port, metrics_port = free_port(), free_port()
    out = tmp_path / "probe.yaml"
    init = drill_process("init", "--proxy", "--upstream", go_probe, "--proto", PROBE, "--port", str(port),
                         "--metrics-port", str(metrics_port), "--out", str(out))  # fmt: skip
    assert init.returncode == 0, init.stdout[-3000:] + init.stderr
    assert _table(init.stdout) == {name: (kind, name == "probe.v1.Probe/Echo") for name, kind in PROBE_KINDS.items()}
    assert "the edge: probe.v1.Probe/Echo, the first unary method; --method NAME picks another" in init.stdout
    assert init.stdout.index("<- the edge") < init.stdout.index("wrote ") < init.stdout.index("--dry-run: nothing")
    assert init.stdout.rstrip().endswith(f"dry run passed: `drill run {out}` runs this drill"), init.stdout[-2000:]
    assert "ok  hop probe: http://127.0.0.1:" in init.stdout  # the dry run read the proxy's /metrics
    text = out.read_text()
    assert text in init.stdout  # the file, printed whole
    plan = load_plan(str(out))
    px = plan.stack.proxy
    assert (px.upstream, px.service, px.port, px.metrics_port) == (go_probe, "probe", port, metrics_port)
    assert px.proto == plan.stack.edge.proto == str(ROOT / PROBE)  # written relative to the file's folder
    # written relative to the file's folder, or absolute when the two share nothing but / (a checkout in /tmp, as
    # CI's, shares /tmp with pytest's folders)
    written = yaml.safe_load(text)["stack"]["proxy"]["proto"]
    shares_only_root = os.path.commonpath([ROOT.resolve(), tmp_path.resolve()]) == os.sep
    assert written == (str(ROOT / PROBE) if shares_only_root else os.path.relpath(ROOT / PROBE, tmp_path))
    assert (plan.stack.edge.method, plan.stack.edge.request) == ("probe.v1.Probe/Echo",
                                                                 {"id": "", "body": "", "count": 0, "mode": ""})
    # the run, as written but for shorter phases, through the file's own key
    short = re.sub(r"^phases: .*$", "phases: {warmup: 2, fault: 3, recovery: 4}", text, flags=re.M)
    assert short != text
    out.write_text(short)
    plan = load_plan(str(out))
    run = drill_process("run", str(out), "--out", str(tmp_path / "out"), "--no-live")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    trial = json.loads((tmp_path / "out" / "results.json").read_text())["configs"]["as-is"]["trials"][0]
    predicted = predicted_hits(plan, plan.variants[0])  # what the dry run printed as the expected hits
    h = trial["hits"]
    assert predicted["expected"] > 0, predicted
    assert (h["expected"], h["expected_digest"]) == (predicted["expected"], predicted["expected_digest"]), h
    assert (h["observed"], h["observed_digest"]) == (h["expected"], h["expected_digest"]), h  # the proxy's log
    assert h["marked"] == h["expected"], h  # the proxy is the edge: every hit came back marked
    assert trial["breached"] is True  # 50 % of the drill traffic failed in the fault: past the 5 % SLO


# --- (b) reflection: a Python service that offers it, no --proto ---------------------------------
def _a_service_with_reflection_needs_no_proto(tmp_path):
    proc, cart = start_cart(tmp_path, DRILL_FAULT_ENABLED=None, DRILL_SERVICE=None, DRILL_FAULT_SEED=None)
    try:
        out = tmp_path / "cart.yaml"
        init = drill_process("init", "--proxy", "--upstream", f"127.0.0.1:{cart['port']}", "--port",
                             str(free_port()), "--metrics-port", str(free_port()), "--out", str(out))  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(15)
    assert init.returncode == 0, init.stdout[-3000:] + init.stderr
    assert _table(init.stdout) == {"shop.v1.Cart/Add": ("unary", True),
                                   "shop.v1.Cart/Watch": ("server-streaming", False)}  # fmt: skip
    assert f"methods of 127.0.0.1:{cart['port']} (from reflection at 127.0.0.1:{cart['port']})" in init.stdout
    assert "ok  edge method /shop.v1.Cart/Add and its request resolve by server reflection" in init.stdout
    data = yaml.safe_load(out.read_text())
    assert not {"proto", "descriptor_set"} & (set(data["stack"]["proxy"]) | set(data["stack"]["edge"]))
    assert data["stack"]["edge"]["request"] == {"item": "", "qty": 0}
    assert data["stack"]["hops"] == [{"name": "cart"}] and data["fault"]["target"] == "cart"


# --- (c) --target: a service with the interceptors ---------------------------------------------------
def test_target_a_service_with_the_interceptors(tmp_path):
    serve = start_serve("demo", ["--port", "0", "--metrics-port", "-1", "--service", "demo", "--enable-faults",
                                 "--seed", "7"], tmp_path)  # fmt: skip
    try:
        out = tmp_path / "demo.yaml"
        init = drill_process("init", "--target", serve.address, "--metrics", serve.metrics_url, "--seed", "7",
                             "--method", "Demo/Stream", "--out", str(out))  # fmt: skip
        # without --metrics: docs/stacks.md's own-service port on the service's host (no dry run: nothing there)
        default = drill_inprocess("init", "--target", serve.address, "--out", str(tmp_path / "d.yaml"),
                                  "--no-dry-run")  # fmt: skip
    finally:
        serve.stop()
    assert init.returncode == 0, init.stdout[-3000:] + init.stderr
    rows = _table(init.stdout)
    assert rows["drill.v1.Demo/Stream"] == ("server-streaming", True) and rows["drill.v1.Demo/Call"][0] == "unary"
    assert "the edge: drill.v1.Demo/Stream (--method)" in init.stdout
    assert f"ok  hop demo: {serve.metrics_url} answers" in init.stdout and "service demo, injection on" in init.stdout
    plan = load_plan(str(out))
    assert plan.stack.proxy is None and plan.seed == 7
    assert (plan.stack.edge.address, plan.stack.edge.method) == (serve.address, "drill.v1.Demo/Stream")
    assert plan.stack.hops[0].name == "demo" and plan.stack.hops[0].metrics == [serve.metrics_url]
    assert "DRILL_FAULT_SEED=7" in out.read_text() and "DRILL_SERVICE=demo" in out.read_text()
    assert "@after=2` would let 2 replies through" in out.read_text()  # the fault's words fit a reply stream
    assert default.returncode == 0, default.stderr
    assert load_plan(str(tmp_path / "d.yaml")).stack.hops[0].metrics == ["http://127.0.0.1:9464/metrics"]


# --- (d) every refusal: one line, its exit code ------------------------------------------------------
@pytest.mark.parametrize(
    "args, code, needles",
    [(["--proxy", "--out", "{tmp}/x.yaml"], 2, ["--proxy needs --upstream HOST:PORT"]),
     (["--out", "{tmp}/x.yaml"], 2, ["give --proxy --upstream HOST:PORT", "or --target HOST:PORT"]),
     (["--upstream", "127.0.0.1:1", "--target", "127.0.0.1:2", "--out", "{tmp}/x.yaml"], 2, ["not both"]),
     (["--upstream", "127.0.0.1:1", "--proto", PROBE, "--descriptor-set", "x.pb", "--out", "{tmp}/x.yaml"], 2,
      ["give --proto or --descriptor-set, not both"]),
     (["--upstream", "127.0.0.1:1", "--proto-path", "tests", "--out", "{tmp}/x.yaml"], 2, ["--proto-path applies"]),
     (["--upstream", "127.0.0.1:1", "--out", "{tmp}/no/such/x.yaml"], 2, ["--out {tmp}/no/such/x.yaml: no folder"]),
     (["--upstream", "127.0.0.1:1", "--out", "{tmp}/exists.yaml"], 2, ["exists; pass --force to overwrite it"]),
     (["--upstream", "127.0.0.1:1", "--out", "{tmp}"], 2, ["is a folder"]),
     (["--upstream", "127.0.0.1:1", "--proto", "{tmp}/bad.proto", "--out", "{tmp}/x.yaml"], 2,
      ["init: --proto: {tmp}/bad.proto does not compile", '"strin" is not defined']),
     (["--upstream", "127.0.0.1:1", "--proto", PROBE, "--method", "Nope", "--no-dry-run", "--out", "{tmp}/x.yaml"],
      2, ["--method Nope: the service has no such method", ", ".join(PROBE_KINDS)]),
     (["--upstream", "127.0.0.1:1", "--service", "Cart_1", "--out", "{tmp}/x.yaml"], 2, ["--service 'Cart_1'"]),
     (["--upstream", "127.0.0.1:1", "--metrics", "http://h:1/metrics", "--out", "{tmp}/x.yaml"], 2,
      ["--metrics is for --target"]),
     (["--target", "127.0.0.1:1", "--port", "5000", "--out", "{tmp}/x.yaml"], 2, ["--port and --metrics-port"]),
     (["--upstream", "nohostport", "--out", "{tmp}/x.yaml"], 2, ["--upstream", "HOST:PORT", "'nohostport'"])],
)  # fmt: skip
def test_a_bad_input_is_refused_on_one_line_before_anything_is_written(tmp_path, args, code, needles):
    (tmp_path / "exists.yaml").write_text("kept\n")
    (tmp_path / "bad.proto").write_text('syntax = "proto3";\nmessage X { strin a = 1; }\n')
    proc = drill_inprocess("init", *[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert_one_line(proc, code, *[n.replace("{tmp}", str(tmp_path)) for n in needles])
    assert proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.proto", "exists.yaml"]
    assert (tmp_path / "exists.yaml").read_text() == "kept\n"


def test_a_refused_or_silent_service_is_a_failed_run_at_once(tmp_path):
    """Nothing listening: refused at once. A port that accepts and says nothing (a stuck server): each step
    waits REACH_S (2 s), so both end well within 5 s."""
    with refused_port() as port:
        t0 = time.monotonic()
        refused = drill_inprocess("init", "--proxy", "--upstream", f"127.0.0.1:{port}", "--out", str(tmp_path / "x"))
        refused_s = time.monotonic() - t0
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)  # the kernel accepts connections; nothing ever answers them
        t0 = time.monotonic()
        quiet = drill_inprocess("init", "--target", f"127.0.0.1:{silent.getsockname()[1]}", "--proto", PROBE,
                                "--out", str(tmp_path / "y"))  # fmt: skip
        quiet_s = time.monotonic() - t0
    assert_one_line(refused, 1, f"--upstream 127.0.0.1:{port}: connection refused")
    assert_one_line(quiet, 1, "--target", "accepts a connection but answers nothing in 2 s")
    assert refused_s < 5 and quiet_s < 5, (refused_s, quiet_s)
    assert not list(tmp_path.iterdir())


def test_a_service_without_reflection_says_what_to_pass(go_probe, tmp_path):
    proc = drill_process("init", "--proxy", "--upstream", go_probe, "--out", str(tmp_path / "x.yaml"))
    assert_one_line(proc, 2, f"--upstream {go_probe} offers no server reflection", "pass --proto FILE",
                    "--descriptor-set FILE")  # fmt: skip
    assert not list(tmp_path.iterdir())


def _a_failing_dry_run_keeps_the_file_and_exits_as_the_dry_run(go_probe, tmp_path):
    """The file is written, then its dry run refuses it: `--target` a service without our /metrics (the Go
    probe): the dry run's own line and exit code (1: the hop's /metrics does not answer)."""
    with refused_port() as metrics_port:
        proc = drill_process("init", "--target", go_probe, "--proto", PROBE, "--metrics",
                             f"http://127.0.0.1:{metrics_port}/metrics", "--out", str(tmp_path / "x.yaml"))  # fmt: skip
    assert_one_line(proc, 1, f"hop probe: /metrics at http://127.0.0.1:{metrics_port}/metrics does not answer")
    assert f"dry run failed: {tmp_path / 'x.yaml'} is written" in proc.stdout
    assert load_plan(str(tmp_path / "x.yaml")).stack.edge.address == go_probe


@pytest.fixture(scope="module")
def live(go_probe, tmp_path_factory):
    """The file's scenarios that start `drill` processes against a live service (the Go run, reflection, a failing
    dry run), side by side, each in a folder of its own: each test is its scenario, run whole in a thread, its
    assertions raised here. (The in-process ones stay in their tests: `drill_inprocess` redirects this process's
    stdout, which is not for threads.)"""
    tmp = {name: tmp_path_factory.mktemp(name) for name in ("go-run", "reflection", "failing-dry-run")}
    with side_by_side(**{
        "go-run": lambda: _a_go_service_gets_a_file_whose_dry_run_passes_and_whose_run_hits_what_it_predicts(
            go_probe, tmp["go-run"]),
        "reflection": lambda: _a_service_with_reflection_needs_no_proto(tmp["reflection"]),
        "failing-dry-run": lambda: _a_failing_dry_run_keeps_the_file_and_exits_as_the_dry_run(
            go_probe, tmp["failing-dry-run"]),
    }) as results:  # fmt: skip
        yield results


@pytest.mark.slow
def test_a_go_service_gets_a_file_whose_dry_run_passes_and_whose_run_hits_what_it_predicts(live):
    live["go-run"]()


def test_a_service_with_reflection_needs_no_proto(live):
    live["reflection"]()


def test_a_failing_dry_run_keeps_the_file_and_exits_as_the_dry_run(live):
    live["failing-dry-run"]()


# --- (e) the request skeleton, pure ----------------------------------------------------------------
SHAPES = """
syntax = "proto3";
package shapes.v1;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/any.proto";
enum Color { COLOR_UNSPECIFIED = 0; RED = 1; }
message Leaf { string name = 1; repeated int64 ids = 2; Leaf next = 3; }
message Req {
  string text = 1; int32 small = 2; double ratio = 3; bool on = 4; bytes raw = 5; uint64 big = 6; float f = 7;
  Leaf leaf = 8; repeated Leaf leaves = 9; Color color = 10; repeated Color colors = 11;
  oneof pick { int32 first = 12; string second = 13; }
  map<string, Leaf> by_name = 14; map<int32, string> by_number = 15;
  optional string maybe = 16;
  google.protobuf.Timestamp at = 17; google.protobuf.Int32Value wrapped = 18; google.protobuf.Any any = 19;
  sint32 signed_small = 20; fixed64 fixed_big = 21;
}
message Nothing {}
service Shapes {
  rpc Unary(Req) returns (Nothing);
  rpc Upload(stream Req) returns (Nothing);
  rpc Watch(Req) returns (stream Nothing);
  rpc Chat(stream Nothing) returns (stream Nothing);
}
"""
LEAF = {"name": "", "ids": [0], "next": {}}  # a recursive field ends as {}


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    path = tmp_path_factory.mktemp("shapes") / "shapes.proto"
    path.write_text(SHAPES)
    return path, protos.list_methods(proto=str(path), option="test")


def test_the_skeleton_has_every_field_as_the_proto_writes_it_and_parses_as_the_message(shapes):
    _, methods = shapes
    req = methods[0].input
    skeleton = starter.skeleton(req)
    assert skeleton == {
        "text": "", "small": 0, "ratio": 0.0, "on": False, "raw": "", "big": 0, "f": 0.0,
        "leaf": LEAF, "leaves": [LEAF], "color": "COLOR_UNSPECIFIED", "colors": ["COLOR_UNSPECIFIED"],
        "first": 0,  # a oneof: its first member only
        "by_name": {"key": LEAF}, "by_number": {"0": ""},  # a map: one entry, its key as JSON writes it
        "maybe": "",  # proto3 optional: a oneof of one
        "at": "1970-01-01T00:00:00Z", "wrapped": 0,  # well-known types in their JSON form; an Any left out
        "signed_small": 0, "fixed_big": 0,
    }  # fmt: skip
    assert list(skeleton) == [f.name for f in req.fields if f.name not in ("second", "any")]  # the .proto's order
    message = json_format.ParseDict(skeleton, protos.message_class(req)())  # as the runner's load reads it
    assert message.WhichOneof("pick") == "first" and message.leaf.ids == [0] and message.HasField("maybe")


def test_a_client_streams_request_is_a_list_of_messages(shapes):
    _, methods = shapes
    by = {m.name.rpartition("/")[2]: m for m in methods}
    assert starter.request_of(by["Upload"]) == [starter.skeleton(by["Upload"].input)]
    assert starter.request_of(by["Watch"]) == starter.skeleton(by["Watch"].input)
    assert starter.request_of(by["Chat"]) == [{}]


# --- the file, pure: a plan the model validates, every section commented, the fault fitting the kind ----
@pytest.mark.parametrize("method", ["Unary", "Upload", "Watch", "Chat"])
@pytest.mark.parametrize("front", [starter.ViaProxy("127.0.0.1:50051", 50151, 9565),
                                   starter.Direct("127.0.0.1:50051", "http://127.0.0.1:9464/metrics")])  # fmt: skip
def test_the_file_is_a_plan_for_every_kind_with_every_section_commented(shapes, tmp_path, method, front):
    path, methods = shapes
    edge = next(m for m in methods if m.name.endswith(f"/{method}"))
    types = starter.TypesFrom(proto="shapes.proto", said="shapes.proto")
    text = starter.stack_file(methods, edge, hop="shapes", seed=9, types=types, front=front,
                              run_as="drill run s.yaml")  # fmt: skip
    (tmp_path / "shapes.proto").write_text(path.read_text())
    plan = from_dict(yaml.safe_load(text), source=str(tmp_path / "s.yaml"))
    assert plan.stack.edge.method == f"shapes.v1.Shapes/{method}" and plan.seed == 9
    assert plan.stack.edge.proto == str(tmp_path / "shapes.proto")  # from the file's folder
    assert (plan.stack.proxy is not None) == isinstance(front, starter.ViaProxy)
    assert [h.name for h in plan.stack.hops] == ["shapes"] and plan.fault.target == "shapes"
    assert plan.fault.directive == "abort:UNAVAILABLE" and plan.fault.ratio == 50
    assert plan.traffic.organic_users * plan.traffic.organic_rate + plan.traffic.drill_rate <= 20  # modest
    lines = text.splitlines()
    for i, line in enumerate(lines):  # every key of the plan and of the stack has its comment above it
        if re.match(r"^(\w+:|  \w+:)", line):
            above = next(x for x in reversed(lines[:i]) if not re.match(r"^ {4,}", x))
            assert above.lstrip().startswith("#") or re.match(r"^(name|seed):", line), (line, above)
    assert max(len(x) for x in lines if x.lstrip().startswith("#")) <= 110
    kind = Kind(edge.kind)
    assert ("@after=2` would" in text) == kind.response_streaming
    assert ("@read=2` would" in text) == kind.request_streaming
    assert ("refuses them on this one" in text) == (kind is Kind.UNARY)


def test_a_proto_with_import_paths_reaches_the_proxy_and_the_edge_with_them(tmp_path):
    """With --proto-path, the file names the .proto and its import paths under `stack.proxy` (relative to the
    file's folder); the edge takes both, the proxy is started with them, and the request resolves through them."""
    (tmp_path / "common").mkdir()
    (tmp_path / "api").mkdir()
    (tmp_path / "common" / "money.proto").write_text('syntax = "proto3";\npackage common;\n'
                                                     "message Money { int64 cents = 1; }\n")  # fmt: skip
    (tmp_path / "api" / "pay.proto").write_text(
        'syntax = "proto3";\npackage pay.v1;\nimport "money.proto";\n'
        "message PayRequest { common.Money amount = 1; }\nmessage PayReply {}\n"
        "service Pay { rpc Charge(PayRequest) returns (PayReply); }\n")  # fmt: skip
    out = tmp_path / "pay.yaml"
    proc = drill_inprocess("init", "--proxy", "--upstream", "127.0.0.1:1", "--proto", str(tmp_path / "api/pay.proto"),
                           "--proto-path", str(tmp_path / "common"), "--proto-path", str(tmp_path / "api"),
                           "--port", str(free_port()), "--metrics-port", str(free_port()), "--out", str(out),
                           "--no-dry-run")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    written = yaml.safe_load(out.read_text())["stack"]["proxy"]
    assert (written["proto"], written["proto_path"]) == ("api/pay.proto", ["common", "api"])  # from its folder
    plan = load_plan(str(out))
    paths = [str(tmp_path / "common"), str(tmp_path / "api")]
    assert plan.stack.proxy.proto == plan.stack.edge.proto == str(tmp_path / "api" / "pay.proto")
    assert plan.stack.proxy.proto_path == plan.stack.edge.proto_path == paths
    args = proxy_args(plan.stack.proxy, plan.seed)
    assert args[args.index("--proto"):] == ["--proto", str(tmp_path / "api" / "pay.proto"),
                                            "--proto-path", paths[0], "--proto-path", paths[1]]  # fmt: skip
    assert plan.stack.edge.request == {"amount": {"cents": 0}}
    assert not list(tmp_path.glob("*.pb"))
    dry = drill_inprocess("run", str(out), "--dry-run")  # the request is typed before the service is asked
    assert "  ok  edge method /pay.v1.Pay/Charge and its request resolve by .proto" in dry.stdout, dry.stdout


# --- the edge and the ports chosen -----------------------------------------------------------------
def test_the_edge_is_the_first_unary_method_or_the_one_named(shapes):
    _, methods = shapes
    assert starter.pick_edge(methods)[0].name == "/shapes.v1.Shapes/Unary"
    assert starter.pick_edge(methods[::-1]) == (methods[0], "the first unary method")  # not merely the first
    streams = [m for m in methods if Kind(m.kind) is not Kind.UNARY]
    assert starter.pick_edge(streams) == (streams[0], "the first method (none is unary)")
    for name in ("Watch", "Shapes/Watch", "shapes.v1.Shapes/Watch", "/shapes.v1.Shapes/Watch"):
        assert starter.pick_edge(methods, name)[0].name == "/shapes.v1.Shapes/Watch", name
    with pytest.raises(BadInput, match="no such method"):
        starter.pick_edge(methods, "Other/Watch")
    twice = [*methods, dataclasses_replace(methods[2], "/other.v1.Other/Watch")]
    with pytest.raises(BadInput, match="more than one method has that name"):
        starter.pick_edge(twice, "Watch")
    assert starter.pick_edge(twice, "other.v1.Other/Watch")[0].name == "/other.v1.Other/Watch"
    assert [starter.hop_name(s) for s in ("shop.v1.Cart", "Payments_API", "v2.9Ledger", "_")] == [
        "cart", "payments-api", "ledger", "service"]  # fmt: skip


def dataclasses_replace(method, name: str):
    import dataclasses

    return dataclasses.replace(method, name=name)


def test_the_proxy_ports_are_free_now_or_refused():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        busy = held.getsockname()[1]
        with pytest.raises(BadInput, match=f"--port {busy}: in use"):
            init_command.pick_port(busy, 50151, "--port")
        port, said = init_command.pick_port(None, busy, "--port")  # the default taken: the next free one after it
        assert busy < port < busy + init_command.PORT_TRIES and f"({busy} is taken)" in said
    free = free_port()
    assert init_command.pick_port(free, 50151, "--port") == (free, f"--port {free}, free now")
    with pytest.raises(BadInput, match="in use"):
        init_command.pick_port(free, 9565, "--metrics-port", taken=(free,))  # not the gRPC port twice
