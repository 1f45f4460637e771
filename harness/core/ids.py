"""The request ids a drill's load sends: one form for every driver, whose hits scatter as the ratio says.

An id is `PLAN-SEED-USER-N-MIX`: the readable part names the call for a person reading an audit line (the
plan, its seed, the user, the user's call number), and `MIX` is the first 16 hex digits (64 bits) of
SHA-256 over `SEED/CONFIG/TRIAL/USER/N`. The mix is why it is there. The hit formula (contracts §4) adds
the id's Java `String.hashCode` to a constant, and the hash codes of numbered strings (`…-50`, `…-51`, …)
are consecutive numbers, so `floorMod(…, 100)` walks through the buckets in order: a 50 % fault would hit
runs of 10–30 calls in a row, then miss as many. With a mix of the call's coordinates at the end, each
id's hash code, and so its hit, is independent of its neighbours': hits spread like a fair coin's at every
scale. SHA-256 is in every language's standard library, so a load generator written in another language
makes the same ids.

The configuration and the trial are in the mix, not the readable part: each trial is an independent draw
(trials are replicates, and the verdict treats them as independent), and the same (seed, configuration,
trial) always gives the same ids. The mixed text is unambiguous: the seed, trial, user and N hold no `/`,
so only the configuration (between them) may.

Every id stays within the gate's bound on a metadata value (`headers.MAX_VALUE_LEN`) for any seed, user
and call number a plan allows (`harness.core.limits`), as long as the plan's name is at most
`MAX_PLAN_NAME_LEN` characters (`check_plan_name`): a longer id would reach the services as an oversize
value, and its directive would be refused there.
"""

from __future__ import annotations

import hashlib

from harness.core.errors import BadInput
from harness.core.headers import MAX_VALUE_LEN
from harness.core.limits import MAX_PHASE_S, MAX_SEED, MAX_USER_RATE, MAX_USERS, MIN_SEED

#: Hex digits of the mix: 64 bits of SHA-256.
MIX_HEX = 16

#: The widest seed: a Java long (`-9223372036854775808`).
_SEED_CHARS = max(len(str(MIN_SEED)), len(str(MAX_SEED)))
#: Linux's largest pid (2^22): a Locust worker whose index is not known yet names its users by its pid.
_MAX_PID = 2**22
#: The widest user: `organic` + its index in the class + a Locust worker's `.wI` (`organic9999.w4194304`).
_USER_CHARS = len("organic") + len(str(MAX_USERS - 1)) + len(".w") + len(str(_MAX_PID))
#: The widest call number: three phases of the longest length at the highest rate one user sends.
_N_CHARS = len(str(int(3 * MAX_PHASE_S * MAX_USER_RATE) - 1))

#: The longest plan name whose ids all stay within `headers.MAX_VALUE_LEN` (188): what the seed, user, call
#: number, mix and four dashes may take is reserved.
MAX_PLAN_NAME_LEN = MAX_VALUE_LEN - (_SEED_CHARS + _USER_CHARS + _N_CHARS + MIX_HEX + 4)


def mix(seed: int, config: str, trial: int, user: str, n: int) -> str:
    """The id's last part: the first 16 hex digits of SHA-256 over `SEED/CONFIG/TRIAL/USER/N` (UTF-8)."""
    return hashlib.sha256(f"{seed}/{config}/{trial}/{user}/{n}".encode()).hexdigest()[:MIX_HEX]


def request_id(plan: str, seed: int, config: str, trial: int, user: str, n: int) -> str:
    """The id of call `n` of `user` in trial `trial` of configuration `config`: `PLAN-SEED-USER-N-MIX`."""
    return f"{plan}-{seed}-{user}-{n}-{mix(seed, config, trial, user, n)}"


def check_plan_name(plan: str) -> None:
    """Refuse (BadInput, exit 2) a plan name its ids could not carry: longer than `MAX_PLAN_NAME_LEN`, or with a
    character a metadata value cannot hold (printable ASCII without spaces, as every other drill key)."""
    if len(plan) > MAX_PLAN_NAME_LEN:
        raise BadInput(
            f"plan name is {len(plan)} characters: at most {MAX_PLAN_NAME_LEN}, or its request ids would be longer "
            f"than the {MAX_VALUE_LEN} characters a service accepts in x-request-id"
        )
    bad = next((c for c in plan if not ("!" <= c <= "~")), None)
    if bad is not None:
        raise BadInput(f"plan name {plan!r} has {bad!r}: its request ids (x-request-id) take printable ASCII "
                       "without spaces")  # fmt: skip
