"""One rule for a blank around a directive, and refusals that say what was wrong.

§4 hashes the `x-fault` value as sent, so ` delay:250` and `delay:250` would name one fault and hit
two different sets of request ids. Every parser refuses such a value (never strips it): the servers'
gate, plan validation, `drill hits` and `drill client`'s argument. The words of a refusal echo what
the parser found, whole.
"""

from __future__ import annotations

import argparse
import csv

import pytest

from harness.core import cliargs
from harness.core import headers as h
from harness.core.faults import DirectiveError, RejectReason, hit_bucket, parse_directive
from harness.core.gate import FaultGate, Outcome
from harness.core.reasons import explain
from harness.core.settings import FaultSettings
from harness.drills.plan.sections import Fault
from tests.conftest import drill_inprocess

ON = FaultSettings(enabled=True, seed=7, service="ledger", instance_id="ledger-0")
BLANKED = [" delay:250", "delay:250 ", "\tabort:UNAVAILABLE", "drop:300\u00a0", " abort:UNAVAILABLE@after=2 "]


def _words(raw: str) -> str:
    with pytest.raises(DirectiveError) as info:
        parse_directive(raw)
    return explain(info.value)


@pytest.mark.parametrize("raw", BLANKED)
def test_a_blank_around_a_directive_is_refused_by_every_parser(raw):
    with pytest.raises(DirectiveError) as info:
        parse_directive(raw)
    assert info.value.reason is RejectReason.BAD_CHARS
    assert "before or after" in explain(info.value)
    # the hop that would inject: the call passes untouched, counted as bad_chars
    decision = FaultGate(ON).decide({h.TENANT: "tenant-drill", h.REQUEST_ID: "req-1", h.FAULT: raw})
    assert decision.outcome is Outcome.REJECTED and decision.reason == "bad_chars"
    with pytest.raises(ValueError, match="before or after"):
        Fault(directive=raw)
    with pytest.raises(argparse.ArgumentTypeError, match="before or after"):
        cliargs.directive(raw)
    done = drill_inprocess("hits", "--seed", "7", "--directive", raw)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "before or after" in done.stderr


def test_every_java_vector_directive_is_accepted_as_written(shared_dir):
    # The rule must not move any vector: each spec parses, and what is hashed is the spec itself.
    for name in ("fault_hit_java.tsv", "fault_hit_attempt_java.tsv"):
        with open(shared_dir / "vectors" / name, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader((line for line in fh if not line.startswith("#")), delimiter="\t",
                                       quoting=csv.QUOTE_NONE))  # fmt: skip
        for spec in {row["spec"] for row in rows}:
            assert parse_directive(spec).raw == spec
    row = rows[0]
    assert hit_bucket(int(row["seed"]), row["request_id"], parse_directive(row["spec"]).raw) == hit_bucket(
        int(row["seed"]), row["request_id"], row["spec"]
    )


def test_a_character_outside_the_grammar_is_named_and_the_option_alphabet_is_listed():
    words = _words("delay:1@after=1.5")
    assert words.startswith("'.' at character 16:")
    assert "'@'" in words and "KEY=VALUE" in words  # the option alphabet is part of the grammar


def test_a_long_count_is_echoed_whole():
    n = "1" * 26
    assert f"after={n}:" in _words(f"delay:1@after={n}")
    assert f"read={n}:" in _words(f"delay:1@read={n}")


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("abort:UNAVAILABLE@", "an empty option after '@'"),
        ("abort:UNAVAILABLE@@after=2", "an empty option after '@'"),
        ("abort:UNAVAILABLE@before=3", "unknown option 'before=3'"),
        ("abort:UNAVAILABLE@after", "option 'after' without '=VALUE'"),
        ("abort:UNAVAILABLE@after=1@AFTER=2", "option 'after' given twice"),
        ("abort:UNAVAILABLE@headers=received", "headers=received: headers takes only 'sent'"),
    ],
)
def test_a_bad_option_says_which_and_why(raw, expected):
    words = _words(raw)
    assert words.startswith(expected)
    assert "'empty option'" not in words
