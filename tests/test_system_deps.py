"""Every program the tests run that pip does not install, `scripts/system-deps` installs (from Debian).

A test that needs a program fails without it (tests/deploy/kube.py `tool`: never a silent skip, so CI proves
the check ran); `make test` runs scripts/system-deps first, so on a fresh Debian the project's own files
install all of them. This reads the tests for the programs they look up and the script for what it checks.
"""

from __future__ import annotations

import re

from harness.procs.prometheus import PROMETHEUS
from tests.conftest import ROOT

#: Programs the tests look up that come with pip (the venv's bin) or with every Debian (util-linux).
NOT_SYSTEM_DEPS = {
    "locust": "pip (load extra)", "ruff": "pip (dev extra)", "setpriv": "util-linux", "setsid": "util-linux",
    "sh": "dash (essential)", "sleep": "coreutils (essential)",
}  # fmt: skip
#: Program -> the Debian package that provides it, where the names differ.
PACKAGE = {"promtool": "prometheus", "node": "nodejs", "go": "golang-go"}


def looked_up() -> set[str]:
    found = set()
    for path in (ROOT / "tests").rglob("*.py"):
        text = path.read_text()
        found |= set(re.findall(r"""(?:\btool|shutil\.which)\(\s*["']([a-z0-9_.-]+)["']""", text))
        # programs run directly: subprocess.run(["git", ...])
        found |= set(re.findall(r"""subprocess\.(?:run|check_output|Popen)\(\s*\[\s*["']([a-z0-9_.-]+)["']""", text))
    return found | {PROMETHEUS}


def test_the_scan_sees_the_tools_the_deploy_tests_need():
    assert {"kubectl", "node", "npm", "promtool", "prometheus", "chromium", "git", "go", "java", "javac"} <= looked_up()


def test_system_deps_installs_every_program_the_tests_run():
    script = (ROOT / "scripts" / "system-deps").read_text()
    checked = set(re.findall(r"command -v ([a-z0-9_.-]+)", script))
    wanted = looked_up() - set(NOT_SYSTEM_DEPS)
    missing = sorted(p for p in wanted if p not in checked and PACKAGE.get(p) not in checked)
    assert not missing, f"tests run {missing}, which scripts/system-deps neither checks nor installs"


def test_system_deps_installs_the_go_packages_the_proxy_tests_build_with():
    """tests/proxy/probe.py builds in GOPATH mode from Debian's grpc-go, which `command -v` cannot see."""
    from tests.proxy.probe import GOPATH

    script = (ROOT / "scripts" / "system-deps").read_text()
    assert f"{GOPATH}/src/google.golang.org/grpc" in script and "golang-google-grpc-dev" in script


def test_system_deps_and_ci_install_what_the_fleets_go_hop_builds_with():
    """harness/fleet/build.py builds the Go hop in GOPATH mode from Debian's OpenTelemetry Go too."""
    from harness.fleet.build import GOPATH as FLEET_GOPATH

    script = (ROOT / "scripts" / "system-deps").read_text()
    assert f"{FLEET_GOPATH}/src/go.opentelemetry.io/otel/propagation" in script
    assert "golang-opentelemetry-otel-dev" in script
    assert "golang-opentelemetry-otel-dev" in (ROOT / ".ci" / "run").read_text()


def test_system_deps_and_ci_install_the_jars_the_grpc_java_client_builds_with():
    """tests/link/test_languages.py compiles a grpc-java client against Debian's jars, which `command -v` cannot see:
    every jar it puts on the classpath is one the script checks for, with its package, and CI installs them."""
    from tests.link.test_languages import JARS

    script = (ROOT / "scripts" / "system-deps").read_text()
    checked = dict(re.findall(r"([a-z0-9-]+):(lib[a-z0-9-]+-java)", script))  # jar -> its Debian package
    packages = {"grpc": "libgrpc-java", "netty": "libnetty-java", "perfmark": "libperfmark-java",
                "guava": "libguava-java"}  # fmt: skip
    for jar in JARS:
        package = packages[jar.split("-")[0]]
        assert package in checked.values(), f"{jar}.jar: {package} not checked"
    assert set(checked.values()) <= set((ROOT / ".ci" / "run").read_text().split())
    assert "default-jdk-headless" in script and "default-jdk-headless" in (ROOT / ".ci" / "run").read_text()


def test_ci_runs_the_readme_test_command_which_runs_system_deps():
    makefile = (ROOT / "Makefile").read_text()
    test_recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "scripts/system-deps" in test_recipe
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_system_deps_and_ci_install_what_the_link_kernel_tests_run():
    """tests/link/test_kernel.py drops packets with nft in a network namespace (`ip netns`) and reads `ss`."""
    assert {"nft", "ip", "ss"} <= looked_up()
    script = (ROOT / "scripts" / "system-deps").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    for package in ("nftables", "iproute2"):
        assert f"need+=({package})" in script and f" {package} " in ci, package
