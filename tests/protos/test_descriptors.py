"""harness.protos: a service's methods, kinds and messages alike from a .proto, a descriptor set or reflection.

The .proto imports a file from an include path and one of protobuf's well-known types, as a real service's
does; reflection is asked of the demo service (`drill serve`'s) on 127.0.0.1, and of servers that cannot
answer it (none listening, no reflection, a port that accepts and never speaks).
"""

from __future__ import annotations

import asyncio
import importlib.resources
import pathlib
import socket
import threading
from concurrent import futures

import grpc
import pytest

from harness import protos
from harness.core.errors import BadInput
from harness.core.faults import Kind
from harness.core.settings import FaultSettings

SHOP = """syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
import "common/money.proto";
message AddRequest { string item = 1; common.v1.Money unit_price = 2; google.protobuf.Timestamp at = 3; }
message AddReply { string id = 1; }
service Cart {
  rpc Add(AddRequest) returns (AddReply);
  rpc Watch(AddRequest) returns (stream AddReply);
  rpc Upload(stream AddRequest) returns (AddReply);
  rpc Chat(stream AddRequest) returns (stream AddReply);
}
"""
MONEY = """syntax = "proto3";
package common.v1;
message Money { int64 amount_cents = 1; string currency_code = 2; }
"""
CART = {
    "/shop.v1.Cart/Add": Kind.UNARY,
    "/shop.v1.Cart/Watch": Kind.SERVER_STREAMING,
    "/shop.v1.Cart/Upload": Kind.CLIENT_STREAMING,
    "/shop.v1.Cart/Chat": Kind.BIDI_STREAMING,
}


@pytest.fixture
def shop(tmp_path) -> tuple[str, str]:
    """(the .proto, its include folder): shop.proto in one folder, what it imports under another."""
    (tmp_path / "api").mkdir()
    (tmp_path / "include" / "common").mkdir(parents=True)
    (tmp_path / "api" / "shop.proto").write_text(SHOP)
    (tmp_path / "include" / "common" / "money.proto").write_text(MONEY)
    return str(tmp_path / "api" / "shop.proto"), str(tmp_path / "include")


def test_a_protos_methods_come_with_their_kinds_and_messages_as_written(shop):
    proto, include = shop
    methods = protos.list_methods(proto=proto, include=[str(pathlib.Path(proto).parent), include])
    assert {m.name: m.kind for m in methods} == CART
    assert [m.name for m in methods] == list(CART)  # as the service declares them
    add = methods[0]
    assert (add.service, add.input.full_name, add.output.full_name) == ("shop.v1.Cart", "shop.v1.AddRequest",
                                                                        "shop.v1.AddReply")  # fmt: skip
    assert [f.name for f in add.input.fields] == ["item", "unit_price", "at"]
    money = add.input.fields_by_name["unit_price"].message_type
    assert [f.name for f in money.fields] == ["amount_cents", "currency_code"]
    # a request skeleton built from the input message parses and serializes
    request = protos.message_class(add.input)(item="book")
    request.unit_price.amount_cents = 1250
    assert protos.message_class(add.input).FromString(request.SerializeToString()).unit_price.amount_cents == 1250


def test_a_descriptor_set_gives_what_its_proto_gives(shop, tmp_path):
    proto, include = shop
    includes = [str(pathlib.Path(proto).parent), include]
    written = tmp_path / "shop.pb"
    written.write_bytes(protos.compile_proto(proto, includes, option="--proto"))
    from_set = protos.list_methods(descriptor_set=str(written))
    from_proto = protos.list_methods(proto=proto, include=includes)
    assert [(m.name, m.kind, m.input.full_name, m.output.full_name) for m in from_set] == \
        [(m.name, m.kind, m.input.full_name, m.output.full_name) for m in from_proto]  # fmt: skip
    with protos.from_descriptor_set(str(written), option="--descriptor-set") as types:
        assert types.services() == ["shop.v1.Cart"] and types.kinds() == CART and types.where == f"in {written}"


def test_a_set_without_its_imports_still_tells_kinds_and_says_what_its_types_lack(shop, tmp_path):
    from grpc_tools import protoc

    proto, include = shop
    bare = tmp_path / "bare.pb"  # written without --include_imports: shop.proto alone
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    assert protoc.main(["protoc", f"-I{pathlib.Path(proto).parent}", f"-I{include}", f"-I{well_known}",
                        f"--descriptor_set_out={bare}", proto]) == 0  # fmt: skip
    with protos.from_descriptor_set(str(bare), option="x: --descriptor-set") as types:
        assert types.kinds() == CART  # read from the file as written
        with pytest.raises(BadInput, match=r"^x: --descriptor-set: the types in .*bare.pb do not build .*"
                                           r"protoc --include_imports\)$"):  # fmt: skip
            types.methods()
        with pytest.raises(KeyError):
            types.service("shop.v1.Basket")


