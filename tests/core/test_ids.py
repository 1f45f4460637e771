"""The request ids a drill's load sends (`harness.core.ids`): their form, their determinism, their length, and
that the hits of neighbouring ids are independent draws at the ratio, as a fair coin's would be.

The hit formula adds the id's Java `String.hashCode` to a constant (contracts §4), and the hash codes of
numbered strings are consecutive numbers: `PLAN-SEED-USER-N` ids walked through the buckets in order, so a
50 % fault hit runs of 10–30 calls in a row. The statistical test below measures that at three scales (runs
of hits, blocks of 10, blocks of 100) over many seeds, configurations and trials, with bounds derived from
the fair-coin model; the numbered form fails it (the last test shows by how much).
"""

from __future__ import annotations

import hashlib
import math

import pytest

from harness.core import headers as h
from harness.core.errors import BadInput
from harness.core.faults import is_hit
from harness.core.gate import FaultGate, Outcome
from harness.core.ids import MAX_PLAN_NAME_LEN, check_plan_name, request_id
from harness.core.limits import MAX_PHASE_S, MAX_USER_RATE, MAX_USERS, MIN_SEED
from harness.core.settings import FaultSettings


def numbered(plan: str, seed: int, config: str, trial: int, user: str, n: int) -> str:
    """The form the runner sent before the mix: consecutive hash codes."""
    return f"{plan}-{seed}-{user}-{n}"


def test_an_id_is_its_readable_part_and_64_bits_of_sha256_over_its_coordinates():
    mix = hashlib.sha256(b"42/naive/3/drill0/17").hexdigest()[:16]
    assert request_id("retry-storm", 42, "naive", 3, "drill0", 17) == f"retry-storm-42-drill0-17-{mix}"
    # a configuration may hold a `/` (a path to a YAML file): the mix still names one call only
    assert request_id("p", 1, "/etc/x.yaml", 2, "drill0", 5).endswith(
        hashlib.sha256(b"1//etc/x.yaml/2/drill0/5").hexdigest()[:16]
    )


def test_ids_are_deterministic_and_each_trial_and_configuration_draws_its_own():
    def ids(config: str, trial: int) -> list[str]:
        return [request_id("p", 7, config, trial, "drill0", n) for n in range(200)]

    def hits(config: str, trial: int) -> list[bool]:
        return [is_hit(7, i, "abort:UNAVAILABLE", 50) for i in ids(config, trial)]

    assert ids("naive", 1) == ids("naive", 1) and len(set(ids("naive", 1))) == 200
    assert not set(ids("naive", 1)) & set(ids("naive", 2)) and not set(ids("naive", 1)) & set(ids("budget", 1))
    # the readable part is the same call; which of them are hit differs (200 fair draws agreeing by chance: 2^-200)
    assert [i.rsplit("-", 1)[0] for i in ids("naive", 1)] == [i.rsplit("-", 1)[0] for i in ids("naive", 2)]
    assert len({tuple(hits(c, t)) for c in ("naive", "budget") for t in (1, 2)}) == 4


def test_the_longest_id_a_plan_allows_is_within_the_gates_bound_and_the_gate_decides_it():
    user = f"organic{MAX_USERS - 1}.w{2**22}"  # a Locust worker that named its users by its pid
    n = int(3 * MAX_PHASE_S * MAX_USER_RATE) - 1  # the last call of three phases of the longest length
    longest = request_id("p" * MAX_PLAN_NAME_LEN, MIN_SEED, "naive", 1, user, n)
    assert len(longest) == h.MAX_VALUE_LEN
    gate = FaultGate(FaultSettings(enabled=True, seed=MIN_SEED, service="ledger", instance_id="ledger-0"))
    md = {h.TENANT: "tenant-drill", h.FAULT: "abort:UNAVAILABLE", h.REQUEST_ID: longest}
    assert gate.decide(md, "m").outcome is Outcome.HIT
    # one character more would be an oversize value: the gate refuses its directive, so the plan is refused first
    md[h.REQUEST_ID] = longest + "0"
    assert gate.decide(md, "m").outcome is Outcome.REJECTED
    check_plan_name("p" * MAX_PLAN_NAME_LEN)
    too_long = rf"plan name is {MAX_PLAN_NAME_LEN + 1} characters: at most {MAX_PLAN_NAME_LEN}"
    with pytest.raises(BadInput, match=too_long):
        check_plan_name("p" * (MAX_PLAN_NAME_LEN + 1))


