"""Configuration loading: gRPC service-config keys, our extensions beside them, strict validation."""

from __future__ import annotations

import json

import pytest

from harness.resilience import config as rconfig
from harness.resilience.backoff import FullJitter, NoBackoff
from harness.resilience.budget import RetryThrottle

RETRY = {
    "maxAttempts": 3,
    "initialBackoff": "0.1s",
    "maxBackoff": "1s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}


@pytest.mark.parametrize("name", rconfig.NAMES)
def test_named_configurations_load_and_carry_their_name(name):
    cfg = rconfig.load(name)
    assert cfg.name == name
    assert cfg.retry.non_idempotent == {"Write"}  # named in each file, not guessed by the code


def test_configuration_ladder_adds_mechanisms():
    naive, jitter, budget, resilient, p2c, throttled = (rconfig.load(n) for n in rconfig.NAMES)
    assert naive.backoff["kind"] == "none" and naive.budget is None and naive.breaker is None
    assert isinstance(naive.build_backoff(), NoBackoff) and naive.retry.max_attempts == 4
    assert jitter.backoff == {"kind": "full_jitter", "base_s": 0.025, "cap_s": 1.0, "multiplier": 2.0}
    assert jitter.budget is None
    assert budget.budget == {"ratio": 0.1, "min_retries_per_s": 1.0, "window_s": 10.0, "burst_s": 1.0}
    assert budget.retry.pushback_on_give_up and not jitter.retry.pushback_on_give_up
    assert resilient.breaker["failure_rate"] == 0.5 and resilient.breaker["window"] == {"kind": "time", "seconds": 10.0}
    assert resilient.breaker["min_calls"] == 100 and resilient.breaker["half_open_probes"] == 10  # resilience4j
    assert resilient.outcomes == {"relayed_give_ups": "ignore"}
    assert resilient.deadline.propagate and resilient.deadline.total_s == 2.0  # methodConfig timeout
    assert resilient.retry.max_attempts == 3 and resilient.backoff["cap_s"] == 0.5
    # a fixed per-attempt timeout: a stall shorter than it only delays calls (test_stall.py)
    assert resilient.timeouts["default"] == {"kind": "fixed", "seconds": 1.0} and not resilient.timeouts.get("methods")
    assert p2c.timeouts["methods"]["Call"]["kind"] == "p99"
    assert p2c.balancer["kind"] == "p2c" and p2c.balancer["ejection"]["latency_factor"] == 5.0
    assert throttled.breaker is None and throttled.budget is None
    assert throttled.adaptive == {"k": 2.0, "window_s": 10.0}
    assert throttled.throttling == {"max_tokens": 10.0, "token_ratio": 0.1}


def test_durations_take_grpc_strings_and_numbers():
    a = rconfig.from_dict({"name": "a", "retryPolicy": RETRY})
    b = rconfig.from_dict({"name": "b", "retryPolicy": {**RETRY, "initialBackoff": 0.1, "maxBackoff": 1}})
    assert a.backoff == b.backoff == {"kind": "full_jitter", "base_s": 0.1, "cap_s": 1.0, "multiplier": 2.0}


def test_a_real_grpc_service_config_json_loads(tmp_path):
    service_config = {
        "methodConfig": [
            {"name": [{"service": "other.v1.Echo"}], "timeout": "0.5s", "retryPolicy": RETRY, "waitForReady": True},
            {"name": [{"service": "other.v1.Echo", "method": "Shout"}], "timeout": "3s"},
        ],
        "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1},
    }
    path = tmp_path / "echo.json"
    path.write_text(json.dumps(service_config))
    cfg = rconfig.load(str(path))
    assert cfg.name == "echo"  # named after the file
    say = cfg.for_method("other.v1.Echo/Say")  # the service entry
    assert say.retry.max_attempts == 3 and say.timeout_s == 0.5
    assert isinstance(cfg.build_backoff(spec=say.backoff), FullJitter)
    shout = cfg.for_method("/other.v1.Echo/Shout")  # the exact entry wins and has no retryPolicy
    assert shout.retry.max_attempts == 1 and shout.timeout_s == 3.0
    other = cfg.for_method("else.v1.Svc/Do")  # no default entry: no retries, no timeout
    assert other.retry.max_attempts == 1 and other.timeout_s is None
    assert isinstance(cfg.build_throttle(), RetryThrottle)
    assert rconfig.from_dict(service_config, name="as-dict").for_method("other.v1.Echo/Say").timeout_s == 0.5


def test_the_default_method_config_entry_is_the_default():
    cfg = rconfig.from_dict({"name": "d", "methodConfig": [{"name": [{}], "timeout": "2s", "retryPolicy": RETRY}]})
    assert cfg.retry.max_attempts == 3 and cfg.deadline.total_s == 2.0
    assert cfg.for_method("any.Svc/M").timeout_s == 2.0


def test_throttling_follows_grfc_a6():
    t = RetryThrottle(max_tokens=10, token_ratio=0.1)
    for _ in range(4):
        t.record(failed=True)
    assert t.allows_retry()  # 6 > 5
    t.record(failed=True)
    assert not t.allows_retry()  # 5 ≤ 5
    for _ in range(10):
        t.record(failed=False)
    assert t.allows_retry() and t.tokens == pytest.approx(6.0)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"name": "x", "retry": {}}, "x: retry: unknown key"),
        ({"name": "x", "breakr": {}}, "breakr: unknown key"),
        ({"retryPolicy": RETRY}, "name: required"),
        ({"name": "x", "retryPolicy": {**RETRY, "maxAttemps": 3}}, "retryPolicy.maxAttemps: unknown key"),
        ({"name": "x", "retryPolicy": {**RETRY, "maxAttempts": 6}}, "retryPolicy.maxAttempts: 6 out of range"),
        ({"name": "x", "retryPolicy": {**RETRY, "maxAttempts": 1}}, "retryPolicy.maxAttempts: 1 out of range"),
        ({"name": "x", "retryPolicy": {**RETRY, "maxAttempts": "3"}}, "retryPolicy.maxAttempts: must be an integer"),
        ({"name": "x", "retryPolicy": {k: v for k, v in RETRY.items() if k != "maxBackoff"}}, "maxBackoff: required"),
        ({"name": "x", "retryPolicy": {**RETRY, "initialBackoff": "fast"}}, "retryPolicy.initialBackoff: 'fast'"),
        ({"name": "x", "retryPolicy": {**RETRY, "maxBackoff": "0.01s"}}, "maxBackoff: 0.01s is below"),
        ({"name": "x", "retryPolicy": {**RETRY, "retryableStatusCodes": ["NOPE"]}}, "retryableStatusCodes"),
        ({"name": "x", "retryPolicy": {**RETRY, "retryableStatusCodes": ["OK"]}}, "retryableStatusCodes"),
        ({"name": "x", "backoff": {"jitter": "full", "kind": "x"}}, "backoff.kind: unknown key"),
        ({"name": "x", "backoff": {"jitter": "sometimes"}}, "backoff.jitter: 'sometimes' is not one of"),
        ({"name": "x", "breaker": {"window": {"kind": "count", "sise": 50}}}, "x: breaker.window.sise: unknown key"),
        ({"name": "x", "breaker": {"window": {"kind": "count", "duration": "5s"}}}, "breaker.window.duration"),
        ({"name": "x", "breaker": {"window": {"kind": "bucket"}}}, "breaker.window.kind"),
        ({"name": "x", "breaker": {"failureRate": 0}}, "breaker.failureRate: 0 out of range"),
        ({"name": "x", "breaker": {"failureRate": 1.5}}, "breaker.failureRate: 1.5 out of range"),
        ({"name": "x", "breaker": {"minCalls": 60, "window": {"kind": "count", "size": 50}}}, "breaker.minCalls: 60"),
        ({"name": "x", "breaker": {"per": "host"}}, "breaker.per"),
        ({"name": "x", "retryBudget": {"ratio": 1.5}}, "retryBudget.ratio: 1.5 out of range"),
        ({"name": "x", "retryBudget": {"ratio": 0.1, "window_s": 10}}, "retryBudget.window_s: unknown key"),
        ({"name": "x", "retryThrottling": {"maxTokens": 10}}, "retryThrottling.tokenRatio: required"),
        ({"name": "x", "retryThrottling": {"maxTokens": 2000, "tokenRatio": 0.1}}, "retryThrottling.maxTokens"),
        ({"name": "x", "balancer": {"kind": "random"}}, "balancer.kind: 'random'"),
        ({"name": "x", "balancer": {"kind": "p2c", "ejection": {"maxEjectionPercent": 150}}}, "maxEjectionPercent"),
        ({"name": "x", "deadline": {"propagate": "yes"}}, "deadline.propagate: must be true or false"),
        ({"name": "x", "attemptTimeouts": {"default": {"kind": "fixed"}}}, "attemptTimeouts.default.timeout: required"),
        ({"name": "x", "attemptTimeouts": {"default": {"kind": "p99", "floor": "2s", "cap": "1s"}}}, "floor"),
        ({"name": "x", "methodConfig": [{"name": [{"method": "Say"}]}]}, "methodConfig[0].name[0].method"),
        ({"name": "x", "methodConfig": [{"name": [{}], "hedgingPolicy": {}}]}, "methodConfig[0].hedgingPolicy"),
        ({"name": "x", "methodConfig": [{"name": [{}]}, {"name": [{}]}]}, "methodConfig[1].name: ('', '')"),
        (
            {"name": "x", "retryPolicy": RETRY, "methodConfig": [{"name": [{}], "retryPolicy": RETRY}]},
            "retryPolicy: also given",
        ),
        ({"name": "x", "nonIdempotentMethods": "Write"}, "nonIdempotentMethods: must be a list"),
    ],
)
def test_bad_configurations_are_refused_naming_the_key(raw, message):
    with pytest.raises(rconfig.ConfigError) as err:
        rconfig.from_dict(raw, "x")
    assert message in str(err.value)


def test_a_typo_in_a_shipped_file_names_file_and_path(tmp_path):
    text = (rconfig.CONFIG_DIR / "resilient.yaml").read_text().replace("duration: 10s", "duraton: 10s")
    path = tmp_path / "resilient.yaml"
    path.write_text(text)
    with pytest.raises(rconfig.ConfigError, match=r"^resilient\.yaml: breaker\.window\.duraton: unknown key$"):
        rconfig.load(str(path))


def test_unknown_name_is_refused():
    with pytest.raises(rconfig.ConfigError):
        rconfig.load("no-such-config")
