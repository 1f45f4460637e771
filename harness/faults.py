"""Stable import path for the hit decision: `harness.faults.is_hit`, `harness.faults.is_hit_attempt`,
`harness.faults.seed_from_drill_id`.

Users and the Java interceptor's cross-checks import these names from here;
the contract itself lives in `harness.core.faults`.
"""

from harness.core.faults import is_hit, is_hit_attempt, seed_from_drill_id

__all__ = ["is_hit", "is_hit_attempt", "seed_from_drill_id"]
