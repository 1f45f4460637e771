"""Resilience under test (DESIGN §9): retries, budget, breaker, deadlines, balancing, named configs.

Small composable strategies (backoff, budget, breaker, deadline, balancer, timeouts)
composed by a named YAML configuration and driven by `ResilientCaller`.
"""

from harness.resilience.caller import ResilientCaller, as_downstream, downstream_for
from harness.resilience.config import NAMES, ConfigError, ResilienceConfig, from_dict, load

__all__ = [
    "NAMES",
    "ConfigError",
    "ResilienceConfig",
    "ResilientCaller",
    "as_downstream",
    "downstream_for",
    "from_dict",
    "load",
]