@pytest.mark.parametrize(
    "source, says",
    [
        ({"proto": "/nonexistent/a.proto"}, r"^init: --proto: no file /nonexistent/a\.proto$"),
        ({"descriptor_set": "/nonexistent/a.pb"}, r"^init: --proto: cannot read /nonexistent/a\.pb \(No such file"),
        ({"descriptor_set": "GARBAGE"}, r"^init: --proto: .*garbage\.pb: not a FileDescriptorSet \("),
        ({"proto": "BROKEN"}, r"^init: --proto: .*broken\.proto does not compile \(protoc exit 1\): .*proto:2:"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_naming_the_callers_option(tmp_path, source, says):
    (tmp_path / "garbage.pb").write_bytes(b"\xff\xff\xff not a descriptor set")
    (tmp_path / "broken.proto").write_text('syntax = "proto3";\nmessage A { int32 x = ; }\n')
    given = {k: {"GARBAGE": str(tmp_path / "garbage.pb"), "BROKEN": str(tmp_path / "broken.proto")}.get(v, v)
             for k, v in source.items()}  # fmt: skip
    with pytest.raises(BadInput) as err:
        protos.list_methods(**given, option="init: --proto")
    assert "\n" not in str(err.value)
    assert err.match(says)


def test_exactly_one_source():
    with pytest.raises(ValueError, match="one of proto, descriptor_set or target"):
        protos.list_methods(proto="a.proto", target="127.0.0.1:1")
    with pytest.raises(ValueError, match="one of proto, descriptor_set or target"):
        protos.list_methods()


def _demo_server(body):
    """`body(address)` run in a thread while the demo service (`drill serve`'s, with reflection) serves."""

    async def main():
        from harness.demo.serve import start_server

        server, port, _ = await start_server(settings=FaultSettings.from_env(service="demo"), metrics=False)
        try:
            return await asyncio.get_running_loop().run_in_executor(None, body, f"127.0.0.1:{port}")
        finally:
            await server.stop(0)

    return asyncio.run(main())


def test_reflection_lists_the_servers_own_methods_and_with_infra_its_health_too():
    def ask(address: str):
        own = protos.list_methods(target=address)
        with protos.from_reflection(address) as types:
            every = types.methods()
            services = types.services()
        return own, every, services

    own, every, services = _demo_server(ask)
    assert {m.name: m.kind for m in own} == {
        "/drill.v1.Demo/Call": Kind.UNARY, "/drill.v1.Demo/Write": Kind.UNARY,
        "/drill.v1.Demo/Stream": Kind.SERVER_STREAMING, "/drill.v1.Demo/Exchange": Kind.BIDI_STREAMING,
    }  # fmt: skip
    assert own[0].input.full_name == "drill.v1.CallRequest" and "payload" in own[0].input.fields_by_name
    assert "grpc.health.v1.Health" in services and "/grpc.health.v1.Health/Check" in {m.name for m in every}
    assert {m.name for m in own} < {m.name for m in every}


def test_reflection_that_cannot_be_asked_says_why():
    with socket.socket() as gone:  # a port nothing listens on
        gone.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{gone.getsockname()[1]}"
    with pytest.raises(protos.ReflectionError) as err:
        protos.list_methods(target=nobody)
    assert (err.value.code, str(err.value)) == ("UNAVAILABLE", f"{nobody} offers no server reflection (UNAVAILABLE)")

    server = grpc.server(futures.ThreadPoolExecutor(1))  # a gRPC server without reflection
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with pytest.raises(protos.ReflectionError) as err:
            protos.list_methods(target=f"127.0.0.1:{port}")
        assert err.value.code == "UNIMPLEMENTED"
    finally:
        server.stop(0)


def test_a_server_that_never_answers_ends_each_question_at_its_deadline():
    """A port that accepts and then says nothing (no HTTP/2): without a deadline the question would wait forever;
    with one it ends DEADLINE_EXCEEDED, the status only the deadline gives."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except OSError:
                pass

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        with pytest.raises(protos.ReflectionError) as err:
            protos.from_reflection(f"127.0.0.1:{silent.getsockname()[1]}", timeout_s=0.5)
        assert err.value.code == "DEADLINE_EXCEEDED"
    finally:
        stop.set()
        acceptor.join(5)
        for s in held:
            s.close()
        silent.close()
