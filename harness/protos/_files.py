"""A service's types from files: a `.proto` compiled through grpcio-tools, or a FileDescriptorSet read as written.

Both give a `FileDescriptorSet`, the form `protoc --include_imports --descriptor_set_out`
writes. Every failure is `BadInput` on one line that starts with the caller's name for
the input (`option`: `proxy: --proto`, `stack.edge.descriptor_set`, …), so each command
words its own errors and the reading is written once.
"""

from __future__ import annotations

import importlib.resources
import os
import pathlib
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf import descriptor_pb2

from harness.core.errors import BadInput


def compile_proto(path: str, include: Sequence[str] = (), *, option: str) -> bytes:
    """`path` compiled to a FileDescriptorSet's bytes, with every file it imports (`protoc --include_imports
    --descriptor_set_out`), through grpcio-tools.

    `include` are the import paths (`-I`; none: the .proto's own folder); protobuf's well-known types
    (`google/protobuf/*.proto`) are always found. Bad input: no grpcio-tools (naming the descriptor set
    alternative), no such file, or a .proto that does not compile (protoc's own lines, on one line)."""
    try:
        from grpc_tools import protoc
    except ImportError:
        raise BadInput(f"{option} needs grpcio-tools (pip install grpcio-tools), or give a descriptor set "
                       "(protoc --include_imports --descriptor_set_out=FILE your.proto)") from None  # fmt: skip
    proto = pathlib.Path(path)
    if not proto.is_file():
        raise BadInput(f"{option}: no file {proto}")
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "set.pb"
        includes = [f"-I{d}" for d in (include or [str(proto.parent)])]
        args = ["protoc", *includes, f"-I{well_known}", "--include_imports", f"--descriptor_set_out={out}",
                str(proto)]  # fmt: skip
        code, said = _stderr_of(lambda: protoc.main(args))
        if code != 0 or not out.exists():
            why = f": {_one_line(said)}" if said.strip() else ""
            raise BadInput(f"{option}: {proto} does not compile (protoc exit {code}){why}")
        return out.read_bytes()


def read_descriptor_set(path: str, *, option: str) -> descriptor_pb2.FileDescriptorSet:
    """The FileDescriptorSet in the file at `path`; bad input when it cannot be read or is not one."""
    try:
        data = pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise BadInput(f"{option}: cannot read {path} ({exc.strerror})") from None
    return parse_descriptor_set(data, option=f"{option}: {path}")


def parse_descriptor_set(data: bytes, *, option: str) -> descriptor_pb2.FileDescriptorSet:
    """`data` as a FileDescriptorSet; bad input when it is not one."""
    files = descriptor_pb2.FileDescriptorSet()
    try:
        files.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 - protobuf raises its own DecodeError (or others) on garbage
        raise BadInput(f"{option}: not a FileDescriptorSet ({exc})") from None
    return files


def _one_line(text: str, limit: int = 400) -> str:
    """protoc's lines joined by `; ` (our error is one line), cut at `limit` characters."""
    joined = "; ".join(part.strip() for part in text.splitlines() if part.strip())
    return joined if len(joined) <= limit else joined[: limit - 1] + "…"


def _stderr_of(run: Callable[[], Any]) -> tuple[Any, str]:
    """`run()`'s result and what it wrote to file descriptor 2 meanwhile: protoc (C++) writes its errors there
    itself, and our error is one line that carries them."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as captured:
            os.dup2(captured.fileno(), 2)
            try:
                result = run()
            finally:
                os.dup2(saved, 2)
            captured.seek(0)
            return result, captured.read().decode("utf-8", "replace")
    finally:
        os.close(saved)
