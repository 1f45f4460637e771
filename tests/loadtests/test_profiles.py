"""Profiles are Locust config files that name the locustfile and only known options."""

from __future__ import annotations

import re
import subprocess

from tests.loadtests.conftest import LOCUST, PROFILES, ROOT

KNOWN_DRILL = {
    "drill-tenant", "drill-directive", "drill-ratio", "drill-target", "drill-instances", "drill-config",
    "drill-plan", "drill-phases", "drill-users", "drill-weights", "drill-rate", "drill-timeout",
    "drill-cancel-ms", "drill-cancel-share", "drill-metrics-port", "drill-metrics-host",
    "drill-metrics-fixed", "drill-threadpool", "drill-organic-rate",
}  # fmt: skip


def _keys(path):
    keys = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        keys[key.strip()] = value.strip()
    return keys


def test_every_profile_points_at_the_locustfile_and_uses_known_drill_options():
    profiles = sorted(PROFILES.glob("*.conf"))
    assert {p.stem for p in profiles} >= {"smoke", "throughput"}
    for path in profiles:
        keys = _keys(path)
        assert keys.get("locustfile") == "loadtests/locustfile.py", path
        unknown = {k for k in keys if k.startswith("drill-")} - KNOWN_DRILL
        assert not unknown, f"{path.name}: unknown options {unknown}"


def test_the_retry_storm_profile_offers_the_plans_load():
    """The compose and Kubernetes stacks run the plan through this profile: the same users and rates."""
    import yaml

    plan = yaml.safe_load((ROOT / "harness" / "plans" / "retry-storm.yaml").read_text())["traffic"]
    keys = _keys(PROFILES / "retry-storm.conf")
    assert float(keys["drill-rate"]) == plan["drill_rate"]
    assert float(keys["drill-organic-rate"]) == plan["organic_rate"]
    assert int(keys["drill-users"]) == plan["organic_users"] + plan["drill_users"]
    assert keys["drill-weights"] == f"organic={plan['organic_users']},drill={plan['drill_users']}"
    assert float(keys["drill-timeout"]) == plan["timeout_s"]


def test_smoke_profile_has_no_shape_and_a_partial_ratio():
    keys = _keys(PROFILES / "smoke.conf")
    assert not keys.get("drill-phases")
    assert keys.get("drill-directive")
    assert 0 < int(keys["drill-ratio"]) < 100


def test_shaped_profiles_name_a_fault_phase():
    for path in PROFILES.glob("*.conf"):
        phases = _keys(path).get("drill-phases")
        if phases:
            assert re.search(r"(^|,)\s*fault=", phases), path.name


def test_bad_drill_options_stop_locust_with_a_usage_error():
    out = subprocess.run(
        [LOCUST, "-f", "loadtests/locustfile.py", "--headless", "--host", "127.0.0.1:1", "--drill-phases", "warmup"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2
    assert "--drill-phases" in out.stderr and "Traceback" not in out.stderr


def test_python_m_loadtests_help_lists_the_drill_options():
    """`locust --help` prints before any locustfile is imported (so before the options are registered);
    `python -m loadtests` registers them first, so its help lists every one, with its variable."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    out = subprocess.run([sys.executable, "-m", "loadtests", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    for option in ("--drill-directive", "--drill-method", "--drill-request", "--drill-message-rate", "--master-host"):
        assert option in out.stdout, option
