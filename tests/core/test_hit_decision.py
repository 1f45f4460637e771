"""The hit decision is bit-compatible with the Java reference and reproducible by request id."""

from __future__ import annotations

import csv
import random
import uuid

import pytest

from harness.core.faults import hit_bucket, is_hit, is_hit_attempt, jhash, seed_from_drill_id, splitmix64


def _vector_rows(shared_dir, name="fault_hit_java.tsv"):
    path = shared_dir / "vectors" / name
    with open(path, newline="", encoding="utf-8") as fh:
        lines = [line for line in fh if not line.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE))


def test_every_java_vector_row_matches(shared_dir):
    rows = _vector_rows(shared_dir)
    assert len(rows) >= 400
    mismatches = []
    for row in rows:
        seed, ratio = int(row["seed"]), int(row["ratio"])
        bucket = hit_bucket(seed, row["request_id"], row["spec"])
        hit = is_hit(seed, row["request_id"], row["spec"], ratio)
        if bucket != int(row["bucket"]) or hit != (row["hit"] == "true"):
            mismatches.append((row, bucket, hit))
    assert not mismatches, mismatches[:3]


def test_drill_id_seeds_from_the_vector_file_header(shared_dir):
    text = (shared_dir / "vectors" / "fault_hit_java.tsv").read_text(encoding="utf-8")
    comment = next(line for line in text.splitlines() if line.startswith("# drill-id seeds:"))
    pairs = dict(item.split("=") for item in comment.split(":", 1)[1].split())
    assert pairs  # the header names at least one drill id
    for drill_id, seed in pairs.items():
        assert seed_from_drill_id(drill_id) == int(seed)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("polygenelubricants", -2147483648),
        ("\U0001f600", 0xD83D * 31 + 0xDE00),
    ],
)
def test_jhash_is_java_string_hashcode(text, expected):
    # Values from Java's String.hashCode; the emoji is a surrogate pair in UTF-16.
    assert jhash(text) == expected


def test_missing_request_id_hashes_to_zero():
    assert jhash(None) == 0
    assert hit_bucket(7, None, "delay:1") == hit_bucket(7, "", "delay:1")


def test_ratio_10_hits_9_to_11_percent_of_10000_uuid4_ids():
    rng = random.Random(20261129)
    ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(10_000)]
    hits = sum(is_hit(42, rid, "abort:UNAVAILABLE", 10) for rid in ids)
    assert 900 <= hits <= 1100, hits


def test_same_request_id_gets_the_same_decision_on_every_retry():
    rng = random.Random(5)
    for _ in range(500):
        rid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        first = is_hit(99, rid, "delay:250", 30)
        assert all(is_hit(99, rid, "delay:250", 30) == first for _ in range(5))


def test_ratio_bounds():
    assert is_hit(1, "x", "delay:1", 100) is True
    assert is_hit(1, "x", "delay:1", 0) is False
    assert is_hit(1, "x", "delay:1", 150) is True


def test_every_java_attempt_vector_row_matches(shared_dir):
    rows = _vector_rows(shared_dir, "fault_hit_attempt_java.tsv")
    assert len(rows) >= 300
    mismatches = [
        row
        for row in rows
        if is_hit_attempt(
            int(row["seed"]), row["request_id"], row["spec"], int(row["ratio"]), int(row["attempt"]), "attempt"
        )
        != (row["hit"] == "true")
    ]
    assert not mismatches, mismatches[:3]


def test_attempt_zero_is_the_request_decision_and_later_attempts_are_independent_draws():
    rng = random.Random(11)
    ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(4000)]
    assert all(
        is_hit_attempt(3, rid, "abort:UNAVAILABLE", 40, 0, "attempt") == is_hit(3, rid, "abort:UNAVAILABLE", 40)
        for rid in ids
    )
    first = [rid for rid in ids if is_hit(3, rid, "abort:UNAVAILABLE", 40)]
    again = sum(is_hit_attempt(3, rid, "abort:UNAVAILABLE", 40, 1, "attempt") for rid in first)
    assert 0.35 <= again / len(first) <= 0.45  # P(hit on 1 | hit on 0) = ratio, not 1


def test_fault_attempts_limits_a_hit_to_its_first_n_attempts():
    assert [is_hit_attempt(1, "r", "abort:UNAVAILABLE", 100, n, "request", 2) for n in range(4)] == [
        True, True, False, False,
    ]  # fmt: skip
    assert splitmix64(0) == -2152535657050944081  # 0xE220A8397B1DCDAF, SplitMix64's first output for seed 0
