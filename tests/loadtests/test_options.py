"""The `--drill-*` option parsing the drill runner relies on (no locust in this process)."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from loadtests import options
from tests.conftest import ROOT


def test_option_and_phase_modules_import_neither_locust_nor_gevent():
    code = (
        "import sys, loadtests, loadtests.options, loadtests.phase; "
        "bad = {'locust', 'gevent'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=30)


def test_phases_parse_in_order_and_mark_the_fault_phase():
    phases = options.parse_phases("warmup=10, fault=20,recovery=2.5")
    assert [(p.name, p.seconds, p.fault) for p in phases] == [
        ("warmup", 10.0, False),
        ("fault", 20.0, True),
        ("recovery", 2.5, False),
    ]


@pytest.mark.parametrize("text", ["", "  ", None])
def test_empty_phases_mean_no_shape(text):
    assert options.parse_phases(text) == ()


@pytest.mark.parametrize("text", ["warmup", "fault=0", "fault=-1", "=3", "a=1,a=2", "fault=x"])
def test_bad_phases_are_refused(text):
    with pytest.raises(ValueError):
        options.parse_phases(text)


def test_weights_default_to_one_each_and_parse_both_classes():
    assert options.parse_weights("") == {"organic": 1, "drill": 1}
    assert options.parse_weights("organic=3,drill=1") == {"organic": 3, "drill": 1}
    assert options.parse_weights("drill=2") == {"organic": 1, "drill": 2}
    assert options.parse_weights("organic=5,drill=0") == {"organic": 5, "drill": 0}  # organic-only baseline


@pytest.mark.parametrize("text", ["organic=0,drill=0", "organic=-1", "bots=2", "organic"])
def test_bad_weights_are_refused(text):
    with pytest.raises(ValueError):
        options.parse_weights(text)


def _ns(**kw):
    base = dict(
        drill_tenant="tenant-drill",
        drill_directive="",
        drill_ratio=100,
        drill_target="",
        drill_instances="",
        drill_config="none",
        drill_plan="adhoc",
        drill_phases="",
        drill_users=20,
        drill_weights="",
        drill_rate=0.0,
        drill_timeout=2.0,
        drill_cancel_ms="",
        drill_cancel_share="",
        drill_metrics_port="",
    )
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_namespace_defaults_match_the_documented_interface():
    o = options.from_namespace(_ns())
    assert o.tenant == "tenant-drill"
    assert o.directive is None and o.ratio == 100 and o.target is None and o.instances is None
    assert o.config == "none" and o.plan == "adhoc" and o.phases == ()
    assert o.users == 20 and o.rate == 0.0 and o.timeout == 2.0
    assert o.cancel_ms is None and o.cancel_share == 0 and o.metrics_port is None


def test_cancel_ms_alone_cancels_every_drill_call_and_a_share_narrows_it():
    assert options.from_namespace(_ns(drill_cancel_ms="50")).cancel_share == 100
    assert options.from_namespace(_ns(drill_cancel_ms="50", drill_cancel_share="10")).cancel_share == 10


def test_namespace_carries_every_drill_value():
    o = options.from_namespace(
        _ns(
            drill_directive="abort:UNAVAILABLE",
            drill_ratio=30,
            drill_target="b",
            drill_instances="50",
            drill_phases="warmup=1,fault=2",
            drill_cancel_ms="5",
            drill_cancel_share=10,
            drill_metrics_port="9700",
        )
    )
    assert (o.directive, o.ratio, o.target, o.instances) == ("abort:UNAVAILABLE", 30, "b", 50)
    assert o.total_seconds == 3.0
    assert (o.cancel_ms, o.cancel_share, o.metrics_port) == (5.0, 10, 9700)


@pytest.mark.parametrize(
    "kw",
    [{"drill_ratio": 101}, {"drill_cancel_share": "-1"}, {"drill_instances": "200"}, {"drill_timeout": 0}],
)
def test_out_of_range_values_are_refused(kw):
    with pytest.raises(ValueError):
        options.from_namespace(_ns(**kw))


def test_fault_scope_and_attempts_reach_the_drill_users_tagging():
    o = options.from_namespace(_ns(drill_fault_scope="attempt", drill_fault_attempts="2"))
    assert (o.scope, o.attempts) == ("attempt", 2)
    d = options.from_namespace(_ns())
    assert (d.scope, d.attempts) == ("request", None)  # absent keys: today's behaviour


@pytest.mark.parametrize("kw", [{"drill_fault_scope": "retry"}, {"drill_fault_attempts": "0"}])
def test_bad_fault_scope_or_attempts_are_refused(kw):
    with pytest.raises(ValueError):
        options.from_namespace(_ns(**kw))


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (" delay:250", "bad_chars"),  # a blank moves the hit set: refused as the servers refuse it
        ("delay:250 ", "bad_chars"),
        ("delay:fast", "bad_argument"),
        ("abort:OK", "ok_code"),
        ("delay:250@after=1@read=1", "conflicting_options"),
        (" ", "empty"),
    ],
)
def test_a_directive_the_servers_would_refuse_is_refused_before_the_first_call(raw, says):
    with pytest.raises(ValueError) as err:
        options.from_namespace(_ns(drill_directive=raw))
    assert str(err.value).startswith(f"--drill-directive {raw!r}: {says}")


def test_a_directive_is_sent_exactly_as_given_and_an_empty_one_means_none():
    assert options.from_namespace(_ns(drill_directive="delay:250@after=2")).directive == "delay:250@after=2"
    assert options.from_namespace(_ns(drill_directive="")).directive is None
