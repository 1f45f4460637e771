"""Optional drill token (contracts §2, `x-drill-token`).

When a server has a drill secret, a call is drill traffic (and a directive may
fire) only with a valid HMAC-SHA256 over everything that says what, where and
how widely to inject:

    request id, tenant, directive, ratio, target service, instance share, method,
    scope, attempts, expiry

Ratio, instance share, scope and attempts are signed as sent (`x-fault-ratio`,
`x-fault-instances`, `x-fault-scope`, `x-fault-attempts`; absent = empty), so removing
or changing any of them voids the token: stripping `x-fault-attempts` would turn "fail
the first attempt" into "fail every retry", and switching the scope changes which calls
are hit. The
target is the service named by `x-fault-target`, and the hop that injects checks
that it is its own name: a token without a target injects nowhere. The method is
`x-fault-method` (`pkg.Service/Method`). Tokens live at most `max_ttl_s` (default
one hour): a token whose expiry lies further ahead is refused. Format:
`EXPIRY.HEX`, EXPIRY in unix seconds. A spoofed `x-tenant-id` alone is organic.
"""

from __future__ import annotations

import hashlib
import hmac
import time

#: Longest token accepted or forwarded (`EXPIRY.HEX` is 75 characters).
MAX_TOKEN_LEN = 128
#: Default cap on a token's remaining lifetime (seconds).
DEFAULT_MAX_TTL_S = 3600.0

_VERSION = "drill-token-3"
#: The signed values, in message order.
_SIGNED = ("request_id", "tenant", "directive", "ratio", "target", "instances", "method", "scope", "attempts")


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _message(expiry: int, **values: object) -> bytes:
    parts = [_VERSION] + [_text(values[k]) for k in _SIGNED] + [str(expiry)]
    return "\n".join(parts).encode()


def sign(
    secret: str,
    *,
    request_id: str,
    tenant: str,
    directive: str = "",
    ratio: int | str | None = None,
    target: str = "",
    instances: int | str | None = None,
    method: str = "",
    scope: str | None = None,
    attempts: int | str | None = None,
    ttl_s: float = 300.0,
    now: float | None = None,
) -> str:
    """Token authorising one directive for one request id, service, method, replica share, scope and
    attempt count until now + ttl."""
    expiry = int((time.time() if now is None else now) + ttl_s)
    msg = _message(
        expiry, request_id=request_id, tenant=tenant, directive=directive, ratio=ratio, target=target,
        instances=instances, method=method, scope=scope, attempts=attempts,
    )  # fmt: skip
    return f"{expiry}.{hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()}"


def check(
    secret: str,
    token: str | None,
    *,
    request_id: str,
    tenant: str,
    directive: str = "",
    ratio: str | None = None,
    target: str = "",
    instances: str | None = None,
    method: str = "",
    scope: str | None = None,
    attempts: str | None = None,
    now: float | None = None,
    max_ttl_s: float = DEFAULT_MAX_TTL_S,
) -> str:
    """'' if the token is valid for exactly these values, else why not (missing, malformed,
    oversize, expired, lifetime, mismatch)."""
    if not token:
        return "missing"
    if len(token) > MAX_TOKEN_LEN:
        return "oversize"
    expiry_text, dot, digest = token.partition(".")
    if not dot or not expiry_text.isascii() or not expiry_text.isdigit() or len(expiry_text) > 12:
        return "malformed"
    expiry = int(expiry_text)
    t = time.time() if now is None else now
    if expiry < t:
        return "expired"
    if expiry - t > max_ttl_s:
        return "lifetime"
    msg = _message(
        expiry, request_id=request_id, tenant=tenant, directive=directive, ratio=ratio, target=target,
        instances=instances, method=method, scope=scope, attempts=attempts,
    )  # fmt: skip
    mac = hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()
    return "" if hmac.compare_digest(mac, digest) else "mismatch"


def verify(secret: str, token: str | None, **values) -> bool:
    """True if `check` finds nothing wrong."""
    return check(secret, token, **values) == ""
