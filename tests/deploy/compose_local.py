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
- **Images.** `build:` services (the project's image) run their command from the repo root (the
  image's /app) with this venv's executables, `/app/…` paths mapped to the repo, and the
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

Processes run in their own process groups and are stopped by PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import ipaddress
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
from typing import Any

import yaml

from tests.conftest import ROOT

VENV_BIN = pathlib.Path(sys.executable).parent
#: Images we can run locally, by repository name.
PROMETHEUS_IMAGE = "prom/prometheus"
_INTERP = re.compile(r"\$(?:\$|\{(?P<braced>[^}]*)\}|(?P<named>[A-Za-z_][A-Za-z0-9_]*))")
_LISTEN = "0A"


class ComposeError(RuntimeError):
    """The compose file asks for something these processes cannot do, or a service failed."""


# --- the compose file ---------------------------------------------------------------------------------
def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variable interpolation (`$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `$$`)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        expr = m.group("braced") if m.group("braced") is not None else m.group("named")
        for sep in (":-", "-"):
            if sep in expr:
                name, default = expr.split(sep, 1)
                got = env.get(name)
                if got is None or (sep == ":-" and got == ""):
                    return default
                return got
        return env.get(expr, "")

    return _INTERP.sub(one, value)


def load_compose(path: pathlib.Path, env: dict[str, str]) -> dict:
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))  # merge keys (<<) resolved by the loader
    return interpolate(spec, env)


def dockerfile_env(path: pathlib.Path) -> dict[str, str]:
    """The `ENV KEY=VALUE …` lines of a Dockerfile (with `\\` continuations)."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip().upper().startswith("ENV "):
            for item in shlex.split(line.strip()[4:]):
                key, _, value = item.partition("=")
                out[key] = value
    return out


def declared_ports(service: dict) -> set[int]:
    """Container ports a service declares: `expose` and the container side of `ports`."""
    ports = {int(p) for p in service.get("expose", [])}
    for p in service.get("ports", []):
        ports.add(int(str(p).rsplit(":", 1)[-1].split("/")[0]))
    return ports


def _address(hex_ip: str) -> str:
    """An address from /proc/net/tcp{,6}: 32-bit words in host (little-endian) order; v4-mapped as IPv4."""
    raw = b"".join(bytes.fromhex(hex_ip[i : i + 8])[::-1] for i in range(0, len(hex_ip), 8))
    ip = ipaddress.ip_address(raw)
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def listening_sockets(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket the process `pid` listens on (IPv4, IPv6, v4-mapped), from /proc."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return set()
    out = set()
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        try:
            lines = pathlib.Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and fields[9] in inodes:
                hex_ip, hex_port = fields[1].split(":")
                out.add((_address(hex_ip), int(hex_port, 16)))
    return out


# --- the running stack ------------------------------------------------------------------------------------
class Container:
    """One replica of a service: its address, process and log."""

    def __init__(self, service: str, index: int, address: str, log: pathlib.Path) -> None:
        self.service = service
        self.index = index
        self.address = address
        self.log = log
        self.proc: subprocess.Popen | None = None

    @property
    def name(self) -> str:
        return f"{self.service}-{self.index + 1}"

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class ComposeLocal:
    """compose/docker-compose.yml as local processes (see the module docstring)."""

    def __init__(
        self,
        compose_file: pathlib.Path,
        workdir: pathlib.Path,
        services: list[str],
        env: dict[str, str] | None = None,
    ) -> None:
        """`services`: what `docker compose up SERVICE…` would start (their dependencies too)."""
        self.file = compose_file
        self.dir = compose_file.parent
        self.workdir = workdir
        self.env = dict(env or {})
        self.spec = load_compose(compose_file, self.env)
        self.services: dict[str, dict] = self.spec["services"]
        self.planned = self._with_dependencies(services)
        base = f"127.{random.randint(100, 250)}.{random.randint(0, 255)}"
        self.containers: dict[str, list[Container]] = {}
        n = 10
        for name in self.planned:
            replicas = int((self.services[name].get("deploy") or {}).get("replicas", 1))
            self.containers[name] = []
            for i in range(replicas):
                log = workdir / f"{name}-{i + 1}.log"
                self.containers[name].append(Container(name, i, f"{base}.{n}", log))
                n += 1
        self.image_env = dockerfile_env(ROOT / "compose" / "Dockerfile")

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
        token = token.replace("/app/", f"{ROOT}/")
        return token

    def _argv(self, name: str, container: Container) -> list[str]:
        svc = self.services[name]
        command = svc.get("command")
        argv = shlex.split(command) if isinstance(command, str) else list(command or [])
        out = []
        for i, arg in enumerate(argv):
            out.append(self.rewrite(arg, container.address, argv[i - 1] if i else ""))
        image = svc.get("image", "")
        if "build" in svc:
            if not out:
                raise ComposeError(f"{name}: no command")
            return [self._executable(out[0]), *out[1:]]
        if image.split(":")[0] == PROMETHEUS_IMAGE:
            return self._prometheus_argv(name, container, out)
        raise ComposeError(f"{name}: image {image} cannot run without the engine")

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
            if set(job) & {k for k in job if k.endswith("_sd_configs")}:
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
        if "build" in svc:
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
    def up(self, timeout_s: float = 60.0) -> None:
        """Start every planned service in dependency order, waiting as `depends_on` asks."""
        deadline = time.monotonic() + timeout_s
        healthy: set[str] = set()
        for name in self.planned:
            for dep, cond in (self.services[name].get("depends_on") or {}).items():
                if (cond or {}).get("condition") == "service_healthy" and dep not in healthy:
                    self.wait_healthy(dep, deadline)
                    healthy.add(dep)
            for container in self.containers[name]:
                self._start(name, container)

    def _start(self, name: str, container: Container) -> None:
        argv = self._argv(name, container)
        env = self._environment(name, container)
        (self.workdir / container.name).mkdir(parents=True, exist_ok=True)
        with open(container.log, "w") as log:
            container.proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

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
        if "build" not in self.services[name]:
            raise ComposeError(f"{name}: healthcheck {args[0]} cannot run here")
        env = self._environment(name, container)
        proc = subprocess.run(
            [self._executable(args[0]), *args[1:]], cwd=ROOT, env=env, capture_output=True, timeout=10
        )
        return proc.returncode == 0

    def wait_healthy(self, name: str, deadline: float) -> None:
        for container in self.containers[name]:
            while not self.healthcheck(name, container):
                if container.proc is None or container.proc.poll() is not None:
                    code = None if container.proc is None else container.proc.returncode
                    raise ComposeError(f"{container.name} exited ({code}) before healthy:\n{container.log_tail()}")
                if time.monotonic() > deadline:
                    raise ComposeError(f"{container.name} not healthy in time:\n{container.log_tail()}")
                time.sleep(0.2)

    def wait_exit(self, name: str, timeout_s: float) -> list[int]:
        """Exit codes of every replica of `name`, waiting at most `timeout_s` in all."""
        deadline = time.monotonic() + timeout_s
        codes = []
        for c in self.containers[name]:
            try:
                codes.append(c.proc.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                raise ComposeError(f"{c.name} still running after {timeout_s} s:\n{c.log_tail()}") from None
        return codes

    def exited(self) -> list[str]:
        """Containers whose process ended: `NAME (exit CODE)`."""
        return [
            f"{c.name} (exit {c.proc.returncode})"
            for cs in self.containers.values()
            for c in cs
            if c.proc is not None and c.proc.poll() is not None
        ]

    def down(self) -> None:
        procs = [c.proc for cs in self.containers.values() for c in cs if c.proc is not None]
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=5)

    def __enter__(self) -> ComposeLocal:
        return self

    def __exit__(self, *exc) -> None:
        self.down()
