"""The compose stack without the engine: compose/docker-compose.yml run as local processes.

`ComposeLocal` reads the compose file and starts each service's command and environment as a
local process, the way compose would start its container, so a wrong flag, a mismatched port or
a broken healthcheck shows here before a user meets it:

- **Networking.** Each container (service replica) gets its own loopback address in a /24 of
  127.0.0.0/8 picked at random per stack (Linux routes all of 127.0.0.0/8 to `lo`). Service names
  are rewritten to those addresses as compose's DNS would answer (`order:50051`, `http://jaeger:4317`,
  the value of a `--…-host` flag), `0.0.0.0` and `127.0.0.1`/`localhost` to the container's own
  address. Ports stay as declared: nothing is remapped, so a connection to a port the compose
  file's command does not serve simply fails, and no port is picked for another process to bind.
- **Images.** Services on the project's image (the one a `build:` service builds, whether they
  build it or name it) run their command from the repo root (the image's /app) with this venv's
  executables, `/app/…` paths mapped to the repo, and the
  Dockerfile's `ENV`. `prom/prometheus` runs the local `prometheus` with the compose config's
  `dns_sd_configs` turned into static targets (the addresses compose DNS would return, with
  `__meta_dns_name` kept for the relabelling) and the same rule files. Grafana and Jaeger cannot
  run here: starting them is an error (their provisioning is checked as files).
- **Order and health.** `depends_on` is honoured: a dependent starts once its dependencies started
  or, for `service_healthy`, once their healthcheck passes. Healthchecks run as compose would
  (`CMD python /app/…` with the venv's Python; `CMD wget -q -O /dev/null URL` as an HTTP GET).
- **Environment.** Only what a container would see: the Dockerfile's `ENV`, the service's
  `environment` (interpolated from `env`, the shell of `docker compose`; a variable without a
  value is passed through from `env` when set there), PATH and HOME. Nothing leaks from the
  test process.

- **Switching.** `recreate(env)` is `K=V docker compose up -d --wait` again: the containers whose
  command, environment or labels changed are stopped and started on the same addresses, the others kept.
  The stack's state (addresses, PIDs, the shell's variables) lives in WORKDIR/state.json, so a
  drill's switch command, a process of its own, can do it: tests/deploy/compose_switch.py.

Processes run in their own sessions and are stopped by PID (SIGTERM to the group, then SIGKILL),
only after checking that the PID is still the process started for that container.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import random
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request

import yaml

from tests.conftest import ROOT
from tests.deploy.compose_spec import (
    ComposeError,
    declared_ports,
    dockerfile_env,
    interpolate,
    listening_sockets,
    load_compose,
)

__all__ = ["ComposeError", "ComposeLocal", "declared_ports", "interpolate", "listening_sockets"]

VENV_BIN = pathlib.Path(sys.executable).parent
#: Images we can run locally, by repository name.
PROMETHEUS_IMAGE = "prom/prometheus"
#: the project's image's Dockerfile, as the compose file names it (relative to its build context, the repo)
PROJECT_DOCKERFILE = "compose/Dockerfile"


# --- the running stack ------------------------------------------------------------------------------------
class Container:
    """One replica of a service: its address, and the process (by PID) that plays it."""

    def __init__(self, service: str, index: int, address: str, log: pathlib.Path) -> None:
        self.service = service
        self.index = index
        self.address = address
        self.log = log
        self.pid: int | None = None
        #: sha256 of the command and environment it was started with: a change means "recreate"
        self.fingerprint = ""
        self.proc: subprocess.Popen | None = None  # when started by this process (for the exit code)

    @property
    def name(self) -> str:
        return f"{self.service}-{self.index + 1}"

    def running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        if self.pid is None:
            return False
        try:  # not a zombie, and still the program we started (PIDs are reused)
            stat = pathlib.Path(f"/proc/{self.pid}/stat").read_text()
            environ = pathlib.Path(f"/proc/{self.pid}/environ").read_bytes()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z" and f"COMPOSE_LOCAL_CONTAINER={self.name}".encode() in environ

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class ComposeLocal:
    """compose/docker-compose.yml as local processes (see the module docstring)."""

    def __init__(
        self,
        compose_file: pathlib.Path | list[pathlib.Path],
        workdir: pathlib.Path,
        services: list[str],
        env: dict[str, str] | None = None,
        *,
        network: str | None = None,
    ) -> None:
        """`services`: what `docker compose up SERVICE…` would start (their dependencies too);
        `env`: the shell `docker compose` runs in; `network`: the /24 (`127.A.B`), random if None."""
        #: the files, merged in order (`docker compose -f A -f B`); paths in them are relative to the first's folder
        self.files = [compose_file] if isinstance(compose_file, pathlib.Path) else list(compose_file)
        self.file = self.files[0]
        self.dir = self.file.parent
        self.workdir = workdir
        self.requested = list(services)
        self.env = dict(env or {})
        self.spec = load_compose(self.files, self.env)
        self.services: dict[str, dict] = self.spec["services"]
        self.planned = self._with_dependencies(services)
        self.network = network or f"127.{random.randint(100, 250)}.{random.randint(0, 255)}"
        self.containers: dict[str, list[Container]] = {}
        n = 10
        for name in self.planned:
            replicas = int((self.services[name].get("deploy") or {}).get("replicas", 1))
            self.containers[name] = []
            for i in range(replicas):
                log = workdir / f"{name}-{i + 1}.log"
                self.containers[name].append(Container(name, i, f"{self.network}.{n}", log))
                n += 1
        self.image_env = dockerfile_env(ROOT / "compose" / "Dockerfile")
        #: the project's image, as some service builds it (compose/Dockerfile): every service naming it runs from
        #: the repo
        self.built_images = {svc.get("image") for svc in self.services.values() if self._builds_project(svc)}

    @staticmethod
    def _builds_project(svc: dict) -> bool:
        build = svc.get("build")
        return build is not None and (not isinstance(build, dict) or build.get("dockerfile") == PROJECT_DOCKERFILE)

    def project_image(self, name: str) -> bool:
        """Whether service `name` runs the project's image (builds it, or names the image a service builds)."""
        svc = self.services[name]
        return self._builds_project(svc) or svc.get("image") in self.built_images

    # -- plan --------------------------------------------------------------------------------------------
    def _with_dependencies(self, services: list[str]) -> list[str]:
        order: list[str] = []

        def visit(name: str) -> None:
            if name in order:
                return
            if name not in self.services:
                raise ComposeError(f"no service {name!r} in {self.file}")
            for dep in self.services[name].get("depends_on") or {}:
                visit(dep)
            order.append(name)

        for s in services:
            visit(s)
        return order

    def addresses(self, service: str) -> list[str]:
        """What compose DNS answers for a service name: every replica's address."""
        return [c.address for c in self.containers.get(service, [])]

    def address(self, service: str) -> str:
        addrs = self.addresses(service)
        if not addrs:
            raise ComposeError(f"service {service!r} is not part of this stack")
        return addrs[0]

    # -- rewriting a container's view to local processes ---------------------------------------------------
    def _host(self, host: str, own: str) -> str:
        if host in ("0.0.0.0", "127.0.0.1", "localhost"):
            return own
        if len(self.addresses(host)) > 1:  # compose DNS would answer every replica: one address would lie
            raise ComposeError(f"{host} has {len(self.addresses(host))} replicas: one address cannot stand for them")
        if self.addresses(host):
            return self.addresses(host)[0]
        return host  # not a started service: no DNS record, as in compose

    def rewrite(self, token: str, own: str, previous: str = "") -> str:
        """One argument or value as seen from inside the container at `own`."""
        if previous.startswith("--") and previous.endswith("-host") and ":" not in token:
            return self._host(token, own)
        if token in ("0.0.0.0", "127.0.0.1", "localhost"):
            return own

        def hostport(m: re.Match) -> str:
            return f"{m.group(1)}{self._host(m.group(2), own)}:{m.group(3)}"

        token = re.sub(r"(^|=|//)([A-Za-z0-9_.-]+):(\d+)", hostport, token)
        return token.replace("/app/", f"{ROOT}/")

    def _argv(self, name: str, container: Container) -> list[str]:
        svc = self.services[name]
        command = svc.get("command")
        argv = shlex.split(command) if isinstance(command, str) else list(command or [])
        out = [self.rewrite(arg, container.address, argv[i - 1] if i else "") for i, arg in enumerate(argv)]
        image = svc.get("image", "")
        if self.project_image(name):
            if not out:
                raise ComposeError(f"{name}: no command")
            return [self._executable(out[0]), *out[1:]]
        if image.split(":")[0] == PROMETHEUS_IMAGE:
            return self._prometheus_argv(name, container, out)
        go = self._go_program(name)
        if go is not None:  # its image's ENTRYPOINT is the program, the command its arguments
            return [str(go), *out]
        raise ComposeError(f"{name}: image {image} cannot run without the engine")

    def _go_program(self, name: str) -> pathlib.Path | None:
        """A service whose image is built from a Go program (a Dockerfile beside its `.go` files): the program,
        built here from the same sources (tests/proxy/probe.go_build: Debian's Go and grpc-go, offline)."""
        build = self.services[name].get("build")
        if not isinstance(build, dict) or not build.get("dockerfile"):
            return None
        source = (self.dir / build.get("context", ".") / build["dockerfile"]).resolve().parent
        if not list(source.glob("*.go")):
            return None
        from tests.proxy.probe import go_build

        return go_build(source)

    @staticmethod
    def _executable(program: str) -> str:
        local = VENV_BIN / program
        return str(local) if local.exists() else program

    def _container_path(self, name: str, path: str) -> str:
        """A path inside the container, on the host: through the service's bind mounts."""
        for vol in self.services[name].get("volumes", []):
            source, target = vol.split(":")[:2]
            if path == target or path.startswith(target.rstrip("/") + "/"):
                return str((self.dir / source).resolve()) + path[len(target.rstrip("/")) :]
        return path

    def _prometheus_argv(self, name: str, container: Container, args: list[str]) -> list[str]:
        out = ["prometheus"]
        home = self.workdir / container.name
        home.mkdir(parents=True, exist_ok=True)
        for arg in args:
            flag, _, value = arg.partition("=")
            if flag == "--config.file":
                arg = f"{flag}={self._prometheus_config(pathlib.Path(self._container_path(name, value)), container)}"
            elif flag == "--storage.tsdb.path":
                arg = f"{flag}={home / 'data'}"  # the container's own filesystem
            out.append(arg)
        return out

    def _prometheus_config(self, path: pathlib.Path, container: Container) -> pathlib.Path:
        """The compose Prometheus config with DNS service discovery resolved as compose DNS would."""
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        config["rule_files"] = [str(path.parent / pattern) for pattern in config.get("rule_files", [])]
        for job in config.get("scrape_configs", []):
            static = []
            for group in job.pop("static_configs", []):
                targets = [self.rewrite(t, container.address) for t in group["targets"]]
                static.append({**group, "targets": targets})
            for sd in job.pop("dns_sd_configs", []):
                if sd.get("type", "SRV") != "A":
                    raise ComposeError(f"{job['job_name']}: only A-record discovery can be resolved here")
                for dns_name in sd["names"]:
                    targets = [f"{a}:{sd['port']}" for a in self.addresses(dns_name)]
                    if targets:
                        static.append({"targets": targets, "labels": {"__meta_dns_name": dns_name}})
            if [k for k in job if k.endswith("_sd_configs")]:
                raise ComposeError(f"{job['job_name']}: service discovery other than DNS")
            job["static_configs"] = static
        out = self.workdir / container.name / "prometheus.yml"
        out.write_text(yaml.safe_dump(config, sort_keys=False))
        return out

    def _environment(self, name: str, container: Container) -> dict[str, str]:
        svc = self.services[name]
        env = {
            "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.workdir / container.name),
            "LANG": "C.UTF-8",
            "HOSTNAME": container.name,
        }
        if self.project_image(name):
            env.update(self.image_env)
        raw = svc.get("environment") or {}
        if isinstance(raw, list):
            raw = dict(item.split("=", 1) if "=" in item else (item, None) for item in raw)
        for key, value in raw.items():
            if value is None:  # passed through from the shell when set there
                if key in self.env:
                    env[key] = self.env[key]
                continue
            env[key] = self.rewrite(str(value), container.address)
        return env

    # -- lifecycle -------------------------------------------------------------------------------------------
    def up(self, timeout_s: float = 60.0, only: set[str] | None = None) -> None:
        """Start every planned service (or those in `only`) in dependency order, waiting as
        `depends_on` asks, like `docker compose up -d`."""
        deadline = time.monotonic() + timeout_s
        healthy: set[str] = set()
        for name in self.planned:
            if only is not None and name not in only:
                continue
            for dep, cond in (self.services[name].get("depends_on") or {}).items():
                if (cond or {}).get("condition") == "service_healthy" and dep not in healthy:
                    self.wait_healthy(dep, deadline)
                    healthy.add(dep)
            for container in self.containers[name]:
                self._start(name, container)

    def recreate(self, env: dict[str, str], timeout_s: float = 60.0) -> list[str]:
        """`docker compose up -d --wait` again with another shell environment (`DRILL_CONFIG=…`):
        recreate the containers whose command or environment changed, keep the others; returns the
        recreated containers' names once every service with a healthcheck is healthy again."""
        self.env = dict(env)
        self.spec = load_compose(self.files, self.env)
        self.services = self.spec["services"]
        for name in self.planned:
            want = int((self.services[name].get("deploy") or {}).get("replicas", 1))
            if want != len(self.containers[name]):
                raise ComposeError(f"{name}: {want} replicas asked, {len(self.containers[name])} run: not scaled here")
        changed = {  # among the containers up now; what was never started stays so
            name
            for name in self.planned
            for c in self.containers[name]
            if c.pid is not None and (self._fingerprint(name, c) != c.fingerprint or not c.running())
        }
        self._stop([c for name in changed for c in self.containers[name]])
        self.up(timeout_s, only=changed)
        deadline = time.monotonic() + timeout_s
        for name in self.planned:
            if name in changed and (self.services[name].get("healthcheck") or {}).get("test"):
                self.wait_healthy(name, deadline)
        self.save()
        return [c.name for name in self.planned if name in changed for c in self.containers[name]]

    def _fingerprint(self, name: str, container: Container) -> str:
        labels = self.services[name].get("labels") or {}
        blob = json.dumps([self._argv(name, container), self._environment(name, container), labels], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _start(self, name: str, container: Container) -> None:
        argv = self._argv(name, container)
        env = self._environment(name, container)
        container.fingerprint = self._fingerprint(name, container)
        env["COMPOSE_LOCAL_CONTAINER"] = container.name  # how running() recognises its process
        (self.workdir / container.name).mkdir(parents=True, exist_ok=True)
        with open(container.log, "a") as log:
            container.proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        container.pid = container.proc.pid

    def healthcheck(self, name: str, container: Container) -> bool:
        test = (self.services[name].get("healthcheck") or {}).get("test")
        if not test:
            raise ComposeError(f"{name} has no healthcheck")
        if test[0] != "CMD":
            raise ComposeError(f"{name}: healthcheck {test[0]} is not supported here")
        args = [self.rewrite(a, container.address) for a in test[1:]]
        if args[:4] == ["wget", "-q", "-O", "/dev/null"] and len(args) == 5:
            try:
                with urllib.request.urlopen(args[4], timeout=3) as r:
                    return 200 <= r.status < 300
            except OSError:
                return False
        if not self.project_image(name) and self._go_program(name) is None:  # the Go images carry the probe
            raise ComposeError(f"{name}: healthcheck {args[0]} cannot run here")
        env = self._environment(name, container)
        try:
            proc = subprocess.run(
                [self._executable(args[0]), *args[1:]], cwd=ROOT, env=env, capture_output=True, timeout=10
            )
        except subprocess.TimeoutExpired:  # as compose counts it: a failed check, tried again until the retries end
            return False
        return proc.returncode == 0

    def wait_healthy(self, name: str, deadline: float) -> None:
        for container in self.containers[name]:
            while not self.healthcheck(name, container):
                if not container.running():
                    raise ComposeError(f"{container.name} exited before healthy:\n{container.log_tail()}")
                if time.monotonic() > deadline:
                    raise ComposeError(f"{container.name} not healthy in time:\n{container.log_tail()}")
                time.sleep(0.2)

    def wait_exit(self, name: str, timeout_s: float) -> list[int]:
        """Exit codes of every replica of `name` (started by this process), waiting at most `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        codes = []
        for c in self.containers[name]:
            if c.proc is None:
                raise ComposeError(f"{c.name} was not started by this process: no exit code to read")
            try:
                codes.append(c.proc.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                raise ComposeError(f"{c.name} still running after {timeout_s} s:\n{c.log_tail()}") from None
        return codes

    def exited(self) -> list[str]:
        """Containers that were started and whose process has ended."""
        return [c.name for cs in self.containers.values() for c in cs if c.pid is not None and not c.running()]

    def _stop(self, containers: list[Container]) -> None:
        """SIGTERM each process group we started, SIGKILL what is left after 5 s."""
        live = [c for c in containers if c.running()]
        for c in live:
            try:
                os.killpg(c.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        for c in live:
            while c.running() and time.monotonic() < deadline:
                time.sleep(0.05)
            if c.running():
                try:
                    os.killpg(c.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if c.proc is not None:
                c.proc.wait(timeout=5)

    def down(self) -> None:
        self._stop([c for cs in self.containers.values() for c in cs])
        self.save()

    # -- state, for switch commands run in other processes ------------------------------------------------------
    def save(self) -> None:
        state = {
            "files": [str(f) for f in self.files],
            "services": self.requested,
            "env": self.env,
            "network": self.network,
            "containers": {
                c.name: {"pid": c.pid, "fingerprint": c.fingerprint} for cs in self.containers.values() for c in cs
            },
        }
        (self.workdir / "state.json").write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, workdir: pathlib.Path) -> ComposeLocal:
        state = json.loads((workdir / "state.json").read_text())
        files = [pathlib.Path(f) for f in state["files"]]
        stack = cls(files, workdir, state["services"], state["env"], network=state["network"])
        for cs in stack.containers.values():
            for c in cs:
                saved = state["containers"].get(c.name, {})
                c.pid, c.fingerprint = saved.get("pid"), saved.get("fingerprint", "")
        return stack

    def __enter__(self) -> ComposeLocal:
        return self

    def __exit__(self, *exc) -> None:
        self.down()


def run_stack_file(stack: ComposeLocal, stack_file: pathlib.Path, workdir: pathlib.Path,
                   **plan_changes) -> subprocess.CompletedProcess:  # fmt: skip
    """`drill run STACK-FILE --out WORKDIR/out` against `stack` as documented, with only what needs the engine
    replaced: the published ports by the containers' own addresses, each `K=V docker compose … up -d --wait`
    switch by `compose_switch … recreate -e DRILL_CONFIG=NAME` on the stack's state, and the audit command
    (`docker compose logs ledger`) by the ledger's log file. `plan_changes` update the plan (trials, phases)."""
    plan = yaml.safe_load(stack_file.read_text())
    spec = plan["stack"]
    spec["edge"]["address"] = f"{stack.address('gateway')}:50051"
    spec["prometheus"] = f"http://{stack.address('prometheus')}:9090"
    for config in spec["configs"]:
        assert "docker compose" in config["switch"] and f"DRILL_CONFIG={config['name']}" in config["switch"]
        config["switch"] = (f"{sys.executable} -m tests.deploy.compose_switch --state {stack.workdir} recreate "
                            f"-e DRILL_CONFIG={config['name']}")  # fmt: skip
    assert spec["audit"]["command"].endswith(" ledger"), spec["audit"]
    spec["audit"] = {"files": [str(stack.containers["ledger"][0].log)]}  # the ledger's container log
    plan.update(plan_changes)
    path = workdir / "stack.yaml"
    path.write_text(yaml.safe_dump(plan))
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(path), "--out", str(workdir / "out"), "--no-live"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
