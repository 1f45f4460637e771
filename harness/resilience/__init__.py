"""Resilience under test (contracts §9): retries, budget, breaker, deadlines, balancing, named configs.

Small composable strategies (backoff, budget, breaker, deadline, balancer, timeouts)
composed by a named configuration and driven by `ResilientCaller`. Transport-agnostic:
the caller is given an `Invoke` per method (`unary_invoker()` builds one from a
channel factory and a full method name); it knows no service, stub or generated code.
"""

from harness.resilience.caller import ResilientCaller
from harness.resilience.config import NAMES, ConfigError, ResilienceConfig, from_dict, load
from harness.resilience.invoke import ChannelPool, Invoke, unary_invoker

__all__ = [
    "NAMES",
    "ChannelPool",
    "ConfigError",
    "Invoke",
    "ResilienceConfig",
    "ResilientCaller",
    "from_dict",
    "load",
    "unary_invoker",
]