def runs_z(hits: list[bool]) -> float:
    """Wald–Wolfowitz: the number of runs (maximal stretches of hits or of misses) against what independent
    draws with these counts give, in standard deviations: mean 2·n1·n2/n + 1, variance
    2·n1·n2·(2·n1·n2 − n) / (n²·(n − 1)). Hits in blocks make too few runs, a negative z."""
    n1 = sum(hits)
    n, n2 = len(hits), len(hits) - n1
    runs = 1 + sum(a != b for a, b in zip(hits, hits[1:], strict=False))
    mean = 2 * n1 * n2 / n + 1
    var = 2 * n1 * n2 * (2 * n1 * n2 - n) / (n * n * (n - 1))
    return (runs - mean) / math.sqrt(var)


def block_spread(hits: list[bool], size: int) -> list[float]:
    """(hits in the block − size/2)² of each block of `size` consecutive calls."""
    return [(sum(hits[i : i + size]) - size / 2) ** 2 for i in range(0, len(hits), size)]


SEEDS = range(12)
CONFIGS = ("naive", "budget", "resilient")
TRIALS = (1, 2, 3)
CALLS = 1000


def statistics(make) -> dict[str, float]:
    """Over 108 sequences (12 seeds × 3 configurations × 3 trials) of 1,000 calls of one user at ratio 50."""
    zs, spread10, spread100, hit = [], [], [], 0
    for seed in SEEDS:
        for config in CONFIGS:
            for trial in TRIALS:
                hits = [is_hit(seed, make("drill", seed, config, trial, "drill0", n), "abort:UNAVAILABLE", 50)
                        for n in range(CALLS)]  # fmt: skip
                zs.append(runs_z(hits))
                spread10 += block_spread(hits, 10)
                spread100 += block_spread(hits, 100)
                hit += sum(hits)
    return {"mean_z": sum(zs) / len(zs), "var10": sum(spread10) / len(spread10), "sequences": len(zs),
            "var100": sum(spread100) / len(spread100), "share": hit / (len(zs) * CALLS)}  # fmt: skip


# Bounds, each five standard deviations of the statistic under the fair-coin model (every call an independent
# draw, P(hit) = ½: the bucket is uniform over 0…99), so a correct mix fails one with probability < 10⁻⁵:
# - runs: each sequence's z is N(0, 1) (n = 1,000 is far into the normal approximation); the mean of S = 108
#   of them has standard deviation 1/√S = 0.096: |mean z| ≤ 0.48.
# - blocks of 10: hits ~ Binomial(10, ½), variance npq = 2.5; (x − 5)² has variance μ4 − σ⁴ with μ4 =
#   npq(1 + 3(n − 2)pq) = 17.5, so 11.25; the mean over K = 10,800 blocks has sd √(11.25/K) = 0.032: ±0.16.
# - blocks of 100: variance 25; μ4 = 25 · (1 + 3 · 98/4) = 1,862.5, so (x − 50)² has variance 1,237.5; over
#   K = 1,080 blocks sd √(1237.5/K) = 1.07: ±5.35.
# - the share of hits over 108,000 draws: sd √(¼/108,000) = 0.0015: ±0.0076.
BOUNDS = {"mean_z": (0.0, 0.48), "var10": (2.5, 0.16), "var100": (25.0, 5.35), "share": (0.5, 0.0076)}


def test_hits_of_the_ids_scatter_like_independent_draws_at_the_ratio_at_every_scale():
    got = statistics(request_id)
    assert got["sequences"] == 108
    for key, (want, bound) in BOUNDS.items():
        assert abs(got[key] - want) <= bound, (key, got)


def test_numbered_ids_fail_the_same_test_hits_come_in_blocks():
    """The test above has teeth: the numbered form's hits come in runs (far fewer runs than independent draws
    make), and a block of 10 calls is nearly all hits or all misses."""
    got = statistics(numbered)
    assert got["mean_z"] < -20 and got["var10"] > 15, got
    assert abs(got["mean_z"]) > BOUNDS["mean_z"][1] and abs(got["var10"] - 2.5) > BOUNDS["var10"][1]
