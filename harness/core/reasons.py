"""Why a directive is refused, in words for people: the edge's text for each `RejectReason`.

The reasons stay short enum values where machines read them (the `reason` label of
`drill_fault_rejected_total`, audit lines); wherever a person reads one (a plan error,
`drill hits`, `drill client`), it is said with this text instead: never `unknown_mode`.
"""

from __future__ import annotations

from harness.core.faults import MAX_ATTEMPTS, MAX_STREAM_MESSAGES, DirectiveError, RejectReason
from harness.core.headers import MAX_VALUE_LEN

_FORMS = "delay:MS, delay:MIN-MAX, abort:CODE or drop:MS"

#: RejectReason → its text; `{detail}` is what the parser found (a value, a length).
TEXT: dict[RejectReason, str] = {
    RejectReason.EMPTY: f"an empty directive (give {_FORMS})",
    RejectReason.OVERSIZE: f"longer than {MAX_VALUE_LEN} characters ({{detail}})",
    RejectReason.BAD_CHARS: "{detail}: a directive is letters, digits, '_', ':' and '-', each option after '@' as "
    "KEY=VALUE (e.g. delay:500@after=3)",
    RejectReason.UNKNOWN_MODE: f"unknown mode {{detail!r}} (a directive is {_FORMS})",
    RejectReason.BAD_ARGUMENT: "a bad argument ({detail}): delay and drop take whole milliseconds, abort a status name",
    RejectReason.NEGATIVE: "a negative time ({detail} ms)",
    RejectReason.OVER_MAX: "longer than the servers' longest delay ({detail} ms, DRILL_FAULT_MAX_DELAY_MS)",
    RejectReason.UNKNOWN_CODE: "{detail!r} is not a gRPC status name (e.g. UNAVAILABLE, DEADLINE_EXCEEDED)",
    RejectReason.OK_CODE: "abort:OK injects no fault: abort with an error status (e.g. abort:UNAVAILABLE)",
    RejectReason.BAD_RATIO: "the ratio {detail} is not a whole number 0-100",
    RejectReason.BAD_INSTANCES: "the instances share {detail} is not a whole number 0-100",
    RejectReason.BAD_SCOPE: "the scope {detail} is neither request nor attempt",
    RejectReason.BAD_ATTEMPTS: f"the attempts {{detail}} are not a whole number 1-{MAX_ATTEMPTS}",
    RejectReason.BAD_ATTEMPT_NUMBER: f"the attempt number {{detail}} is not a whole number 0-{MAX_ATTEMPTS}",
    RejectReason.BAD_OPTION: "{detail} (a directive may end in @after=N, @read=N or @headers=sent, each at most once)",
    RejectReason.BAD_COUNT: f"{{detail}}: a message count is a whole number 1-{MAX_STREAM_MESSAGES:,}",
    RejectReason.CONFLICTING_OPTIONS: "options that cannot go together ({detail}): @after with @read, or @after with "
    "@headers=sent",
    RejectReason.WRONG_KIND: "an option the method's kind cannot have ({detail}): @after needs a response stream, "
    "@read a request stream",
    RejectReason.BAD_BAGGAGE: "a baggage header with drill. entries that is not W3C baggage or is over its limits "
    "(8,192 bytes, 180 members): {detail}",
}


def explain(err: DirectiveError) -> str:
    """`err` in words (its reason's text with what the parser found)."""
    _, _, detail = str(err).partition(": ")
    text = TEXT.get(err.reason)
    if text is None:  # a reason added without its words: still never the bare label
        return err.reason.value.replace("_", " ") + (f" ({detail})" if detail else "")
    return text.format(detail=detail or "?")
