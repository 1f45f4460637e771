"""The Go probe service (tests/proxy/goprobe, grpc-go from Debian's packages) for the proxy's tests.

Built once per test session in GOPATH mode, offline, from Debian's golang-google-grpc-dev (scripts/system-deps
installs Go and it); its messages are built here from tests/proxy/probe.proto at test time (grpcio-tools), so
no generated code is kept on either side.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from harness.core.environ import environ_now

HERE = pathlib.Path(__file__).parent
PROTO = HERE / "probe.proto"
SERVICE = "/probe.v1.Probe/"
GOPATH = "/usr/share/gocode"  # Debian's Go packages (golang-google-grpc-dev and what it needs)


def build(out_dir: pathlib.Path | None = None) -> pathlib.Path:
    """The probe's binary (`out_dir` is accepted for callers that keep their own copy; it is built once, shared)."""
    return go_build(HERE / "goprobe")


def go_build(source: pathlib.Path) -> pathlib.Path:
    """`go build` of the program in `source` in GOPATH mode (no network): the binary's path.

    Built once per source and Go version into a shared cache (under the system temp directory, a lock
    around the build), so the test files that need it, on whichever workers, share one build; the compiled
    packages (grpc-go's) are cached across programs, so a second program takes seconds."""
    go = shutil.which("go")
    assert go, "go is not installed (scripts/system-deps installs golang-go)"
    version = subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout
    digest = hashlib.sha256(version.encode() + b"".join(
        p.read_bytes() for p in sorted(source.glob("*.go")))).hexdigest()[:16]  # fmt: skip
    tmp = pathlib.Path(tempfile.gettempdir())
    cache = tmp / f"drill-go-{source.name}-{digest}"
    cache.mkdir(exist_ok=True)
    binary = cache / source.name
    with open(cache / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers wait for the one that builds
        if binary.exists():
            return binary
        env = {**environ_now(), "GOPATH": GOPATH, "GO111MODULE": "off", "GOFLAGS": "",
               "GOCACHE": str(tmp / "drill-gocache"), "CGO_ENABLED": "0"}  # fmt: skip
        partial = cache / f"{source.name}.partial"
        proc = subprocess.run([go, "build", "-o", str(partial), "."], cwd=source, env=env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        partial.rename(binary)  # only a whole binary is ever found
    return binary


def descriptor_set(out: pathlib.Path) -> pathlib.Path:
    """probe.proto compiled to a FileDescriptorSet (what `drill proxy --descriptor-set` reads)."""
    from grpc_tools import protoc

    code = protoc.main(["protoc", f"-I{HERE}", f"--descriptor_set_out={out}", "--include_imports", str(PROTO)])
    assert code == 0, code
    return out


def message_class(descriptors: pathlib.Path):
    files = descriptor_pb2.FileDescriptorSet.FromString(descriptors.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in files.file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("probe.v1.Msg"))


@contextlib.contextmanager
def go_service(binary: pathlib.Path, tmp: pathlib.Path, port: int = 0):
    """The probe on 127.0.0.1:`port` (0: one the kernel picks); yields its address."""
    port_file = tmp / f"probe-{time.monotonic_ns()}.port"
    proc = subprocess.Popen([str(binary), str(port_file), str(port)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the probe service did not start in 30 s"
            time.sleep(0.01)
        yield f"127.0.0.1:{int(port_file.read_text())}"
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def drill_proxy(tmp: pathlib.Path, *args: str, env: dict[str, str] | None = None):
    """`drill proxy ARGS --ready-file …` as a process, as a user starts it; yields (process, its ready file's
    JSON) once it serves, its stderr (the audit lines) in TMP/proxy.log; terminated and waited for after."""
    from tests.conftest import ROOT

    ready, log_path = tmp / f"proxy-{time.monotonic_ns()}.json", tmp / "proxy.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "proxy", *args, "--ready-file", str(ready)],
                                cwd=ROOT, stderr=log, stdin=subprocess.DEVNULL,
                                env={**environ_now(), "PYTHONPATH": str(ROOT), **(env or {})})  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not ready.exists():
                assert proc.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "drill proxy did not serve in 60 s: " + log_path.read_text()
                time.sleep(0.05)
            yield proc, json.loads(ready.read_text())
        finally:
            proc.terminate()
            proc.wait(15)
