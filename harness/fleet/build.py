"""The one build step for the fleet's services that are not Python: `go build` of gohop, `npm ci` of nodehop.

Used by the tests, the install and any runner that starts the services: `ensure()` builds what is out of date and
returns where both are; a second call (or a second process: a file lock is held while building) finds them built
and does nothing. Go builds offline in GOPATH mode from Debian's packages (/usr/share/gocode: grpc-go,
OpenTelemetry Go; scripts/system-deps installs them) into `bin/` beside this file (DRILL_FLEET_BIN moves it);
npm installs the locked versions (package-lock.json) into nodehop/node_modules. A missing go, node or npm, or a
failed build, is one line (RunFailed), never a traceback.

    python -m harness.fleet.build      # builds both, prints their paths
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

from harness.core.environ import environ_now
from harness.core.errors import DrillError, RunFailed

HERE = pathlib.Path(__file__).resolve().parent
GO_SOURCE = HERE / "gohop"
NODE_SOURCE = HERE / "nodehop"
#: Debian's Go packages (golang-google-grpc-dev, golang-opentelemetry-otel-dev and what they need).
GOPATH = "/usr/share/gocode"
#: What a build may take on a busy two-core machine (a cold grpc-go build is ~1 min of CPU there).
BUILD_TIMEOUT_S = 900


@dataclasses.dataclass(frozen=True)
class Built:
    gohop: pathlib.Path
    #: The start of nodehop's command line: [node, .../hop.js]; its flags follow.
    nodehop: tuple[str, ...]


def bin_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("DRILL_FLEET_BIN") or HERE / "bin")


def _tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if not path:
        raise RunFailed(
            f"{name} is not installed: the fleet's services need it (scripts/system-deps installs {package})"
        )
    return path


@contextlib.contextmanager
def _locked(path: pathlib.Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # other processes wait for the one that builds
        yield


def _run(argv: list[str], what: str, **kwargs) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, **kwargs)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"{what} took over {BUILD_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        raise RunFailed(f"{what} failed: {lines[-1] if lines else f'exit {proc.returncode}'}")


def _digest(*parts: bytes) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def gohop() -> pathlib.Path:
    """The Go hop's binary, built if its source or the Go toolchain changed."""
    go = _tool("go", "golang-go")
    if not pathlib.Path(GOPATH, "src/go.opentelemetry.io/otel/propagation").is_dir():
        raise RunFailed(
            f"OpenTelemetry Go is not in {GOPATH} (scripts/system-deps installs golang-opentelemetry-otel-dev)"
        )
    version = subprocess.run([go, "version"], capture_output=True, text=True, check=False).stdout
    sources = sorted(GO_SOURCE.glob("*.go"))
    digest = _digest(version.encode(), *(p.read_bytes() for p in sources))
    out = bin_dir()
    binary, stamp = out / "gohop", out / "gohop.stamp"
    with _locked(out / "gohop.lock"):
        if binary.exists() and stamp.exists() and stamp.read_text() == digest:
            return binary
        cache = os.environ.get("GOCACHE") or str(pathlib.Path(tempfile.gettempdir(), "drill-gocache"))
        env = {**environ_now(), "GOPATH": GOPATH, "GO111MODULE": "off", "GOFLAGS": "", "CGO_ENABLED": "0"}
        env["GOCACHE"] = cache
        partial = out / "gohop.partial"
        _run([go, "build", "-o", str(partial), "."], "go build of harness/fleet/gohop", cwd=GO_SOURCE, env=env)
        partial.replace(binary)  # only a whole binary is ever found
        stamp.write_text(digest)
    return binary


def nodehop() -> tuple[str, ...]:
    """The Node hop's command (node, hop.js), its locked packages installed if the lockfile changed."""
    node = _tool("node", "nodejs")
    lock = NODE_SOURCE / "package-lock.json"
    digest = _digest(lock.read_bytes(), (NODE_SOURCE / "package.json").read_bytes())
    modules = NODE_SOURCE / "node_modules"
    stamp = modules / ".drill-stamp"
    with _locked(bin_dir() / "nodehop.lock"):
        if not (stamp.exists() and stamp.read_text() == digest):
            npm = _tool("npm", "npm")
            _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], "npm ci in harness/fleet/nodehop",
                 cwd=NODE_SOURCE)  # fmt: skip
            stamp.write_text(digest)
    return (node, str(NODE_SOURCE / "hop.js"))


def ensure() -> Built:
    """Both services, built where out of date."""
    return Built(gohop=gohop(), nodehop=nodehop())


def main() -> int:
    try:
        built = ensure()
    except DrillError as err:
        print(f"drill: {err}", file=sys.stderr)
        return err.exit_code
    print(f"gohop: {built.gohop}\nnodehop: {' '.join(built.nodehop)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
