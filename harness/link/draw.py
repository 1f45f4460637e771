"""Which connections a toxic with `toxicity` below 1 hits: a pure, seeded draw by connection order.

Toxiproxy draws each connection from Go's global random source (its `-seed` has had no effect
since v2.9.0), so no run replays. Here the draw is a function of the link's seed, the toxic's
name and the connection's 0-based order on its link: the same seed gives the same connections,
every run, and a preview (`preview`) says which before the drill starts. It reuses the hit
formula's SplitMix64 finalizer (contracts §4) so it is a few lines in any language.
"""

from __future__ import annotations

from harness.core.faults import jhash, splitmix64

#: Draws are made on a scale of a million, so a toxicity is honoured to 1e-6 (Toxiproxy keeps a float32)
SCALE = 1_000_000


def connection_bucket(seed: int, toxic: str, index: int) -> int:
    """`floorMod(splitmix64(31*seed + jhash(toxic) + index), SCALE)`, 64-bit arithmetic."""
    return splitmix64(31 * seed + jhash(toxic) + index) % SCALE  # splitmix64 wraps its input to 64 bits


def connection_hit(seed: int, toxic: str, index: int, toxicity: float) -> bool:
    """Whether the toxic named `toxic` acts on the link's connection number `index` (0-based)."""
    if toxicity >= 1.0:
        return True
    if toxicity <= 0.0:
        return False
    return connection_bucket(seed, toxic, index) < round(toxicity * SCALE)


def preview(seed: int, toxic: str, toxicity: float, count: int) -> str:
    """The first `count` connections as `x` (hit) and `.` (untouched), as the issue writes Toxiproxy's."""
    return "".join("x" if connection_hit(seed, toxic, i, toxicity) else "." for i in range(count))
