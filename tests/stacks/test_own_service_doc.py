"""docs/stacks.md "Drill your own service", run as a user copies it.

The page's blocks are read from the page itself (not a copy): `shop.proto`, `cart.py` and `cart.yaml` are
written into an empty directory, the service is started with exactly the environment the page's shell block
shows (nothing of ours: no DRILL_* or PYTHONPATH of the test run leaks in) and `drill run` with exactly the
page's arguments, from that directory. The service is not in the repository: its proto and code are the
page's. Only the two ports change (50051 and 9464 are likely taken on a shared machine): each is replaced by
a free loopback port in every block that names it.

The hit set is exact: the drill user (2nd of 2 users, offset 1/2 of its 10/s period) sends cart-5-drill0-N-MIX at
N/10 + 1/20 s after the load's first second; those in the fault window [5 s, 15 s) carry the directive, and
seed 5 picks the same ones in the service and in this test (`is_hit`, contracts §4).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from harness.core.faults import is_hit
from harness.drills.load.schedule import ids_digest, request_id
from harness.procs.ports import wait_listening
from harness.procs.spawn import stop_processes
from tests.conftest import ROOT, side_by_side
from tests.ports import free_port

DOC = ROOT / "docs" / "stacks.md"
PORTS = ("50051", "9464")  # the service's gRPC and /metrics ports, as the page writes them
#: what a user's shell has beside what the page sets: where programs and their home are
BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")

pytestmark = pytest.mark.slow


def section() -> str:
    text = DOC.read_text()
    start = text.index("## Drill your own service")
    return text[start : text.index("\n## ", start + 1)]


def saved(name: str) -> str:
    """The fenced block that follows the page's `saved as `NAME`` (the file a user copies)."""
    m = re.search(rf"saved as `{re.escape(name)}`.*?```\w*\n(.*?)```", section(), re.S)
    assert m, f"docs/stacks.md shows no block saved as {name}"
    return m.group(1)


def shell() -> tuple[dict[str, str], list[str], list[str]]:
    """(the service's environment, its command, the drill command) from the page's shell block."""
    body = next(b for b in re.findall(r"```sh\n(.*?)```", section(), re.S) if "drill run" in b)
    env, service, drill = {}, None, None
    for line in body.splitlines():
        words = shlex.split(line, comments=True)
        assigns = [w for w in words if re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", w)]
        command = [w for w in words if w not in assigns and w != "&"]
        # the page runs the repository's venv (.venv/bin/python, .venv/bin/drill): the program's name decides
        program = pathlib.PurePath(command[0]).name if command else ""
        if program == "python":
            env, service = dict(a.split("=", 1) for a in assigns), command
        elif program == "drill" and command[1:2] == ["run"]:
            drill = command
    assert service and drill, body
    return env, service, drill


def predicted() -> set[str]:
    plan_seed, directive, ratio = 5, "abort:UNAVAILABLE", 50
    tagged = [request_id("cart", plan_seed, "mine", 1, "drill0", n) for n in range(250) if 5 <= n / 10 + 1 / 20 < 15]
    return {i for i in tagged if is_hit(plan_seed, i, directive, ratio)}


def run_the_page(tmp_path, drop: tuple[str, ...] = ()):
    """Write the page's files, start its service with its environment (less `drop`), run its drill command."""
    ports = {p: str(free_port()) for p in PORTS}
    for name in ("shop.proto", "cart.py", "cart.yaml"):
        text = saved(name)
        for old, new in ports.items():
            text = text.replace(old, new)
        (tmp_path / name).write_text(text)
    assert all(p in saved("cart.py") and p in saved("cart.yaml") for p in PORTS)  # the swap is a real one
    env, service, drill = shell()
    assert {"DRILL_SERVICE", "DRILL_FAULT_ENABLED", "DRILL_FAULT_SEED"} <= set(env), env
    user = {k: os.environ[k] for k in BASE_ENV if k in os.environ}
    served = {**user, **{k: v for k, v in env.items() if k not in drop}}
    # `python` is the Python drill harness is installed in (the page says so): this one
    with open(tmp_path / "service.log", "wb") as log:  # from the directory the files are in, as a user does
        proc = subprocess.Popen([sys.executable, *service[1:]], cwd=tmp_path, env=served, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        assert wait_listening(proc, 60, count=2), (tmp_path / "service.log").read_text()[-2000:]
        run = subprocess.run([sys.executable, "-m", "harness.cli", *drill[1:]], cwd=tmp_path, env=user,
                             capture_output=True, text=True, timeout=180)  # fmt: skip
        metrics = _metrics(ports["9464"])
    finally:
        stop_processes([proc])
    out = tmp_path / drill[drill.index("--out") + 1]
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
    return run, results, metrics, (tmp_path / "service.log").read_text(), ports


def _metrics(port: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """The page run twice side by side, as written and without DRILL_SERVICE: each in a folder of its own, with
    ports of its own (`run_the_page` swaps the page's for free ones)."""
    tmp = {name: tmp_path_factory.mktemp(name) for name in ("as-written", "no-name")}
    with side_by_side(**{
        "as-written": lambda: run_the_page(tmp["as-written"]),
        "no-name": lambda: run_the_page(tmp["no-name"], drop=("DRILL_SERVICE",)),
    }) as results:  # fmt: skip
        yield results


def test_the_pages_own_service_is_hit_exactly_where_the_seed_predicts(pages):
    run, r, _, log, _ = pages["as-written"]()
    assert run.returncode == 0, run.stderr[-3000:]
    (t,) = r["configs"]["mine"]["trials"]
    h, want = t["hits"], predicted()
    assert (h["expected"], h["expected_digest"]) == (len(want), ids_digest(want)) and want
    # marked: the ids the service itself answered with the x-drill-fault marker
    assert (h["marked"], h["marked_digest"]) == (h["expected"], h["expected_digest"]), h
    assert h["as_planned"] is True and h["note"] is None and r["notes"] == []
    assert "calls itself 'drill'" not in log  # it named itself: no warning


def test_the_same_service_without_its_name_exits_4_before_any_fault_with_the_cause_on_one_line(pages):
    run, r, metrics, log, ports = pages["no-name"]()
    lines = [line for line in run.stderr.splitlines() if line.startswith("drill:")]
    assert run.returncode == 4 and len(lines) == 1, (run.returncode, run.stderr[-3000:])
    line = lines[0]
    assert line == run.stderr.strip().splitlines()[-1] and "Traceback" not in run.stderr
    # the line the page shows, as the page shows it (but for the port)
    shown = re.search(r"^drill: hop cart: .*$", section(), re.M).group(0)
    assert line == shown.replace(":9464/", f":{ports['9464']}/"), (line, shown)
    # refused before its first trial: nothing measured, and the service saw no call at all
    assert r is None and "drill_server_calls_total{" not in metrics
    # and the service said so itself, once, when it started
    assert log.count("calls itself 'drill' (the default)") == 1, log[-2000:]
