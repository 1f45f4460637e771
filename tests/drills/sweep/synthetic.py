"""A sweep whose points are synthetic, for the sweep's tests: the runner stubbed at `Sweep._point`, the search,
the store, the summary and the pages real."""

from __future__ import annotations

from harness.drills.sweep.axes import Axis
from harness.drills.sweep.engine import Sweep
from harness.drills.sweep.store import Record, Settings


class SyntheticSweep(Sweep):
    """Never restored iff value >= a configuration's boundary, counting every point it runs; `kill_after` raises
    as a killed process would, after that many points."""

    def __init__(self, *args, boundaries, kill_after=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.boundaries, self.kill_after, self.ran = boundaries, kill_after, []

    def _point(self, value, configs, trials=1):
        if self.kill_after is not None and len(self.ran) >= self.kill_after:
            raise KeyboardInterrupt
        name = f"points/{len({r.point for r in self.records}) + 1:03d}"
        for c in configs:
            never = value >= self.boundaries[c]
            for _ in range(trials):
                self.records.append(Record(c, value, name, never, never, False, None if never else 3.0, 0.5))
        self.ran.append((value, tuple(configs)))
        self.write(None)


def settings() -> Settings:
    """The metastable plan's fault length from 1 to 20 s in 1-s steps, up to 4 trials a point, two configurations."""
    return Settings("metastable", Axis("phases.fault", 1, 20, 1, True), True, 4, ["naive", "budget"])


def records(config: str, value: float, k: int, n: int, point: str = "p") -> list[Record]:
    """`n` trials of `config` at `value`, the first `k` of them never restored."""
    return [Record(config, value, point, i < k, i < k, False, None, None) for i in range(n)]
